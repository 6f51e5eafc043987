/* The threads protect must never hold, the poller, and the thread that runs their frees.
 *
 * A held writer waits for a completion. If completions run only when the program calls nic_poll
 * and the held thread is the one that would call it, nothing would ever release it: so while any
 * writer is held, the poller thread polls the backend (completions, and their callbacks, may then
 * run on it). Threads that the DMA or the completions themselves depend on (the sim NIC's engine,
 * which also runs receive and engine-completion callbacks, and the poller) are never held: a
 * write of theirs to a protected page releases the page, since holding them could never end.
 *
 * So they must not write there in the first place for nicmalloc's own work: a deferred free
 * (the key and mimalloc's free-list word in the block, mimalloc's page and heap metadata beside
 * the program's blocks) made by a completion on such a thread, racing with a post of the same
 * page, released that page for every thread while the NIC still read it. Their frees go to the
 * free thread instead, which is held like any writer: its write waits for the DMA. */
#define _GNU_SOURCE
#include "backend.h"
#include "fence.h"
#include "forklock.h"
#include "log.h"
#include "thread.h"

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
static unsigned free_kick;
static bool freer_up;

void nic_fence_thread_is_nic(void) {
  exempt = true;
  pid_t me = gettid();
  for (unsigned i = 0; i < NIC_THREADS_MAX; i++) {
    pid_t none = 0;
    if (__atomic_load_n(&nic_threads[i], __ATOMIC_RELAXED)) continue;
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

/* Inside a completion on any thread (nic_poll, a fence, the backend's thread): more completions
 * may be in this thread's hands, taken from the backend in one batch, and a free's writes into
 * a page one of them still covers (mimalloc's heap struct, which it keeps in an ordinary block
 * beside the program's, takes a cross-thread free) would wait for a completion only this thread
 * can run. */
static __thread unsigned completing;

void nic_fence_completion_begin(void) {
  completing++;
}

void nic_fence_completion_end(void) {
  completing--;
}

bool nic_fence_frees_handed_off(void) {
  return (exempt || completing) && __atomic_load_n(&freer_up, __ATOMIC_ACQUIRE);
}

void nic_fence_free_kick(void) {
  __atomic_add_fetch(&free_kick, 1, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, &free_kick, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *freer(void *arg) {
  (void)arg;
  for (;;) {
    unsigned seen = __atomic_load_n(&free_kick, __ATOMIC_SEQ_CST);
    nic_safety_retry_deferred(); /* not exempt: a write to a page in flight waits here */
    syscall(SYS_futex, &free_kick, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
  }
  return NULL;
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
    nic_backends_poll(NIC_POLL_COMPLETIONS_ONLY);
    struct timespec pause = {0, 20000}; /* as the wait fence: a DMA takes microseconds */
    nanosleep(&pause, NULL);
  }
  return NULL;
}

/* Signals as the poller's; false when the thread could not be made. */
static bool spawn(void *(*fn)(void *), const char *name, sigset_t *mask) {
  pthread_t t;
  if (nic_own_thread_create(&t, name, fn, NULL, mask)) return false;
  pthread_detach(t);
  return true;
}

static void start(void) {
  sigset_t all;
  /* The application's handlers stay off it, but not faults: completions it runs can write a
   * page the mprotect fence holds, and a blocked SIGSEGV would kill the process instead of
   * waiting in the fence's handler. */
  nic_signals_but_faults(&all);
  if (!spawn(poller, "nicmalloc-fence", &all))
    nic_log_warn("NICMALLOC_FENCE=protect: no poller thread; a writer held on the thread that "
                 "polls waits until NICMALLOC_FENCE_TIMEOUT_MS");
  /* Without it the NIC threads run their frees themselves, as before. */
  if (spawn(freer, "nicmalloc-free", &all))
    __atomic_store_n(&freer_up, true, __ATOMIC_RELEASE);
  else
    nic_log_warn("NICMALLOC_FENCE=protect: no thread for the NIC threads' frees; a free of theirs "
                 "racing with a post of the same page can release that page early");
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

void nic_fence_poller_start(void) {
  pthread_once(&once, start);
}

/* Neither thread survives fork, and the NIC threads listed are the parent's: a child whose
 * protect starts again (fence_protect.c) starts them again, and until then its NIC threads
 * make their frees themselves, as no free thread would ever make them. */
static void after_fork_child(void) {
  once = (pthread_once_t)PTHREAD_ONCE_INIT;
  __atomic_store_n(&freer_up, false, __ATOMIC_RELEASE);
  for (unsigned i = 0; i < NIC_THREADS_MAX; i++)
    nic_threads[i] = 0;
}
NIC_FORK_CHILD(fence_threads, NIC_FORK_FENCE_THREADS, after_fork_child);

/* Threads that act for the NIC (the sim's DMA engine) say so through the memory events. */
static void nic_thread_event(bool starting) {
  if (starting)
    nic_fence_thread_is_nic();
  else
    nic_fence_thread_gone();
}
NIC_MEMORY_WATCHER(fence_nic_threads, .nic_thread = nic_thread_event);
