/* Write fencing beyond wait: NICMALLOC_FENCE=protect (writers of in-flight pages are held until
 * the completion) and detect (a checksum at post, compared with what the NIC read). What
 * sga_post.c, the sim engine and the allocation profiler call, and what the fence_*.c files
 * share. The design and its rules are in safety/README.md ("Write fencing"). */
#ifndef NIC_FENCE_H
#define NIC_FENCE_H

#include "nicmalloc.h"
#include "safety.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- fence.c: the hooks of nic_sga_post and of its completion ---- */
/* After the entries' page references are taken, before the backend sees message msg. */
void nic_fence_posted(const void *msg, const struct nic_sga_entry *e, uint32_t n);
/* Completion (or a post the backend refused, status < 0), before the page references are
 * dropped: the memory is still the message's. */
void nic_fence_completing(const void *msg, int status);
/* After the page references are dropped. */
void nic_fence_completed(const struct nic_sga_entry *e, uint32_t n);
/* From config.c: NICMALLOC_FENCE_PROTECT, NICMALLOC_FENCE_DETECT_SAMPLE. */
void nic_fence_load_settings(struct nic_safety_config *c);

/* ---- fence_protect.c: write-protecting the pages of posted entries ---- */
void nic_fence_protect(const struct nic_sga_entry *e, uint32_t n);
/* Releases the units of the entries' pages that no posted entry covers any more. */
void nic_fence_unprotect(const struct nic_sga_entry *e, uint32_t n);
bool nic_fence_protect_started(void);
/* Whether a page of [start, end) is write-protected by protect now. A completion drops its page
 * references before it makes the pages writable (it decides the release from the counts): in
 * between, pages the counts show clear are still protected, and a write there is held. What
 * nicmalloc writes on the strength of clear counts (a free, a fence's caller) asks this too. */
bool nic_fence_any_protected(uintptr_t start, uintptr_t end);
/* Makes the unit holding a writable now, whatever is in flight there: for a writer that must
 * not wait (a NIC thread) or has waited too long. If a posted entry still covers the unit, the
 * write may reach the wire: counted in fence_mismatches. Any thread, signal handlers included.
 * False when the kernel refused (the unit stays protected: fence_release_errors). */
bool nic_fence_release(uintptr_t a);
/* A write faulted on a's unit: if no posted entry covers it any more, its release is due (the
 * completion's is about to come, or the kernel refused it), and is made now. True when the unit
 * is not protected (any more). Any thread, signal handlers included. */
bool nic_fence_release_if_done(uintptr_t a);
/* Under the protect lock: is a's unit still ours? If not, makes sure it is writable (uffd: a
 * fault that raced with a release). */
bool nic_fence_still_protected(uintptr_t a);
/* Benchmarks and tests: switch mechanism (protect starts if needed). -EBUSY while entries are in
 * flight or a page is protected, -ENOTSUP when the mechanism cannot run here. */
int nic_fence_protect_use(enum nic_fence_protect_with with);
/* "uffd", "mprotect", or "none" (not started, or nothing worked). */
const char *nic_fence_protect_name(void);
/* Whether the kernel's own writes into a protected page wait too (uffd), rather than fail with
 * EFAULT (mprotect, and uffd where only faults of user mode may be handled). */
bool nic_fence_kernel_writes_wait(void);
/* The name, and for uffd of user-mode faults only that (the statistics report). */
const char *nic_fence_protect_detail(void);

/* Registrations pinning pages (fence_pins.c, through regcache's pin guard) and the sub-pages
 * pass rewriting free lists (heap/sub_pages_scan.h): begin is false, changing nothing, when a
 * page of [start, end) is protected now (or too many pins run); else no page of it is protected
 * until end (posts meeting it wait), even by a post that starts protect. */
bool nic_fence_pin_begin(uintptr_t start, uintptr_t end);
void nic_fence_pin_end(uintptr_t start, uintptr_t end);
bool nic_fence_pins_full(void);
/* Installs the pin guard and the sub-pages pass's (at start-up under NICMALLOC_FENCE=protect,
 * else once protect has a mechanism). */
void nic_fence_pins_install(void);

/* A way to write-protect: userfaultfd (fence_uffd.c) or mprotect + SIGSEGV (fence_segv.c).
 * protect and unprotect get unit-aligned ranges and run under the protect lock. */
struct nic_fence_mech {
  const char *name;
  int (*start)(void); /* 0 or -errno; once */
  int (*protect)(uintptr_t start, size_t len);
  int (*unprotect)(uintptr_t start, size_t len);
  void (*after_fork_child)(void);
};
extern const struct nic_fence_mech nic_fence_uffd, nic_fence_mprotect;
/* fence_uffd.c: false when its descriptor handles faults of user mode only
 * (vm.unprivileged_userfaultfd=0 and no CAP_SYS_PTRACE nor /dev/userfaultfd). */
bool nic_fence_uffd_kernel_writes_wait(void);
/* fence_uffd.c: after its start failed, the step that did ("its fault thread could not be
 * started"), for the message that says so with the errno. */
