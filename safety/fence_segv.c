/* protect where userfaultfd is not available: mprotect(PROT_READ), and a SIGSEGV handler that
 * holds the writer until the page is released, then returns so that the write is made again.
 * Everything the handler calls is async-signal-safe: loads of our own tables, clock_gettime,
 * futex waits, write(2), and the protect lock (whose holders block signals). A fault that is
 * not ours, and a SIGSEGV sent by kill, raise or sigqueue, goes to the handler that was installed
 * before ours (chained, with the same arguments, its sa_mask and flags honoured), is ignored if
 * that was SIG_IGN, or gets the default action.
 *
 * A fault is ours when its page is marked (fence_pages.c): a release the kernel refuses leaves
 * the page marked, and the write that faults there once no posted entry covers it releases it
 * again. A write that faulted just before a release finds its page unmarked: it is retried, and
 * passed on once it faults again with no release in between. System calls that write into a
 * protected page fail with EFAULT: the kernel does not signal its own accesses (README). */
#define _GNU_SOURCE
#include "clock.h"
#include "fence.h"
#include "nocancel.h"

#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static struct sigaction previous;
static const struct nic_safety_config *cfg;
/* The last fault this thread retried, the release generation it saw then, and how often. */
static __thread uintptr_t retried_addr;
static __thread unsigned retried_gen, retries;

static int mp(uintptr_t start, size_t len, int prot) {
  /* The system call itself: the interposed mprotect would note the change (regcache/). */
  return syscall(SYS_mprotect, start, len, prot) ? -errno : 0;
}
static int mp_protect(uintptr_t start, size_t len) {
  return mp(start, len, PROT_READ);
}
static int mp_unprotect(uintptr_t start, size_t len) {
  return mp(start, len, PROT_READ | PROT_WRITE);
}

/* With write(2): no stdio in a signal handler. */
void nic_fence_say(const char *a, uintptr_t x, const char *b) {
  char buf[512], *p = buf, *end = buf + sizeof buf - 24;
  for (const char *s = "nicmalloc: error: "; *s;)
    *p++ = *s++;
  for (const char *s = a; *s && p < end;)
    *p++ = *s++;
  *p++ = '0', *p++ = 'x';
  int shift = 60;
  while (shift > 0 && !(x >> shift & 15))
    shift -= 4;
  for (; shift >= 0; shift -= 4)
    *p++ = "0123456789abcdef"[x >> shift & 15];
  for (const char *s = b; *s && p < buf + sizeof buf - 1;)
    *p++ = *s++;
  *p++ = '\n';
  (void)!nic_write_nocancel(STDERR_FILENO, buf, (size_t)(p - buf));
}

static void bypass(uintptr_t a) {
  static int warned;
  const unsigned gen = __atomic_load_n(&nic_fence_gen, __ATOMIC_SEQ_CST);
  const bool released = nic_fence_release(a);
  NIC_SAFETY_COUNT(fence_bypasses, 1);
  if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    nic_fence_say("NICMALLOC_FENCE=protect: a thread the NIC or the completions need wrote to ", a,
                  " while the NIC may still read that page; the page is made writable rather than "
                  "hold it (counted in fence_bypasses)");
  /* The kernel refused: the write faults again, after a release elsewhere or a millisecond. */
  if (!released) nic_fence_gen_wait(gen);
}

/* Waits until a's page is released: by its completion (on the poller, which this wakes, or any
 * thread), by us once no posted entry covers it (the completion's release may have been refused),
 * or by us after NICMALLOC_FENCE_TIMEOUT_MS. */
static void hold(uintptr_t a) {
  NIC_SAFETY_COUNT(fence_held_writes, 1);
  __atomic_add_fetch(&nic_safety_ctr.fence_writers_held, 1, __ATOMIC_SEQ_CST);
  nic_fence_poller_kick();
  __atomic_add_fetch(&nic_fence_gen_waiters, 1, __ATOMIC_SEQ_CST);
  static int said; /* a program whose completions never come would say it at every write */
  const uint64_t since = nic_now_ms();
  bool timed_out = false;
  for (;;) {
    unsigned gen = __atomic_load_n(&nic_fence_gen, __ATOMIC_SEQ_CST);
    if (!nic_fence_marked(a) || nic_fence_release_if_done(a)) break;
    if (!timed_out && nic_now_ms() - since >= cfg->fence_timeout_ms) {
      if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        nic_fence_say("NICMALLOC_FENCE=protect: a write to ", a,
                      " waited NICMALLOC_FENCE_TIMEOUT_MS for the NIC; the page is made writable "
                      "and the write goes on (does a completion it waits for need a lock it "
                      "holds?) (said once; fence_bypasses counts them all)");
      NIC_SAFETY_COUNT(fence_bypasses, 1);
      timed_out = true;
    }
    if (timed_out && nic_fence_release(a)) break; /* the kernel may refuse again */
    struct timespec tick = {0, 10 * 1000 * 1000}; /* the timeout is checked this often */
    syscall(SYS_futex, &nic_fence_gen, FUTEX_WAIT_PRIVATE, gen, &tick, NULL, 0);
  }
  __atomic_sub_fetch(&nic_fence_gen_waiters, 1, __ATOMIC_SEQ_CST);
  __atomic_sub_fetch(&nic_safety_ctr.fence_writers_held, 1, __ATOMIC_RELEASE);
}

