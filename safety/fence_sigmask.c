/* The mprotect fence holds a writer in its SIGSEGV handler. The kernel does not deliver a fault
 * to a thread that blocks SIGSEGV: it resets the action to the default and kills the process.
 * Blocking every signal is common (a sigwait thread: sigfillset, pthread_sigmask before the
 * threads are made, which inherit it; a handler whose sa_mask is full), and there is no way to
 * learn before the fault that the writer blocks it. So while the fence may use mprotect,
 * SIGSEGV is never blocked for real: the masks the program sets through sigprocmask,
 * pthread_sigmask and sigaction's sa_mask lose it, and the program reads back what it set (each
 * thread remembers whether it asked for SIGSEGV blocked; sigaction remembers which handlers
 * asked). Nothing is lost by it: a blocked synchronous SIGSEGV kills anyway. Limits are in
 * README.md (mprotect fence). Every function here is async-signal-safe: thread-local words and
 * system calls. */
#define _GNU_SOURCE
#include "export.h"
#include "fence.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The C library's sigaction, which its own signal() calls too. */
extern int __sigaction(int sig, const struct sigaction *act, struct sigaction *old);

static bool armed;
/* Whether this thread asked for SIGSEGV blocked (what it reads back). */
static __thread bool segv_asked __attribute__((tls_model("initial-exec")));
/* Signals whose handler asked for SIGSEGV in its sa_mask (bit sig - 1). */
static uint64_t asked_in_handler;

#define BIT(sig) ((uint64_t)1 << ((sig)-1))
/* The C library's own signals (thread cancellation, setxid), which it never lets a program
 * block: its sigprocmask leaves them out, and so must these. */
#define LIBC_SIGNALS (BIT(32) | BIT(33))

void nic_fence_sigmask_arm(void) {
  __atomic_store_n(&armed, true, __ATOMIC_RELAXED);
}

/* NICMALLOC_FENCE=protect may take the mprotect mechanism at its first post, after the program
 * set its masks (NICMALLOC_FENCE_PROTECT=uffd too, where userfaultfd is refused). */
__attribute__((constructor)) static void arm_at_start(void) {
  if (nic_safety_config()->fence == NIC_FENCE_PROTECT) nic_fence_sigmask_arm();
}

static uint64_t kernel_set(const sigset_t *s) {
  uint64_t k;
  memcpy(&k, s, sizeof k);
  return k;
}

static int set_mask(int how, const sigset_t *set, sigset_t *old) {
  /* As the kernel: how is looked at only when there is a set (a query may pass anything). */
  if (set && how != SIG_BLOCK && how != SIG_UNBLOCK && how != SIG_SETMASK) return EINVAL;
  const bool on = __atomic_load_n(&armed, __ATOMIC_RELAXED);
  uint64_t want = 0, was = 0;
  if (set) {
    want = kernel_set(set);
    if (how != SIG_UNBLOCK) want &= ~LIBC_SIGNALS & ~(on ? BIT(SIGSEGV) : 0);
  }
  const bool asked_before = segv_asked;
  if (syscall(SYS_rt_sigprocmask, how, set ? &want : NULL, &was, sizeof want)) return errno;
  if (set && how != SIG_UNBLOCK && (kernel_set(set) & BIT(SIGSEGV)))
    segv_asked = on;
  else if (set && (how == SIG_SETMASK || (kernel_set(set) & BIT(SIGSEGV))))
    segv_asked = false;
  if (old) {
    if (asked_before) was |= BIT(SIGSEGV);
    memset(old, 0, sizeof *old);
    memcpy(old, &was, sizeof was);
  }
  return 0;
}

NIC_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
  return set_mask(how, set, old);
}

NIC_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old) {
  const int rc = set_mask(how, set, old);
  return rc ? (errno = rc, -1) : 0;
}

/* SIGSEGV's own handler keeps its mask: the kernel blocks SIGSEGV while it runs anyway (unless
 * SA_NODEFER), and a handler installed over the fence's replaces it (README.md). */
NIC_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  const bool tracked = sig > 0 && sig <= 64 && sig != SIGSEGV;
  const uint64_t bit = tracked ? BIT(sig) : 0;
  const bool asked_before = __atomic_load_n(&asked_in_handler, __ATOMIC_RELAXED) & bit;
  struct sigaction copy;
  const bool strip = act && tracked && __atomic_load_n(&armed, __ATOMIC_RELAXED) &&
                     sigismember(&act->sa_mask, SIGSEGV) == 1;
  if (strip) {
    copy = *act;
    sigdelset(&copy.sa_mask, SIGSEGV);
  }
  const int rc = __sigaction(sig, strip ? &copy : act, old);
  if (rc) return rc;
  if (act && strip)
    __atomic_fetch_or(&asked_in_handler, bit, __ATOMIC_RELAXED);
  else if (act)
    __atomic_fetch_and(&asked_in_handler, ~bit, __ATOMIC_RELAXED);
  if (old && asked_before) sigaddset(&old->sa_mask, SIGSEGV);
  return 0;
}
