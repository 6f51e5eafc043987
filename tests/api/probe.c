/* nic_probe: runs one allocation scenario under whatever NICMALLOC_* settings its environment
 * holds and prints key=value lines for the test that spawned it. The scenarios live in
 * probe_*.c, one concern a file; this is the table of commands. */
#include "probe_common.h"

#include <stdio.h>
#include <string.h>

/* nic_probe NAME ARGS...: run(argc, argv) once argc is at least min_argc. */
static const struct command {
  const char *name;
  int min_argc;
  int (*run)(int argc, char **argv);
} commands[] = {
    {"as-limit", 4, cmd_as_limit},
    {"as-limit-kib", 4, cmd_as_limit_kib},
    {"as-limit-later", 3, cmd_as_limit_later},
    {"as-limit-huge", 4, cmd_as_limit_huge},
    {"dp-room", 2, cmd_dp_room},
    {"mlockall-limited", 2, cmd_mlockall_limited},
    {"guest-start", 2, cmd_guest_start},
    {"low-memlock-guest", 2, cmd_low_memlock_guest},
    {"no-uring", 3, cmd_no_uring},
    {"no-getrandom", 3, cmd_no_getrandom},
    {"fixed-layout", 3, cmd_fixed_layout},
    {"free-key", 2, cmd_free_key},
    {"stats-read", 2, cmd_stats_read},
    {"stats-walk", 3, cmd_stats_walk},
    {"step-reads", 4, cmd_step_reads},
    {"limit-later", 7, cmd_limit_later},
    {"no-populate", 3, cmd_no_populate},
    {"big-block", 3, cmd_big_block},
    {"fill-control", 2, cmd_fill_control},
    {"uring-endpoint", 2, cmd_uring_endpoint},
    {"in-cgroup", 4, cmd_in_cgroup},
    {"data-limit", 4, cmd_data_limit},
    {"huge-until-null", 3, cmd_huge_until_null},
    {"refused-arena-commit", 3, cmd_refused_arena_commit},
    {"first-dp-reads", 3, cmd_first_dp_reads},
    {"dp-register", 3, cmd_dp_register},
    {"register-blocks", 4, cmd_register_blocks},
    {"dp-alloc", 4, cmd_dp_alloc},
    {"low-memlock", 3, cmd_low_memlock},
    {"low-memlock-fill", 4, cmd_low_memlock_fill},
    {"step-release", 4, cmd_step_release},
    {"step-freed-entry", 3, cmd_step_freed_entry},
    {"step-cached", 3, cmd_step_cached},
    {"step-abandoned", 3, cmd_step_abandoned},
    {"memlock-steps", 5, cmd_memlock_steps},
    {"pin-refused", 6, cmd_pin_refused},
    {"repin", 4, cmd_repin},
    {"low-memlock-register", 4, cmd_low_memlock_register},
    {"low-memlock-sga", 4, cmd_low_memlock_sga},
    {"memlock-rcache", 6, cmd_memlock_rcache},
    {"user-auto-sga", 2, cmd_user_auto_sga},
    {"fork-child", 3, cmd_fork_child},
    {"fork-write-race", 5, cmd_fork_write_race},
    {"fork-while-opening", 3, cmd_fork_while_opening},
    {"fork-while-registering", 3, cmd_fork_while_registering},
    {"fork-after-open", 3, cmd_fork_after_open},
    {"fork-post", 2, cmd_fork_post},
    {"fork-event-set", 2, cmd_fork_event_set},
    {"auto", 3, cmd_auto},
    {"cap-again", 3, cmd_cap_again},
    {"threads-start", 4, cmd_threads_start},
    {"lifetime-blocks", 2, cmd_lifetime_blocks},
    {"huge", 4, cmd_huge},
    {"control-frees", 2, cmd_control_frees},
    {"mixed-frees", 2, cmd_mixed_frees},
    {"libc-names", 2, cmd_libc_names},
    {"errno-kept", 2, cmd_errno_kept},
    {"too-large", 2, cmd_too_large},
    {"guarded-free", 2, cmd_guarded_free},
    {"bad-frees", 3, cmd_bad_frees},
    {"valgrind-run", 2, cmd_valgrind_run},
    {"grow-untouched", 3, cmd_grow_untouched},
    {"aligned-dp", 4, cmd_aligned_dp},
    {"huge-usable", 2, cmd_huge_usable},
    {"sites", 2, cmd_sites},
    {"open-backend", 2, cmd_open_backend},
    {"wait-unopened", 2, cmd_wait_unopened},
    {"stderr-reused", 3, cmd_stderr_reused},
    {"stats-in-scope", 2, cmd_stats_in_scope},
    {"sampled-in-scope", 2, cmd_sampled_in_scope},
    {"post-beside-bookkeeping", 2, cmd_post_beside_bookkeeping},
    {"protect-neighbour", 2, cmd_protect_neighbour},
    {"segv-sent", 3, cmd_segv_sent},
    {"kernel-write", 2, cmd_kernel_write},
    {"sga-no-backend", 2, cmd_sga_no_backend},
    {"protect-no-thread", 2, cmd_protect_no_thread},
    {"stats", 2, cmd_stats},
};

int main(int argc, char **argv) {
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (argc >= commands[i].min_argc && !strcmp(argv[1], commands[i].name))
      return commands[i].run(argc, argv);
  fprintf(
      stderr,
      "usage: nic_probe dp-alloc TOTAL BLOCK | low-memlock BLOCK | low-memlock-fill TOTAL BLOCK | "
      "low-memlock-register N BLOCK | memlock-rcache LIMIT N SMALL BIG | pin-refused LIMIT SIZE "
      "COUNT MODE [WAIT_MS] | "
      "low-memlock-sga KIB "
      "BLOCK | user-auto-sga | memlock-steps LIMIT TOTAL BLOCK "
      "| "
      "mixed-frees | fork-child BLOCK | fork-write-race ROUNDS TOTAL BLOCK [register] | "
      "fork-while-opening "
      "BACKEND | fork-while-registering MS | fork-after-open register|sim-endpoint | fork-post | "
      "fork-event-set | "
      "auto SIZE | "
      "cap-again "
      "BLOCK | huge "
      "SIZE SLEEP_MS | huge-usable [GIB] | "
      "grow-untouched MAX | aligned-dp ALIGNMENT SIZE | "
      "threads-start N SIZE | lifetime-blocks [register|endpoint] | stats | stats-in-scope | "
      "stderr-reused "
      "FILE [open-backend] | "
      "open-backend [fds|signals|fork-fds] | wait-unopened | as-limit GIB "
      "ARGS... | as-limit-later GIB | dp-room [none] | mlockall-limited | data-limit MIB ARGS... | "
      "in-cgroup DIR "
      "ARGS... | "
      "no-uring ARGS... | "
      "no-getrandom ARGS... | fixed-layout ARGS... | free-key | uring-endpoint | "
      "post-beside-bookkeeping | segv-sent default|ignore|handler [kill] | kernel-write | "
      "sga-no-backend | protect-no-thread | "
      "fill-control | "
      "huge-until-null SIZE | register-blocks N SIZE "
      "[dataplane|control|post] | "
      "refused-arena-commit "
      "SIZE\n");
  return 2;
}
