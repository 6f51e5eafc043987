/* NICMALLOC_FENCE=protect: the pages of every direct entry are write-protected from post until
 * no posted entry covers them, so that a write to them waits for the DMA (fence_uffd.c holds
 * the writer in the kernel, fence_segv.c in a SIGSEGV handler). Bounce entries need nothing:
 * the NIC reads our copy.
 *
 * One lock orders every change of protection, and the decision to release a unit is made under
 * it from the page counts, which the completion drops before it gets here: so a post that adds
 * a reference to a unit either comes first (the release sees its count and keeps the unit) or
 * after (and protects the unit again). Units are 4 KiB, or the hugepage on hugetlb chunks (the
 * kernel write-protects a hugetlb mapping whole). The lock is held only around system calls,
 * never while user memory is written, and with signals blocked: a signal handler that wrote to
 * a protected page on a thread holding it could otherwise never be released. */
#define _GNU_SOURCE
#include "bounce.h"
#include "fence.h"
#include "forklock.h"
#include "log.h"
#include "page.h"
#include "pagecount.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static int lock_word;
/* Registrations pinning pages now (fence_pins.c): no page of them is protected until they end.
 * Changed under the lock; a post that meets one waits on nic_fence_gen. */
#define PINS_MAX 16
static struct { uintptr_t start, end; } pins[PINS_MAX];
static unsigned npins;
static const struct nic_fence_mech *mech; /* NULL: not started, or no mechanism works here */
static bool started;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool up[2]; /* uffd, mprotect: started (each at most once a process) */
/* Runs whose release the kernel refused: they stay marked (release_run), and every completion
 * tries them again, as a write that faults there does. More than fit wait for the latter alone. */
#define STUCK_MAX 16
struct stuck_run {
  uintptr_t start, end;
};
static struct stuck_run stuck[STUCK_MAX];
static unsigned nstuck;
/* mprotect calls of the process made without the lock (mprotect was not the mechanism then) and
 * not finished: the mechanism waits for them when it takes over, since one of them could make a
 * page it protects next writable again. */
static unsigned unlocked_calls;

static void lock(sigset_t *old) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, old);
  for (unsigned spins = 0; __atomic_exchange_n(&lock_word, 1, __ATOMIC_ACQUIRE); spins++)
    if (spins > 64) sched_yield(); /* the holder is in a system call */
}

static void unlock(const sigset_t *old) {
  __atomic_store_n(&lock_word, 0, __ATOMIC_RELEASE);
  pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* The child has no handler thread and no poller, and an inherited userfaultfd would still act
 * on the parent's memory: the parent's protection ends there (its posts are void), and the
 * child's first post starts it again, with a userfaultfd and threads of its own (its SIGSEGV
 * handler, set up once, is inherited). */
static bool release_run(uintptr_t start, uintptr_t end, bool retry);
static void child_release(uintptr_t start, uintptr_t end) {
  if (mech == &nic_fence_mprotect)
    release_run(start, end, false); /* what the kernel refuses stays (the parent's runs too) */
  else
    nic_fence_unmark(start, end); /* userfaultfd's protection does not outlive the fork */
}

static void after_fork_child(void) {
  unlocked_calls = 0; /* theirs were the parent threads' */
  npins = 0;          /* the parent threads' registrations */
  nstuck = 0;         /* child_release records what is left */
  if (mech) {
    nic_fence_each_marked(child_release);
    if (mech->after_fork_child) mech->after_fork_child();
  }
  mech = NULL;
  up[0] = false; /* the userfaultfd was closed */
  started = false;
  once = (pthread_once_t)PTHREAD_ONCE_INIT;
}

/* Across fork the lock is held as every holder holds it, with signals blocked: the SIGSEGV
 * handler takes it. glibc runs one fork at a time, so one saved mask will do. */
static sigset_t fork_mask;
static void fork_acquire(void) {
  lock(&fork_mask);
}
static void fork_release(void) {
  unlock(&fork_mask);
}
NIC_FORKLOCK_CUSTOM(fence_protect, NIC_FORK_FENCE_PROTECT, fork_acquire, fork_release, fork_release,
                    after_fork_child);

