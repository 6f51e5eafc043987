/* Control-heap decommits that wait for the purge delay. mimalloc 2.0.9 keeps one list of the
 * segments exited threads abandoned, for every arena. A dataplane heap that needs a segment
 * visits up to eight of them (mi_segment_try_reclaim); it may not take a control segment (wrong
 * arena) and, before it puts the segment back, decommits its free slices at once, without the
 * decommit delay ("we may not visit soon again"). The next control heap that reclaims the
 * segment then commits and faults those pages in again: mstress under NICMALLOC_DP_MIN_SIZE=4096
 * made 750 such MADV_DONTNEED calls and three times the minor faults of mimalloc alone.
 *
 * So the interposed madvise (interpose.c) asks the heap layer's filter whether a MADV_DONTNEED
 * falls in such a segment; if so it only notes the range here, and mimalloc, which commits again
 * before it touches a decommitted byte (mprotect, interposed too), finds the pages still there
 * when it reuses them. A range nobody committed again for the purge delay is dropped late (the
 * reaper's pass); any mprotect, munmap, fixed mmap, mremap or page-dropping madvise over a noted
 * range takes it out first, so a late drop never hits pages mimalloc handed out again. */
#ifndef NIC_LATE_DECOMMIT_H
#define NIC_LATE_DECOMMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True: mimalloc's decommit of [addr, addr + len) may wait (the heap layer's judgement). */
typedef bool (*nic_late_decommit_filter)(void *addr, size_t len);

/* Turns waiting on (the heap layer, once the dataplane is in use) with the delay in ms; a zero
 * delay leaves every decommit immediate. */
void nic_late_decommit_enable(nic_late_decommit_filter filter, unsigned delay_ms);

/* Only a decommit mimalloc makes inside the dataplane's general allocation path may wait: the
 * heap layer arms the calling thread around it. A thread's first dataplane allocation is where
 * its heap takes its first segment and visits the abandoned ones. Any other MADV_DONTNEED (the
 * program's own, of a page of a live block in an abandoned segment: it must read zeros at once;
 * mimalloc's from the inline path's rarer visits) is made at once. */
extern __thread unsigned nic_late_decommit_armed
    __attribute__((tls_model("initial-exec"), visibility("hidden")));
static inline void nic_late_decommit_arm(void) {
  nic_late_decommit_armed++;
}
static inline void nic_late_decommit_disarm(void) {
  nic_late_decommit_armed--;
}

/* From the interposed madvise(MADV_DONTNEED): true when the range was noted (the call then
 * returns success without dropping anything). */
bool nic_late_decommit_note(void *addr, size_t len);

/* The calls that change [addr, addr + len): noted ranges over it are forgotten (a commit, a
 * new mapping, an unmap or a drop made now). One load when nothing is noted. */
void nic_late_decommit_forget_slow(uintptr_t start, uintptr_t end);
extern unsigned nic_late_decommits_noted __attribute__((visibility("hidden")));
static inline void nic_late_decommit_forget(const void *addr, size_t len) {
  if (__builtin_expect(__atomic_load_n(&nic_late_decommits_noted, __ATOMIC_ACQUIRE) == 0, 1))
    return;
  nic_late_decommit_forget_slow((uintptr_t)addr, (uintptr_t)addr + len);
}

/* Drops the ranges noted at least the delay ago (all of them with all), with the page events
 * and the commit map's note that the immediate drop would have made. */
void nic_late_decommit_run(bool all);

/* Over the process lifetime: ranges noted, ranges committed again before their drop (pages
 * reused without a fault), ranges dropped late. */
struct nic_late_decommit_counts {
  uint64_t noted, reused, dropped;
};
void nic_late_decommit_counts(struct nic_late_decommit_counts *out);

#endif
