/* unshare and setns, interposed: some namespace changes need the process to be one thread.
 * Joining or making a user namespace fails with EINVAL in a process with more than one thread,
 * and so does joining a mount namespace while another thread shares the file-system state (every
 * pthread does). nicmalloc's reaper (reaper.h) starts at the first dataplane allocation, the
 * first profile sample, the first huge control block or nicmalloc's first other thread, so
 * unmodified single-threaded programs that change namespaces (unshare -U, container runtimes,
 * sandboxes) failed under NICMALLOC_DP_MIN_SIZE or NICMALLOC_PROFILE. A call that fails with EINVAL
 * while the reaper runs is made again without it: the reaper is stopped and waited for, the call
 * made once the kernel counts the process as one thread (or no longer counts the reaper among its
 * threads), and the reaper started again whatever the answer. Threads nicmalloc starts on nic_* API
 * use (backends, fences) are the program's choice and are not stopped: with them the call fails as
 * it would for any other thread. */
#define _GNU_SOURCE
#include "export.h"
#include "last_thread.h"
#include "nocancel.h"
#include "reaper.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The flags of unshare that act on the whole process: CLONE_NEWUSER implies CLONE_THREAD. */
#define ALONE_FLAGS (CLONE_NEWUSER | CLONE_THREAD | CLONE_SIGHAND | CLONE_VM)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* one stop and start at a time */

/* unshare and setns are no cancellation points: the join and the pauses below are none. */
static long again_without_reaper(long number, long a, long b) {
  const int cancel = nic_cancel_off();
  pthread_mutex_lock(&lock);
  const long threads_before = nic_thread_count();
  if (!nic_reaper_stop()) {
    pthread_mutex_unlock(&lock);
    nic_cancel_restore(cancel);
    errno = EINVAL;
    return -1;
  }
  /* pthread_join returns when the thread's stack is free; the kernel takes it off the thread
   * group a moment later. */
  for (int i = 0; i < 100 && nic_thread_count() >= threads_before; i++)
    nic_pause_nocancel(1000 * 1000);
  long rc = syscall(number, a, b);
  const int err = errno;
  nic_reaper_start();
  pthread_mutex_unlock(&lock);
  nic_cancel_restore(cancel);
  errno = err;
  return rc;
}

NIC_EXPORT int unshare(int flags) {
  long rc = syscall(SYS_unshare, flags);
  if (rc == 0 || errno != EINVAL || !(flags & ALONE_FLAGS)) return (int)rc;
  return (int)again_without_reaper(SYS_unshare, flags, 0);
}

NIC_EXPORT int setns(int fd, int nstype) {
  long rc = syscall(SYS_setns, fd, nstype);
  if (rc == 0 || errno != EINVAL) return (int)rc;
  return (int)again_without_reaper(SYS_setns, fd, nstype);
}