static void wait_unlocked_calls(void) {
  while (__atomic_load_n(&unlocked_calls, __ATOMIC_SEQ_CST))
    sched_yield(); /* a system call's time */
}

/* Why a mechanism could not start: "<step>: <errno's text>" for uffd, whose steps fail alike. */
static char why_down[2][160];

static bool bring_up(const struct nic_fence_mech *m) {
  const int i = m == &nic_fence_mprotect;
  if (up[i]) return true;
  int rc = m->start();
  if (rc) {
    snprintf(why_down[i], sizeof why_down[i], "%s%s%s", i ? "" : nic_fence_uffd_failed_step(),
             i ? "" : ": ", strerror(-rc));
    nic_log_info("NICMALLOC_FENCE=protect: %s cannot be used here (%s)", m->name, why_down[i]);
  }
  return up[i] = rc == 0;
}

static void start(void) {
  enum nic_fence_protect_with with = nic_safety_config()->protect_with;
  /* A fork child whose parent's mprotect protections the kernel would not release: they are
   * released as they were made. */
  if (nstuck) with = NIC_PROTECT_MPROTECT;
  const struct nic_fence_mech *m = NULL;
  if (with != NIC_PROTECT_MPROTECT && bring_up(&nic_fence_uffd))
    m = &nic_fence_uffd;
  else if (with == NIC_PROTECT_UFFD)
    nic_log_warn("NICMALLOC_FENCE_PROTECT=uffd: userfaultfd write-protect cannot be used here "
                 "(%s); using mprotect",
                 why_down[0]);
  if (!m && bring_up(&nic_fence_mprotect)) m = &nic_fence_mprotect;
  if (!m)
    nic_log_warn("NICMALLOC_FENCE=protect: neither userfaultfd nor a SIGSEGV handler could be "
                 "set up; posted memory is not protected");
  else
    nic_fence_poller_start();
  /* Before any page is protected (installed at start-up already under NICMALLOC_FENCE=protect;
   * a registration begun before it is not known here). */
  if (m) nic_fence_pins_install();
  __atomic_store_n(&mech, m, __ATOMIC_SEQ_CST);
  wait_unlocked_calls();
  __atomic_store_n(&started, true, __ATOMIC_RELEASE);
}

bool nic_fence_protect_started(void) {
  return __atomic_load_n(&started, __ATOMIC_ACQUIRE);
}

bool nic_fence_any_protected(uintptr_t start, uintptr_t end) {
  return __atomic_load_n(&started, __ATOMIC_ACQUIRE) && nic_fence_any_marked(start, end);
}

const char *nic_fence_protect_name(void) {
  const struct nic_fence_mech *m = __atomic_load_n(&mech, __ATOMIC_ACQUIRE);
  return m ? m->name : "none";
}

bool nic_fence_kernel_writes_wait(void) {
  return __atomic_load_n(&mech, __ATOMIC_ACQUIRE) == &nic_fence_uffd &&
         nic_fence_uffd_kernel_writes_wait();
}

const char *nic_fence_protect_detail(void) {
  const struct nic_fence_mech *m = __atomic_load_n(&mech, __ATOMIC_ACQUIRE);
  if (m == &nic_fence_uffd && !nic_fence_uffd_kernel_writes_wait())
    return "uffd, user-mode faults only: kernel writes get EFAULT";
  return m ? m->name : "none";
}

static void not_protected(const struct nic_sga_entry *e, int err) {
  NIC_SAFETY_COUNT(fence_unprotected, 1);
  if (err)
    nic_log_warn_once("NICMALLOC_FENCE=protect: %s cannot write-protect %p (%s); such entries are "
                      "sent unprotected (counted in fence_unprotected)",
                      mech->name, e->addr, strerror(-err));
}

/* Protects the units of [start, end) not protected yet, in runs; lock held. */
static int protect_range(uintptr_t start, uintptr_t end, size_t unit) {
  for (uintptr_t a = start; a < end;) {
    if (nic_fence_marked(a)) {
      a += unit;
      continue;
    }
    uintptr_t run = a;
    while (a < end && !nic_fence_marked(a))
      a += unit;
    if (!nic_fence_mark(run, a)) return -ENOMEM;
    int rc = mech->protect(run, a - run);
    if (rc) {
      /* mprotect changes a range one mapping at a time, and may fail half way (ENOMEM splitting
       * a mapping at vm.max_map_count): unmarked, what it changed would stay read-only. */
      release_run(run, a, false);
      return rc;
    }
  }
  return 0;
}

