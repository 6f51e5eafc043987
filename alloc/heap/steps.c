#define _GNU_SOURCE
#include "steps.h"

#include "config.h"
#include "events.h"
#include "log.h"
#include "memcg.h"
#include "mi_layout.h"
#include "step_pages.h"

#include <mimalloc.h>

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

static uint64_t backed_total, released_total, page_fallbacks, pin_failures;
static bool last_refusal_lock; /* nic_step_back_lock_refused; chunk lock */
static enum nic_page_kind last_kind;

/* Smaller pages than the default asks for are the common case (no hugetlb pool): a warning only
 * when NICMALLOC_PAGE_KIND named the kind. */
static void report_mapping(unsigned index, unsigned step, const struct nic_mapping *m,
                           enum nic_page_kind want) {
  if (m->kind < want) {
    page_fallbacks++;
    nic_log_fallback_once(nic_config()->page_kind_set,
                          "dataplane chunk %u step %u is backed by %s pages, not %s (hugetlb pool "
                          "too small? see /sys/kernel/mm/hugepages); further steps are counted in "
                          "the stats",
                          index, step, nic_page_kind_str(m->kind), nic_page_kind_str(want));
  }
  nic_log_info("dataplane chunk %u step %u backed: %s pages, %s", index, step,
               nic_page_kind_str(m->kind), m->pinned ? "pinned" : "NOT pinned");
  /* Only when NICMALLOC_PAGE_KIND named hugetlb pages: auto stops at THP under protect. */
  if (m->kind >= NIC_PAGE_2M && nic_config()->fence_protect)
    nic_log_warn_once("NICMALLOC_FENCE=protect on %s hugetlb pages (NICMALLOC_PAGE_KIND): the "
                      "kernel write-protects such a page only whole, so a write anywhere in a "
                      "page being sent waits for the send, and a thread whose own completion "
                      "must run first waits NICMALLOC_FENCE_TIMEOUT_MS",
                      nic_page_kind_str(m->kind));
}

/* Returns false when the policy says an unpinned step must not be used. */
static bool accept_pin_result(unsigned index, unsigned step, const struct nic_mapping *m) {
  struct nic_step *s = &nic_chunk_at(index)->steps[step];
  const bool refused_before = s->pin_refused;
  s->pin_refused = false;
  if (m->pinned) return true;
  const bool fail = nic_config()->on_pin_fail == NIC_PIN_FAIL_FAIL;
  s->pin_refused = fail;
  if (!refused_before) pin_failures++;
  struct rlimit lim = {0, 0};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  nic_log_fallback_once(fail,
                        "cannot lock dataplane chunk %u step %u in memory (mlock: %s; "
                        "RLIMIT_MEMLOCK is %lu bytes, CAP_IPC_LOCK lifts it); %s",
                        index, step, strerror(m->pin_errno), (unsigned long)lim.rlim_cur,
                        fail ? "NICMALLOC_ON_PIN_FAIL=fail: dataplane requests get ENOMEM"
                             : "using it unpinned (NICMALLOC_ON_PIN_FAIL=fallback)");
  return !fail;
}

/* 1 GiB pages only fit steps of 1 GiB. */
static enum nic_page_kind kind_wanted(void) {
  const enum nic_page_kind want = nic_config()->page_kind;
  return want == NIC_PAGE_1G && nic_dp.step_shift < 30 ? NIC_PAGE_2M : want;
}

size_t nic_step_resident_locked(unsigned index, unsigned step) {
  struct nic_step *s = &nic_chunk_at(index)->steps[step];
  const size_t len = (size_t)1 << nic_dp.step_shift;
  if (s->whole) return len;
  bool known;
  const size_t bytes = nic_resident_bytes(nic_step_base(index, step), len, &known);
  /* Only locked pages are sure to stay: the kernel may reclaim an unpinned step's. */
  s->whole = known && bytes == len && s->mapping.pinned;
  return bytes;
}

/* Bytes of the steps locked as they are touched that are not in memory yet: what they may
 * still take from the memory cgroup. */
