/* The threads protect must never hold, and the poller.
 *
 * A held writer waits for a completion. If completions run only when the program calls nic_poll
 * and the held thread is the one that would call it, nothing would ever release it: so while any
 * writer is held, the poller thread polls the backend (completions, and their callbacks, may then
 * run on it). Threads that the DMA or the completions themselves depend on (the sim NIC's engine,
 * which also runs receive and engine-completion callbacks, and the poller) are never held: a
 * write of theirs to a protected page releases the page, since holding them could never end. */
#define _GNU_SOURCE
#include "backend.h"
#include "fence.h"
#include "log.h"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NIC_THREADS_MAX 64

static pid_t nic_threads[NIC_THREADS_MAX]; /* 0 = free slot */
static __thread bool exempt;
static unsigned kick;

void nic_fence_thread_is_nic(void) {
  exempt = true;
  pid_t me = gettid();
  for (unsigned i = 0; i < NIC_THREADS_MAX; i++) {
    pid_t none = 0;
    if (__atomic_compare_exchange_n(&nic_threads[i], &none, me, false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED))
      return;
  }
  /* More NIC threads than slots: the uffd thread cannot tell this one, and its writes wait until
   * NICMALLOC_FENCE_TIMEOUT_MS at worst. */
}

void nic_fence_thread_gone(void) {
  exempt = false;
  pid_t me = gettid();
  for (unsigned i = 0; i < NIC_THREADS_MAX; i++) {
    pid_t expected = me;
    __atomic_compare_exchange_n(&nic_threads[i], &expected, 0, false, __ATOMIC_RELEASE,
                                __ATOMIC_RELAXED);
  }
}

bool nic_fence_thread_exempt(pid_t tid) {
  for (unsigned i = 0; i < NIC_THREADS_MAX; i++)
    if (__atomic_load_n(&nic_threads[i], __ATOMIC_ACQUIRE) == tid) return true;
  return false;
}

bool nic_fence_self_exempt(void) {
  return exempt;
}

void nic_fence_poller_kick(void) {
  __atomic_add_fetch(&kick, 1, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, &kick, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *poller(void *arg) {
  (void)arg;
  nic_fence_thread_is_nic();
  for (;;) {
    unsigned seen = __atomic_load_n(&kick, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&nic_safety_ctr.fence_writers_held, __ATOMIC_SEQ_CST)) {
      syscall(SYS_futex, &kick, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
      continue;
    }
    struct nic_backend *b = nic_backend_if_open();
    if (b) b->poll(b, 0);
    struct timespec pause = {0, 20000}; /* as the wait fence: a DMA takes microseconds */
    nanosleep(&pause, NULL);
  }
  return NULL;
}

static void start(void) {
  sigset_t all, old;
  sigfillset(&all);
  /* The application's handlers stay off it, but not faults: completions it runs can write a
   * page the mprotect fence holds, and a blocked SIGSEGV would kill the process instead of
   * waiting in the fence's handler. */
  sigdelset(&all, SIGSEGV);
  sigdelset(&all, SIGBUS);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  int rc = pthread_create(&t, NULL, poller, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc) {
    nic_log_warn("NICMALLOC_FENCE=protect: no poller thread (%d); a writer held on the thread "
                 "that polls waits until NICMALLOC_FENCE_TIMEOUT_MS",
                 rc);
    return;
  }
  pthread_setname_np(t, "nicmalloc-fence");
  pthread_detach(t);
}

void nic_fence_poller_start(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, start);
}