/* The units an entry's pages lie in, [*first, *end); false for a copied entry (the NIC reads
 * our copy) and for memory protect does not cover (*unit is then 0). */
static bool entry_units(const struct nic_sga_entry *e, uintptr_t *first, uintptr_t *end,
                        size_t *unit) {
  *unit = 0;
  if (e->kind == NIC_SGA_BOUNCE) return false;
  uintptr_t a = (uintptr_t)e->addr;
  if (!(*unit = nic_fence_unit(a))) return false;
  *first = a & ~(*unit - 1);
  *end = (a + e->len + *unit - 1) & ~(*unit - 1);
  return true;
}

/* Lock held: whether an entry's units overlap a registration pinning its pages now. */
static bool meets_pin(const struct nic_sga_entry *e, uint32_t n) {
  for (uint32_t i = 0; npins && i < n; i++) {
    uintptr_t first, end;
    size_t unit;
    if (!entry_units(&e[i], &first, &end, &unit)) continue;
    for (unsigned k = 0; k < npins; k++)
      if (first < pins[k].end && pins[k].start < end) return true;
  }
  return false;
}

void nic_fence_protect(const struct nic_sga_entry *e, uint32_t n) {
  pthread_once(&once, start);
  if (!__atomic_load_n(&mech, __ATOMIC_ACQUIRE)) {
    for (uint32_t i = 0; i < n; i++)
      if (e[i].kind != NIC_SGA_BOUNCE) NIC_SAFETY_COUNT(fence_unprotected, 1);
    return;
  }
  sigset_t old;
  for (;;) {
    unsigned gen = __atomic_load_n(&nic_fence_gen, __ATOMIC_SEQ_CST);
    lock(&old);
    if (!meets_pin(e, n)) break;
    unlock(&old);
    /* The backend has not seen this post yet and the pin needs nothing of ours: it ends. */
    nic_fence_gen_wait(gen);
  }
  for (uint32_t i = 0; i < n; i++) {
    uintptr_t first, end;
    size_t unit;
    if (entry_units(&e[i], &first, &end, &unit)) {
      int rc = protect_range(first, end, unit);
      if (rc) not_protected(&e[i], rc);
    } else if (e[i].kind != NIC_SGA_BOUNCE) {
      not_protected(&e[i], 0);
    }
  }
  unlock(&old);
}

/* The mechanism releasing marks made without one now: a fork child's, whose parent used mprotect
 * (userfaultfd's protection does not outlive the fork). */
static const struct nic_fence_mech *releaser(void) {
  return mech ? mech : &nic_fence_mprotect;
}

/* Lock held. Under mprotect, the pages the program made read-only itself stay so (userfaultfd's
 * release leaves the page protection alone). Hugepage units are not split: the kernel changes a
 * hugetlb mapping's protection only whole. 0, or the first error. */
static int unprotect_run(uintptr_t start, uintptr_t end) {
  const struct nic_fence_mech *m = releaser();
  if (m != &nic_fence_mprotect || nic_fence_unit(start) != NIC_PAGE_SIZE)
    return m->unprotect(start, end - start);
  int err = 0;
  for (uintptr_t a = start; a < end;) {
    const bool ro = nic_fence_program_read_only(a);
    const uintptr_t run = a;
    while (a < end && nic_fence_program_read_only(a) == ro)
      a += NIC_PAGE_SIZE;
    const int rc = ro ? 0 : m->unprotect(run, a - run);
    if (!err) err = rc;
  }
  return err;
}

/* A unit whose release failed but that nothing can fault in any more: unmapped since (mprotect
 * says ENOMEM), or mapped over and no longer registered (userfaultfd says ENOENT). */
static bool gone(uintptr_t u, int err) {
  unsigned char v;
  return err == -ENOENT || (mincore((void *)u, NIC_PAGE_SIZE, &v) && errno == ENOMEM);
}