static size_t untouched_bytes_locked(void) {
  const size_t len = (size_t)1 << nic_dp.step_shift;
  size_t bytes = 0;
  for (unsigned i = 0; i < nic_chunk_slots_used(); i++) {
    const struct nic_chunk *c = nic_chunk_at(i);
    if (c->state != NIC_CHUNK_LIVE && c->state != NIC_CHUNK_DRAINING) continue;
    for (unsigned s = 0; s < nic_steps_per_chunk(); s++)
      if (c->steps[s].backed && !c->steps[s].mapping.populated)
        bytes += len - nic_step_resident_locked(i, s);
  }
  return bytes;
}

int nic_step_back_locked(unsigned index, unsigned step) {
  struct nic_chunk *c = nic_chunk_at(index);
  struct nic_step *s = &c->steps[step];
  if (s->backed) return 0;
  const struct nic_config *cfg = nic_config();
  const size_t len = (size_t)1 << nic_dp.step_shift;
  void *base = nic_step_base(index, step);
  const enum nic_page_kind want = kind_wanted();
  struct nic_mapping m;
  /* Only under a memory cgroup limit: every lazily backed step is looked at. */
  const size_t lazy =
      !cfg->populate_at_commit && nic_memcg_headroom() != SIZE_MAX ? untouched_bytes_locked() : 0;
  int rc = nic_back_step(base, len, want, cfg->populate_at_commit, lazy,
                         cfg->on_pin_fail == NIC_PIN_FAIL_FAIL, &m);
  last_refusal_lock = false;
  if (rc) {
    nic_log_fallback_once(cfg->on_pin_fail == NIC_PIN_FAIL_FAIL,
                          "cannot back dataplane chunk %u step %u with memory (%s)", index, step,
                          rc == -EDQUOT ? "it would not fit under the memory cgroup's limit, and "
                                          "prefaulting it would wake the OOM killer"
                                        : strerror(-rc));
    return -ENOMEM;
  }
  /* Refused under NICMALLOC_ON_PIN_FAIL=fail: the step stays unbacked, so no registration is
   * made of it. nic_back_step faulted nothing in for it; pages it had stay: mimalloc may have
   * written to them already (a registration's backing of a cached segment). Its page kind is
   * neither said nor counted: it is not backed, and mimalloc asks for it again. */
  if (!accept_pin_result(index, step, &m)) {
    last_refusal_lock = true;
    return -ENOMEM;
  }
  /* A step locked as it is touched learns whether THP backs it when it is faulted in whole;
   * hugetlb it missed now. */
  if (m.populated || want >= NIC_PAGE_2M) report_mapping(index, step, &m, want);
  s->mapping = m;
  nic_step_not_whole_locked(index, step);
  c->mapping.kind = m.kind;
  last_kind = m.kind;
  backed_total++;
  __atomic_store_n(&s->backed, 1, __ATOMIC_RELEASE);
  return 0;
}

/* A step backed when RLIMIT_MEMLOCK had no room is used unpinned (NICMALLOC_ON_PIN_FAIL=fallback),
 * and nothing else tries again: room may have come back since (other steps given back, exited
 * threads' segments freed). Its registration locks it then, as it faults it in whole anyway.
 * Locked in place, with no page faulted in: mlock faults a private writable step in for write,
 * and a page a post in flight write-protects (NICMALLOC_FENCE=protect, userfaultfd) held it
 * until the completion, with the chunks lock held (the sim's engine, the reaper and fork wait
 * for it). Where the kernel cannot lock on fault, mlock only when no page can be so protected;
 * under protect the step stays unpinned, as it was used until now. */
static void lock_again(unsigned index, unsigned step, struct nic_step *s) {
  if (s->mapping.pinned) return;
  void *base = nic_step_base(index, step);
  const size_t len = (size_t)1 << nic_dp.step_shift;
  int rc = nic_lock_step_in_place(base, len);
  if (rc == -ENOTSUP && !nic_config()->fence_protect) rc = mlock(base, len) ? -errno : 0;
  if (rc) return;
  s->mapping.pinned = true;
  s->mapping.pin_errno = 0;
  nic_log_info("dataplane chunk %u step %u locked at its registration, with room for it now", index,
               step);
}

