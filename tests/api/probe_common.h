/* nic_probe: what its scenario files share, and the commands main dispatches to. */
#ifndef NIC_TESTS_PROBE_COMMON_H
#define NIC_TESTS_PROBE_COMMON_H

#include "nicmalloc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>

/* What the kernel says is locked (VmLck, in KiB), or -1. */
long vmlck_kb(void);
/* Every statistic a test reads, one prefix+key=value line each. */
void print_stats(const char *prefix);
struct nic_stats stats_now(void);
uint64_t probe_now_ms(void);
/* Bytes the process has read so far (rchar of /proc/self/io), or -1. */
long long read_bytes(void);
/* The size of one read of /proc/self/smaps. */
long long smaps_bytes(void);
/* count one-page mappings the kernel cannot merge (read-only and writable in turn), left
 * mapped: a process with many mappings. False when one was refused. */
bool map_pages_apart(unsigned count);
/* RLIMIT_MEMLOCK of bytes as an ordinary user runs: as a user of its own (a uid made from the
 * pid; root's capabilities, CAP_IPC_LOCK among them, go with the change), since io_uring counts
 * the pins of its fixed buffers per user, and probes run side by side as root would share one
 * count (where that uid cannot be had, in a user namespace that maps few, root drops
 * CAP_IPC_LOCK alone). On failure prints setup_failed=errno and returns false. */
bool memlock_limit_set(rlim_t bytes);
/* Allocates total bytes in blocks of block bytes with nic_malloc; counts where they landed
 * (probe_dataplane.c; the memlock scenarios run it under their limit too). */
int dp_alloc(size_t total, size_t block);

/* The commands: nic_probe COMMAND ARGS... runs cmd_COMMAND(argc, argv), argv[1] the command.
 * main checks argc against the command's minimum first; each parses its arguments itself. */
int cmd_dp_alloc(int argc, char **argv);
int cmd_repin(int argc, char **argv);
int cmd_memlock_rcache(int argc, char **argv);
int cmd_register_blocks(int argc, char **argv);
int cmd_dp_register(int argc, char **argv);
int cmd_first_dp_reads(int argc, char **argv);
int cmd_cap_again(int argc, char **argv);
int cmd_auto(int argc, char **argv);
int cmd_aligned_dp(int argc, char **argv);

int cmd_step_reads(int argc, char **argv);
int cmd_step_release(int argc, char **argv);
int cmd_step_freed_entry(int argc, char **argv);
int cmd_step_cached(int argc, char **argv);
int cmd_step_abandoned(int argc, char **argv);

int cmd_low_memlock(int argc, char **argv);
int cmd_low_memlock_fill(int argc, char **argv);
int cmd_memlock_steps(int argc, char **argv);
int cmd_pin_refused(int argc, char **argv);
int cmd_low_memlock_register(int argc, char **argv);
int cmd_low_memlock_sga(int argc, char **argv);
int cmd_user_auto_sga(int argc, char **argv);

int cmd_as_limit(int argc, char **argv);
int cmd_as_limit_kib(int argc, char **argv);
int cmd_as_limit_later(int argc, char **argv);
int cmd_as_limit_huge(int argc, char **argv);
int cmd_dp_room(int argc, char **argv);
int cmd_mlockall_limited(int argc, char **argv);
int cmd_data_limit(int argc, char **argv);
int cmd_huge_until_null(int argc, char **argv);
int cmd_refused_arena_commit(int argc, char **argv);
int cmd_in_cgroup(int argc, char **argv);
int cmd_limit_later(int argc, char **argv);

int cmd_fork_child(int argc, char **argv);
int cmd_fork_write_race(int argc, char **argv);
int cmd_fork_while_opening(int argc, char **argv);
int cmd_fork_while_registering(int argc, char **argv);
int cmd_fork_after_open(int argc, char **argv);
int cmd_fork_post(int argc, char **argv);
int cmd_fork_event_set(int argc, char **argv);
int cmd_lifetime_blocks(int argc, char **argv);

int cmd_big_block(int argc, char **argv);
int cmd_fill_control(int argc, char **argv);
int cmd_huge(int argc, char **argv);
int cmd_control_frees(int argc, char **argv);
int cmd_mixed_frees(int argc, char **argv);
int cmd_libc_names(int argc, char **argv);
int cmd_errno_kept(int argc, char **argv);
int cmd_too_large(int argc, char **argv);
int cmd_guarded_free(int argc, char **argv);
int cmd_bad_frees(int argc, char **argv);
int cmd_valgrind_run(int argc, char **argv);
int cmd_grow_untouched(int argc, char **argv);
int cmd_huge_usable(int argc, char **argv);

int cmd_threads_start(int argc, char **argv);

int cmd_stats_read(int argc, char **argv);
int cmd_stats_walk(int argc, char **argv);
int cmd_stats_in_scope(int argc, char **argv);
int cmd_sampled_in_scope(int argc, char **argv);
int cmd_stats(int argc, char **argv);

int cmd_free_key(int argc, char **argv);
int cmd_post_beside_bookkeeping(int argc, char **argv);
int cmd_protect_neighbour(int argc, char **argv);
int cmd_segv_sent(int argc, char **argv);
int cmd_kernel_write(int argc, char **argv);
int cmd_sga_no_backend(int argc, char **argv);
int cmd_protect_no_thread(int argc, char **argv);

int cmd_guest_start(int argc, char **argv);
int cmd_low_memlock_guest(int argc, char **argv);
int cmd_no_uring(int argc, char **argv);
int cmd_no_getrandom(int argc, char **argv);
int cmd_no_populate(int argc, char **argv);
int cmd_fixed_layout(int argc, char **argv);
int cmd_uring_endpoint(int argc, char **argv);
int cmd_sites(int argc, char **argv);
int cmd_open_backend(int argc, char **argv);
int cmd_wait_unopened(int argc, char **argv);
int cmd_stderr_reused(int argc, char **argv);

#endif