/* Records a unit whose release failed; false when it was recorded already (a release tried
 * again). */
static bool keep_stuck(uintptr_t start, uintptr_t end) {
  for (unsigned k = 0; k < nstuck; k++)
    if (stuck[k].start <= start && end <= stuck[k].end) return false;
  if (nstuck && stuck[nstuck - 1].end == start)
    stuck[nstuck - 1].end = end;
  else if (nstuck < STUCK_MAX)
    stuck[nstuck].start = start, stuck[nstuck++].end = end;
  return true;
}

/* Said from a signal handler too (a held writer's release): no stdio. Counted per unit. */
static void refused(uintptr_t at, int err) {
  static int said;
  NIC_SAFETY_COUNT(fence_release_errors, 1);
  if (nic_first_time(&said))
    nic_fence_say("NICMALLOC_FENCE=protect: the kernel refused to make ", at,
                  err == -ENOMEM ? " writable again (ENOMEM: has the process vm.max_map_count "
                                   "memory mappings?); the page stays write-protected, and is "
                                   "released at a later completion or when a write faults there "
                                   "(counted in fence_release_errors)"
                                 : " writable again; the page stays write-protected, and is "
                                   "released at a later completion or when a write faults there "
                                   "(counted in fence_release_errors)");
}

/* Lock held. Makes [start, end) writable (as far as the program let it be) and forgets it. A
 * unit the kernel does not release stays marked: unmarked, it would stay read-only and its next
 * write would get the default action (mprotect's handler passes on a fault of a page not ours).
 * It is tried again at later completions and by a write that faults there, and counted once
 * (retry: a try of one counted already). True when every unit was released. */
static bool release_run(uintptr_t start, uintptr_t end, bool retry) {
  size_t unit = nic_fence_unit(start);
  if (!unit) unit = NIC_PAGE_SIZE;
  if (!unprotect_run(start, end)) {
    nic_fence_note_released(start, end, unit);
    nic_fence_unmark(start, end);
    return true;
  }
  /* Unit by unit: what can be released is (the units at the edges of a mapping need no split),
   * and what is gone is forgotten. */
  int err = 0;
  for (uintptr_t u = start; u < end; u += unit) {
    const int rc = unprotect_run(u, u + unit);
    if (!rc || gone(u, rc)) {
      nic_fence_note_released(u, u + unit, unit);
      nic_fence_unmark(u, u + unit);
      continue;
    }
    if (keep_stuck(u, u + unit) && !retry) refused(u, rc);
    err = rc;
  }
  return !err;
}

/* Lock held: the stuck runs' units that no posted entry covers, released again. True when it
 * tried one. */
static bool retry_stuck(void) {
  unsigned n = nstuck;
  struct stuck_run was[STUCK_MAX];
  memcpy(was, stuck, n * sizeof *was);
  nstuck = 0; /* release_run records what stays */
  bool any = false;
  for (unsigned k = 0; k < n; k++) {
    size_t unit = nic_fence_unit(was[k].start);
    if (!unit) unit = NIC_PAGE_SIZE;
    for (uintptr_t u = was[k].start; u < was[k].end; u += unit)
      if (nic_fence_marked(u) && !nic_pc_any(u, u + unit, NIC_PC_DMA_MASK)) {
        release_run(u, u + unit, true);
        any = true;
      }
  }
  return any;
}

void nic_fence_unprotect(const struct nic_sga_entry *e, uint32_t n) {
  if (!__atomic_load_n(&mech, __ATOMIC_ACQUIRE)) return;
  bool any = false;
  sigset_t old;
  lock(&old);
  for (uint32_t i = 0; i < n; i++) {
    uintptr_t first, end, run = 0, run_end = 0;
    size_t unit;
    if (!entry_units(&e[i], &first, &end, &unit)) continue;
    for (uintptr_t u = first; u < end; u += unit) {
      if (!nic_fence_marked(u) || nic_pc_any(u, u + unit, NIC_PC_DMA_MASK)) continue;
      if (run_end != u) {
        if (run_end) release_run(run, run_end, false);
        run = u;
      }
      run_end = u + unit;
      any = true;
    }
    if (run_end) release_run(run, run_end, false);
  }
  if (nstuck) any |= retry_stuck();
  if (any) nic_fence_gen_bump();
  unlock(&old);
}