int nic_step_populate_locked(unsigned index, unsigned step) {
  struct nic_step *s = &nic_chunk_at(index)->steps[step];
  if (!s->backed) return 0;
  if (s->mapping.populated) {
    lock_again(index, step, s);
    return 0;
  }
  void *base = nic_step_base(index, step);
  const size_t len = (size_t)1 << nic_dp.step_shift;
  const enum nic_page_kind want = kind_wanted();
  int rc = nic_populate_step(base, len, want, &s->mapping);
  /* The program's own doing, not a lack of memory: it is told so by the call that registers,
   * and the step is tried again once its pages are writable. */
  if (rc == -EFAULT) return -EFAULT;
  if (rc) {
    nic_log_fallback_once(nic_config()->on_pin_fail == NIC_PIN_FAIL_FAIL,
                          "cannot fault in dataplane chunk %u step %u before its registration (%s)",
                          index, step,
                          rc == -EDQUOT ? "it would not fit under the memory cgroup's limit, and "
                                          "faulting it in would wake the OOM killer"
                                        : strerror(-rc));
    return -ENOMEM;
  }
  if (want == NIC_PAGE_THP) report_mapping(index, step, &s->mapping, want);
  nic_chunk_at(index)->mapping.kind = s->mapping.kind;
  last_kind = s->mapping.kind;
  /* Units given back inside it are in again with the rest; blocks held back over 4 KiB pages
   * given back stay held back (their pages are in again, the blocks still off the lists). */
  nic_step_pages_faulted_in_locked(index, step);
  lock_again(index, step, s);
  return 0;
}

/* The committed bit of the slices [first, last] (slice numbers inside chunk index; chunks.h):
 * with or/and, as the chunk lock's writers of the other bits may run at the same time. A slice
 * also mapped and not general turns FAST with it; a decommit turns it back, before its pages
 * may go (nic_step_pages_drop). */
static void slice_bits(unsigned index, size_t first, size_t last, bool set) {
  uint8_t *bytes = nic_chunk_slices(index);
  for (size_t i = first; i <= last; i++) {
    if (set)
      __atomic_fetch_or(&bytes[i], (uint8_t)NIC_DP_SLICE_COMMITTED, __ATOMIC_SEQ_CST);
    else
      __atomic_fetch_and(&bytes[i], (uint8_t)~NIC_DP_SLICE_COMMITTED, __ATOMIC_SEQ_CST);
  }
}

/* The slices a commit of at most a segment found without the committed bit, from start. */
#define SEGMENT_SLICES (NIC_MI_SEGMENT_SIZE >> NIC_SLICE_SHIFT)
struct new_marks {
  uintptr_t start;
  uint64_t bits[SEGMENT_SLICES / 64];
};

/* slice_bits' set, noting in marks (when given) the slices whose bit it set. */
static void slice_bits_noted(unsigned index, size_t first, size_t last, struct new_marks *marks) {
  if (!marks) {
    slice_bits(index, first, last, true);
    return;
  }
  uint8_t *bytes = nic_chunk_slices(index);
  const uintptr_t base = (uintptr_t)nic_chunk_base(index);
  for (size_t i = first; i <= last; i++) {
    const uint8_t old =
        __atomic_fetch_or(&bytes[i], (uint8_t)NIC_DP_SLICE_COMMITTED, __ATOMIC_SEQ_CST);
    const size_t k = (base + (i << NIC_SLICE_SHIFT) - marks->start) >> NIC_SLICE_SHIFT;
    if (!(old & NIC_DP_SLICE_COMMITTED)) marks->bits[k / 64] |= 1ull << (k % 64);
  }
}

/* A failed commit mimalloc looks at leaves the range as it was: it never decommits what it
 * did not commit, so a bit left set would hold the steps backed before the refused one (and
 * the chunk) for good. Only the bits this commit set: the range may take in slices mimalloc
 * committed before (it commits liberally, in 64 KiB units and 1 MiB at least), and only its
 * owner thread commits or decommits a segment's slices. */
static void take_back_marks(const struct new_marks *marks) {
  for (size_t k = 0; k < SEGMENT_SLICES; k++) {
    if (!(marks->bits[k / 64] >> (k % 64) & 1)) continue;
    const uintptr_t a = marks->start + (k << NIC_SLICE_SHIFT);
    const unsigned index = nic_chunk_index((const void *)a);
    const size_t slice = (a - (uintptr_t)nic_chunk_base(index)) >> NIC_SLICE_SHIFT;
    slice_bits(index, slice, slice, false);
  }
}

