/* The statistics report at exit (NICMALLOC_STATS), on stderr or into NICMALLOC_STATS_FILE.
 *
 * When. This library's destructor writes it, after the program's own destructors and those of
 * the libraries loaded after it. But a destructor that calls exit() (or a library's, at its
 * program's exit) ends the process from inside the loader's run of the destructors: glibc then
 * runs the exit handlers left and no destructor left, ours among them. So the constructor also
 * registers an exit handler, before the loader registers its run of the destructors (every
 * library constructor runs first): it comes after them all, and after such a nested exit too,
 * and writes the report if the destructor did not. A thread that calls exit runs both, as the
 * main thread would.
 *
 * Whose. A child of fork that exits while the process it was forked from runs prints none: its
 * figures are mostly that process's, which reports them at its own exit, and a second report on
 * the same stderr (under NICMALLOC_STATS=json, a second JSON object) was taken for the process's.
 * A child that outlives it prints its own: a daemon, whose parent exits at once (with _exit,
 * reporting nothing). One that execs is a new process, which runs the constructor again. The
 * same holds for the file: a "%p" in its name gives each process that reports a file of its own.
 */
#include "bounded_lock.h"
#include "config.h"
#include "forklock.h"
#include "log.h"
#include "stats.h"
#include "stats_file.h"

#include <stdlib.h>
#include <unistd.h>

static pid_t self_pid, forked_from;
static int reported;

static int write_report(int fd, void *json) {
  return nic_stats_report(fd, *(const bool *)json);
}

static void report(void) {
  if (__atomic_exchange_n(&reported, 1, __ATOMIC_ACQ_REL)) return;
  if (forked_from && getppid() == forked_from) return;
  const struct nic_config *c = nic_config();
  if (!c->stats_at_exit) return;
  bool json = c->stats_at_exit == NIC_STATS_AT_EXIT_JSON;
  /* exit() may come from a signal handler that interrupted this thread holding a lock the report
   * takes, or a thread that holds one may be stopped for good: best-effort, never a hang. */
  nic_bounded_begin();
  if (c->stats_file)
    nic_stats_file_write(write_report, &json);
  else
    write_report(nic_log_fd(), &json);
  nic_bounded_end();
}

static void after_fork_child(void) {
  forked_from = self_pid;
  self_pid = getpid();
}
NIC_FORK_CHILD(exit_report, NIC_FORK_EXIT_REPORT, after_fork_child);

/* After init.c's (priority 101), before the program's code can change its directory, which a
 * relative file name is taken from. */
__attribute__((constructor)) static void exit_report_start(void) {
  self_pid = getpid();
  const struct nic_config *c = nic_config();
  if (!c->stats_at_exit) return;
  if (c->stats_file) nic_stats_file_start(c->stats_file);
  atexit(report);
}

__attribute__((destructor)) static void exit_report_fini(void) {
  report();
}