/* Releases a's unit: whatever is in flight there (force), or only once no posted entry covers
 * it. True when it is not protected (any more). */
static bool release_unit(uintptr_t a, bool force) {
  size_t unit = nic_fence_unit(a);
  if (!unit) return true;
  uintptr_t u = a & ~(unit - 1);
  if (!force && nic_pc_any(u, u + unit, NIC_PC_DMA_MASK)) return false; /* the usual case */
  sigset_t old;
  lock(&old);
  const bool ours = nic_fence_marked(u);
  const bool covered = ours && nic_pc_any(u, u + unit, NIC_PC_DMA_MASK);
  const bool released = !ours || ((force || !covered) && release_run(u, u + unit, false));
  /* The writer goes on while a posted entry still covers the unit: what the NIC reads of it may
   * be the new bytes, so it counts as a mismatch, as detect would report it, not only as the
   * bypass its caller counts. */
  if (ours && released && covered) NIC_SAFETY_COUNT(fence_mismatches, 1);
  unlock(&old);
  if (ours && released) nic_fence_gen_bump();
  return released;
}

bool nic_fence_release(uintptr_t a) {
  return release_unit(a, true);
}

bool nic_fence_release_if_done(uintptr_t a) {
  return release_unit(a, false);
}

bool nic_fence_still_protected(uintptr_t a) {
  size_t unit = nic_fence_unit(a);
  if (!unit) return false;
  uintptr_t u = a & ~(unit - 1);
  sigset_t old;
  lock(&old);
  bool ours = nic_fence_marked(u);
  if (!ours && mech) (void)unprotect_run(u, u + unit); /* nothing of ours to keep there */
  unlock(&old);
  return ours;
}

int nic_fence_protect_use(enum nic_fence_protect_with with) {
  pthread_once(&once, start);
  const struct nic_fence_mech *want = with == NIC_PROTECT_MPROTECT ? &nic_fence_mprotect
                                      : with == NIC_PROTECT_UFFD   ? &nic_fence_uffd
                                                                   : mech;
  if (!want) return -ENOTSUP;
  sigset_t old;
  lock(&old);
  int rc = 0;
  /* The pages, not only the count: a post the backend refused lowers the count before its pages
   * are released, and the other mechanism cannot release what this one protected. */
  if (want != mech && (__atomic_load_n(&nic_safety_ctr.inflight_entries, __ATOMIC_ACQUIRE) ||
                       !nic_fence_none_marked()))
    rc = -EBUSY;
  else if (want != mech && !bring_up(want))
    rc = -ENOTSUP;
  else
    __atomic_store_n(&mech, want, __ATOMIC_SEQ_CST);
  wait_unlocked_calls(); /* before a post can take the lock and protect a page */
  unlock(&old);
  if (!rc) nic_fence_poller_start();
  if (!rc) nic_fence_pins_install();
  return rc;
}

/* Recorded before protect has a mechanism too: the first post would otherwise protect pages a
 * registration running since before it is pinning (under uffd, the registration then waits
 * inside io_uring_register or ibv_reg_mr, holding what the completion needs). */
bool nic_fence_pin_begin(uintptr_t start, uintptr_t end) {
  sigset_t old;
  lock(&old);
  bool ok = npins < PINS_MAX && !nic_fence_any_marked(start, end);
  if (ok) pins[npins].start = start, pins[npins++].end = end;
  unlock(&old);
  return ok;
}

void nic_fence_pin_end(uintptr_t start, uintptr_t end) {
  sigset_t old;
  lock(&old);
  for (unsigned k = 0; k < npins; k++)
    if (pins[k].start == start && pins[k].end == end) {
      pins[k] = pins[--npins];
      break;
    }
  unlock(&old);
  nic_fence_gen_bump(); /* posts waiting for it */
}

bool nic_fence_pins_full(void) {
  return __atomic_load_n(&npins, __ATOMIC_RELAXED) >= PINS_MAX;
}