static __thread size_t huge_segment_bytes __attribute__((tls_model("initial-exec")));
/* What became of the claim's commit: mimalloc 2.0.9 does not look (_mi_arena_alloc_aligned). */
static __thread enum nic_huge_claim huge_claim __attribute__((tls_model("initial-exec")));

void nic_steps_expect_huge(size_t segment_bytes) {
  huge_segment_bytes = segment_bytes;
  huge_claim = NIC_HUGE_CLAIM_NONE;
}

enum nic_huge_claim nic_steps_expect_huge_done(void) {
  huge_segment_bytes = 0;
  return huge_claim;
}

/* The arena's commit of a huge segment's claim, cut to the segment. The tail past the segment
 * is in no other segment while this one lives (the arena's in-use bits hold the whole claim),
 * and mimalloc never touches it: the huge page and its usable size end at the segment's end,
 * and huge segments are never cached for reuse as other segments. When the segment is freed
 * the arena decommits the whole claim and clears its committed bits, so whoever claims those
 * blocks next commits them again, through here. The tail's slices never get the committed bit,
 * so free, the reaper and the stats see them as free, which they are. Only the first commit of
 * the request that starts on an arena block and spans whole arena blocks is the claim's (with
 * eager commit off, mimalloc's other commits are of slices inside a segment). */
static size_t huge_claim_cut(const void *addr, size_t len, bool *claim) {
  const size_t bytes = huge_segment_bytes;
  *claim = false;
  if (__builtin_expect(bytes == 0, 1)) return len;
  if (((uintptr_t)addr & (NIC_MI_ARENA_BLOCK - 1)) || len % NIC_MI_ARENA_BLOCK) return len;
  huge_segment_bytes = 0;
  *claim = true;
  const size_t slice = (size_t)1 << NIC_SLICE_SHIFT;
  const size_t cut = (bytes + slice - 1) & ~(slice - 1);
  return cut < len ? cut : len;
}

int nic_steps_commit(void *addr, size_t len) {
  if (len == 0) return 0;
  /* mimalloc 2.0.9 looks at every commit's answer but an arena claim's (whole arena blocks):
   * a segment's header slices, a span of its pages. Those are within one segment. */
  const bool looked_at = ((uintptr_t)addr & (NIC_MI_ARENA_BLOCK - 1)) || len % NIC_MI_ARENA_BLOCK;
  struct new_marks marks_space, *marks = NULL;
  const uintptr_t slice_mask = ((uintptr_t)1 << NIC_SLICE_SHIFT) - 1;
  if (looked_at && len + ((uintptr_t)addr & slice_mask) <= NIC_MI_SEGMENT_SIZE) {
    marks_space.start = (uintptr_t)addr & ~slice_mask;
    memset(marks_space.bits, 0, sizeof marks_space.bits);
    marks = &marks_space;
  }
  bool claim;
  len = huge_claim_cut(addr, len, &claim);
  const uintptr_t first = (uintptr_t)addr, last = first + len - 1;
  int rc = 0;
  /* Commits of a step already backed (mimalloc commits in 64 KiB slices too) take no lock. */
  for (uintptr_t a = first; a <= last && a >= first;
       a = (a | (((uintptr_t)1 << nic_dp.step_shift) - 1)) + 1) {
    if (!nic_in_dp((const void *)a)) break;
    const unsigned index = nic_chunk_index((const void *)a), step = nic_step_index((const void *)a);
    /* mimalloc holds these slices committed from now on (see nic_step_release_locked). */
    const uintptr_t base = (uintptr_t)nic_chunk_base(index);
    const uintptr_t step_last = a | (((uintptr_t)1 << nic_dp.step_shift) - 1);
    const uintptr_t stop = last < step_last ? last : step_last;
    slice_bits_noted(index, (a - base) >> NIC_SLICE_SHIFT, (stop - base) >> NIC_SLICE_SHIFT, marks);
    /* The commit has failed as a whole: backing (and prefaulting, pinning) the steps after a
     * refused one would only hold memory nobody uses. Their bits are set all the same, as
     * mimalloc goes on with a claim whose commit failed (nic_steps_expect_huge), and the bits
     * keep the chunk from being released under it until it decommits the claim; a commit
     * mimalloc looks at takes them back below. */
    if (rc) continue;
    /* Pages given back inside the step (step_pages.h) come back before mimalloc writes. */
    if (nic_step_pages_refill((void *)a, stop - a + 1)) rc = -ENOMEM;
    if (__atomic_load_n(&nic_chunk_at(index)->steps[step].backed, __ATOMIC_SEQ_CST)) continue;
    nic_chunks_lock();
    /* A released chunk: an allocation that was under way when it was given back (see
     * nic_chunk_release_locked). It is mapped again for it. A chunk never mapped has no arena
     * mimalloc could commit in. */
    const int state = nic_chunk_at(index)->state;
    if (state == NIC_CHUNK_RELEASED) nic_chunk_revive_locked(index);
    if (state == NIC_CHUNK_UNMAPPED) {
      slice_bits(index, (a - base) >> NIC_SLICE_SHIFT, (stop - base) >> NIC_SLICE_SHIFT, false);
      rc = -ENOMEM;
    } else if (nic_step_back_locked(index, step)) {
      rc = -ENOMEM;
    }
    nic_chunks_unlock();
  }
  if (claim) huge_claim = rc ? NIC_HUGE_CLAIM_REFUSED : NIC_HUGE_CLAIM_BACKED;
  if (rc && marks) take_back_marks(marks);
  return rc;
}