const char *nic_fence_uffd_failed_step(void);
/* fence_segv.c: "nicmalloc: error: <a><x in hex><b>" on stderr, async-signal-safe (no stdio). */
void nic_fence_say(const char *a, uintptr_t x, const char *b);
/* fence_sigmask.c: from now on the program's masks never block SIGSEGV (the mprotect fence's
 * handler must be able to hold any thread). */
void nic_fence_sigmask_arm(void);

/* ---- fence_pages.c: which 4 KiB pages protect has write-protected ---- */
/* Readers are lock-free and async-signal-safe; writers hold the protect lock. A page is marked
 * before it is protected and unmarked after it is writable again. */
bool nic_fence_marked(uintptr_t a);
bool nic_fence_mark(uintptr_t start, uintptr_t end); /* false: no memory for the bitmap */
bool nic_fence_any_marked(uintptr_t start, uintptr_t end);
void nic_fence_unmark(uintptr_t start, uintptr_t end);
/* A release of the units of [start, end) (unit bytes each), made after the kernel woke their
 * writers: it stamps them with a new release epoch. Lock held. */
void nic_fence_note_released(uintptr_t start, uintptr_t end, size_t unit);
/* The epoch now (read before a fault is read), and whether a's unit was released after it: a
 * writer seen held then has been woken since. Lock-free. */
uint64_t nic_fence_release_epoch(void);
bool nic_fence_released_since(uintptr_t a, uint64_t epoch);
/* The program's mprotect of [start, end) to prot (a range protect never covers is not kept
 * when it takes writes away), and pages that left or were replaced: a release leaves the pages
 * whose last protection from the program lacked PROT_WRITE read-only. */
void nic_fence_note_program_prot(uintptr_t start, uintptr_t end, int prot);
void nic_fence_forget_program_prot(uintptr_t start, uintptr_t end);
bool nic_fence_program_read_only(uintptr_t a);
/* Whether no page is marked (a walk of every leaf: for the mechanism switch). */
bool nic_fence_none_marked(void);
/* Calls fn on every marked run (fork child). */
void nic_fence_each_marked(void (*fn)(uintptr_t start, uintptr_t end));
/* The unit protect works in at a: the hugepage on hugetlb chunks, else 4 KiB; 0 when a is not
 * in memory protect covers (the dataplane chunks and the control arena). */
size_t nic_fence_unit(uintptr_t a);
/* The range a protection covering a must be registered for (uffd): its chunk or the arena. */
bool nic_fence_region(uintptr_t a, uintptr_t *start, size_t *len);
/* Bumped after every release: the futex word a held SIGSEGV writer sleeps on. */
extern unsigned nic_fence_gen;
extern unsigned nic_fence_gen_waiters;
void nic_fence_gen_bump(void); /* async-signal-safe */
/* Sleeps until nic_fence_gen moves from seen (or a millisecond passes). */
void nic_fence_gen_wait(unsigned seen);

/* ---- fence_threads.c: threads protect never holds, and the poller ---- */
/* This thread performs DMA or runs completions (the sim engine, the poller): a write of it to a
 * protected page releases the page instead of waiting, which could never end. */
void nic_fence_thread_is_nic(void);
void nic_fence_thread_gone(void);
/* Whether a thread is one of those (by tid: the uffd thread asks for the faulting one). */
bool nic_fence_thread_exempt(pid_t tid);
bool nic_fence_self_exempt(void); /* signal-safe */
/* Tests: called by the userfaultfd thread before each look at the writers it saw held. */
extern void (*nic_fence_sweep_hook)(void);
/* Starts the poller: while a writer is held it polls the backend, so that a completion needed
 * by a held thread runs even if that thread is the program's only poller. */
void nic_fence_poller_start(void);
/* True on a thread protect never holds, once the free thread runs: its frees (deferred.c) must
 * go to that thread, which a protected page holds like any writer, rather than be made here. */
bool nic_fence_frees_handed_off(void);
/* Brackets a completion: its frees (deferred ones, the message, the program's in its callback)
 * go to the free thread while protect runs. */
void nic_fence_completion_begin(void);
void nic_fence_completion_end(void);
void nic_fence_free_kick(void);   /* the free thread runs nic_safety_retry_deferred */
void nic_fence_poller_kick(void); /* async-signal-safe */

/* ---- fence_detect.c and fence_report.c ---- */
void nic_fence_detect_posted(const void *msg, const struct nic_sga_entry *e, uint32_t n);
void nic_fence_detect_completing(const void *msg, int status);
bool nic_fence_detect_started(void);
/* A mismatch on [addr, addr+len): one report on stderr with the blocks' sites, and the count. */
void nic_fence_report(const void *addr, size_t len, const char *when);
/* The checksum detect compares (any change of the bytes changes it, short of a 2^-64 chance). */
uint64_t nic_fence_sum(const void *p, size_t len);

#endif