static int sys_mprotect(uintptr_t start, size_t len, int prot) {
  return syscall(SYS_mprotect, start, len, prot) ? -errno : 0;
}

/* Lock held: mprotect of [start, end) to prot, but around the pages protect holds. Those stay
 * read-only when prot would let writes in (their release makes them readable and writable, as
 * the caller asked); when prot takes writes away, they get it and protect forgets them, so that
 * their release does not make them writable again. */
static int around_marked(uintptr_t start, uintptr_t end, int prot, bool *forgot) {
  for (uintptr_t a = start; a < end;) {
    const bool marked = nic_fence_marked(a);
    const uintptr_t run = a;
    while (a < end && nic_fence_marked(a) == marked)
      a += NIC_PAGE_SIZE;
    const bool keep = marked && (prot & PROT_WRITE);
    int rc = sys_mprotect(run, a - run, keep ? (prot & ~PROT_WRITE) | PROT_READ : prot);
    if (rc) return rc;
    if (marked && !keep) {
      nic_fence_unmark(run, a);
      *forgot = true;
    }
  }
  return 0;
}

/* Kept whatever the mechanism: protect may start, or change to mprotect, after the call. */
static void note_prot(uintptr_t start, size_t len, int prot) {
  if (len && start + len > start && start + len <= NIC_USER_END)
    nic_fence_note_program_prot(nic_page_down(start), nic_page_up(start + len), prot);
}

/* Every mprotect of the process (alloc/os/interpose.c), mimalloc's commits among them: 2.0.9
 * commits liberally, with PROT_READ | PROT_WRITE on 1 MiB-aligned spans that take in committed
 * pages with live blocks, and such a call made a page posted there writable while the NIC read
 * it, marked all the same (a write then reached the wire unseen: about one run in 30 of the
 * integrity test). Made under the lock, so that no protect or release comes between its look at
 * the marks and its system calls. */
static bool protection_changing(uintptr_t start, size_t len, int prot, int *rc) {
  __atomic_add_fetch(&unlocked_calls, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&mech, __ATOMIC_SEQ_CST) != &nic_fence_mprotect) {
    /* userfaultfd's write protection outlives mprotect: nothing to keep */
    *rc = sys_mprotect(start, len, prot);
    if (!*rc) note_prot(start, len, prot);
    __atomic_sub_fetch(&unlocked_calls, 1, __ATOMIC_SEQ_CST);
    return true;
  }
  __atomic_sub_fetch(&unlocked_calls, 1, __ATOMIC_SEQ_CST);
  const uintptr_t end = nic_page_up(start + len);
  if (!len || nic_page_down(start) != start || start + len < start || end > NIC_USER_END) {
    *rc = sys_mprotect(start, len, prot); /* refused, or nothing there protect can hold */
    return true;
  }
  bool forgot = false;
  sigset_t old;
  lock(&old);
  *rc = nic_fence_any_marked(start, end) ? around_marked(start, end, prot, &forgot)
                                         : sys_mprotect(start, len, prot);
  if (!*rc) note_prot(start, len, prot);
  unlock(&old);
  if (forgot) nic_fence_gen_bump(); /* their held writers are the program's business now */
  return true;
}
/* New pages there have the protection they are mapped with. A drop that keeps the mapping
 * (madvise) forgets too: the release then gives writes back, as it did before. */
static void pages_leaving(uintptr_t start, size_t len) {
  if (len && start + len > start && start + len <= NIC_USER_END)
    nic_fence_forget_program_prot(nic_page_down(start), nic_page_up(start + len));
}
static bool step_releasing(unsigned index, unsigned step, void *base, size_t len) {
  (void)index, (void)step;
  pages_leaving((uintptr_t)base, len);
  return true;
}
static bool chunk_releasing(unsigned index, void *base, size_t len) {
  (void)index;
  pages_leaving((uintptr_t)base, len);
  return true;
}
NIC_MEMORY_WATCHER(fence_mprotect_calls, .protection_changing = protection_changing,
                   .pages_leaving = pages_leaving, .step_releasing = step_releasing,
                   .chunk_releasing = chunk_releasing);