bool nic_step_back_lock_refused(void) {
  return last_refusal_lock;
}

void nic_steps_forget_locked(unsigned index) {
  struct nic_chunk *c = nic_chunk_at(index);
  for (unsigned s = 0; s < nic_steps_per_chunk(); s++) {
    __atomic_store_n(&c->steps[s].backed, 0, __ATOMIC_RELEASE);
    c->steps[s].mapping.pinned = false;
    nic_step_not_whole_locked(index, s);
    nic_step_pages_forget_locked(index, s);
  }
}

void nic_steps_decommit(void *addr, size_t len) {
  /* Only slices wholly inside: mimalloc decommits OS pages, and a slice it still holds part of
   * stays committed. */
  uintptr_t a = (uintptr_t)addr, end = a + len;
  const uintptr_t slice = (uintptr_t)1 << NIC_SLICE_SHIFT;
  a = (a + slice - 1) & ~(slice - 1);
  end &= ~(slice - 1);
  const size_t chunk = (size_t)1 << nic_dp.shift;
  while (a < end && nic_in_dp((const void *)a)) {
    const unsigned index = nic_chunk_index((const void *)a);
    const uintptr_t base = (uintptr_t)nic_chunk_base(index),
                    stop = end < base + chunk ? end : base + chunk;
    slice_bits(index, (a - base) >> NIC_SLICE_SHIFT, ((stop - base) >> NIC_SLICE_SHIFT) - 1, false);
    a = stop;
  }
  nic_step_pages_drop(addr, len);
}

bool nic_step_committed(unsigned index, unsigned step) {
  const size_t per_step = (size_t)1 << (nic_dp.step_shift - NIC_SLICE_SHIFT);
  return nic_slices_committed(index, (size_t)step * per_step, (size_t)(step + 1) * per_step - 1);
}

bool nic_step_release_locked(unsigned index, unsigned step) {
  struct nic_step *s = &nic_chunk_at(index)->steps[step];
  s->empty_since_ms = 0;
  if (!s->backed) return false;
  /* With nic_steps_commit's order (bits, then backed): either it sees the step unbacked and
   * waits for the lock, or this sees its bits. */
  __atomic_store_n(&s->backed, 0, __ATOMIC_SEQ_CST);
  void *base = nic_step_base(index, step);
  const size_t len = (size_t)1 << nic_dp.step_shift;
  if (nic_step_committed(index, step) || !nic_publish_step_releasing(index, step, base, len)) {
    __atomic_store_n(&s->backed, 1, __ATOMIC_RELEASE); /* its pages never left */
    return false;
  }
  nic_release_step_memory(base, len);
  nic_step_generation_bump(index, step);
  s->mapping.pinned = false;
  nic_step_not_whole_locked(index, step);
  nic_step_pages_forget_locked(index, step);
  released_total++;
  nic_log_info("dataplane chunk %u step %u released to the OS", index, step);
  return true;
}

void nic_step_totals_locked(struct nic_step_totals *out) {
  out->backed = backed_total;
  out->released = released_total;
  out->page_fallbacks = page_fallbacks;
  out->pin_failures = pin_failures;
  out->last_kind = last_kind;
}
