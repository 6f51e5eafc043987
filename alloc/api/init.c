/* The library's constructor and destructor. Start-up itself runs on the first allocation
 * (base/startup.h), which may come long before this constructor; what is left here needs the
 * program's own start: the profile's send calls resolved, and the report at exit. */
#include "config.h"
#include "forklock.h"
#include "interposed.h"
#include "log.h"
#include "mimalloc_imports.h"
#include "nicmalloc.h"
#include "plugin_dir.h"
#include "profile.h"
#include "startup.h"
#include "thread.h"

#include <unistd.h>

/* Whose the report at exit is. A child of fork that exits while the process it was forked from
 * runs prints none: its figures are mostly that process's, which reports them at its own exit,
 * and a second report on the same stderr (under NICMALLOC_STATS=json, a second JSON object) was
 * taken for the process's. A child that outlives it prints its own: a daemon, whose parent
 * exits at once (with _exit, reporting nothing). One that execs is a new process, which runs
 * the constructor below again. */
static pid_t self_pid, forked_from;

static void after_fork_child(void) {
  forked_from = self_pid;
  self_pid = getpid();
}
NIC_FORK_CHILD(exit_report, NIC_FORK_EXIT_REPORT, after_fork_child);

__attribute__((constructor(101))) static void nic_init(void) {
  self_pid = getpid();
  nic_interposed_check(); /* before start-up: mimalloc's commits must be seen from the first */
  nic_mimalloc_own_madvise();
  nic_startup();
  nic_thread_ready();
  nic_plugin_dir_find();     /* before the program can change its directory */
  nic_profile_start();       /* reads NICMALLOC_SITES, resolves the send calls: see profile.c */
  nic_thread_refresh_fast(); /* it may have lowered nic_dp_fast_max */
}

__attribute__((destructor)) static void nic_fini(void) {
  nic_profile_finish(); /* writes NICMALLOC_PROFILE */
  if (forked_from && getppid() == forked_from) return;
  if (nic_config()->stats_at_exit == NIC_STATS_AT_EXIT_JSON)
    nic_print_stats_json(nic_log_fd());
  else if (nic_config()->stats_at_exit)
    nic_print_stats(nic_log_fd());
}