/* Once a previous handler with SA_RESETHAND has run, its signal gets the default action, as the
 * kernel resets such a handler when it runs it. */
static int previous_reset;

/* The kernel's mask itself: the interposed calls keep SIGSEGV out of it (fence_sigmask.c). */
static void kernel_mask(int how, const sigset_t *set, sigset_t *old) {
  syscall(SYS_rt_sigprocmask, how, set, old, (size_t)8);
}

/* A fault that is not ours, or a SIGSEGV sent with kill, raise or sigqueue (si_code <= 0: it
 * never comes back by itself), gets what the program would have got without us. */
static void chain(int sig, siginfo_t *si, void *context) {
  struct sigaction prev = previous;
  if (__atomic_load_n(&previous_reset, __ATOMIC_ACQUIRE)) {
    prev.sa_handler = SIG_DFL;
    prev.sa_flags = 0;
  }
  const bool sent = si->si_code <= 0;
  if (prev.sa_handler == SIG_IGN && sent) return; /* the kernel drops it */
  if (prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN) {
    /* The default action (a fault is never ignored: the kernel forces the default). A fault
     * comes again once we return; a sent signal is sent again, to this thread with its own
     * siginfo: blocked while this handler runs, it arrives as it returns. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    if (sent) syscall(SYS_rt_tgsigqueueinfo, getpid(), gettid(), sig, si);
    return;
  }
  /* As the kernel runs a handler: its sa_mask blocked, and sig too unless SA_NODEFER. */
  if (prev.sa_flags & SA_RESETHAND) __atomic_store_n(&previous_reset, 1, __ATOMIC_RELEASE);
  sigset_t mask = prev.sa_mask, self, old;
  sigemptyset(&self);
  sigaddset(&self, sig);
  kernel_mask(SIG_BLOCK, &mask, &old);
  if (prev.sa_flags & SA_NODEFER) kernel_mask(SIG_UNBLOCK, &self, NULL);
  if (prev.sa_flags & SA_SIGINFO)
    prev.sa_sigaction(sig, si, context);
  else
    prev.sa_handler(sig);
  kernel_mask(SIG_SETMASK, &old, NULL);
}

static void on_segv(int sig, siginfo_t *si, void *context) {
  const int saved_errno = errno;
  const uintptr_t a = (uintptr_t)si->si_addr;
  if (si->si_code == SEGV_ACCERR && nic_fence_unit(a)) {
    if (nic_fence_marked(a)) {
      if (nic_fence_self_exempt())
        bypass(a);
      else if (!nic_fence_release_if_done(a))
        hold(a);
      errno = saved_errno;
      return;
    }
    /* Released since the fault, maybe: once more, unless nothing was released since the last
     * try (bounded, should releases elsewhere never stop). */
    unsigned gen = __atomic_load_n(&nic_fence_gen, __ATOMIC_SEQ_CST);
    if (retried_addr != a || (retried_gen != gen && retries < 8)) {
      retries = retried_addr == a ? retries + 1 : 0;
      retried_addr = a;
      retried_gen = gen;
      errno = saved_errno;
      return;
    }
  }
  retried_addr = 0;
  errno = saved_errno;
  chain(sig, si, context);
}

static int segv_start(void) {
  cfg = nic_safety_config();
  nic_fence_sigmask_arm();
  struct sigaction sa = {.sa_sigaction = on_segv, .sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART};
  sigemptyset(&sa.sa_mask);
  return sigaction(SIGSEGV, &sa, &previous) ? -errno : 0;
}

const struct nic_fence_mech nic_fence_mprotect = {
    .name = "mprotect", .start = segv_start, .protect = mp_protect, .unprotect = mp_unprotect};
