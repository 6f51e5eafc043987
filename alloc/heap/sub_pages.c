/* The 4 KiB pages only free blocks cover, given back inside dataplane pages in use (sub_pages.h):
 * the dataplane's map, locks and drops around sub_pages_scan.c's pass. */
#define _GNU_SOURCE
#include "sub_pages.h"

#include "chunks.h"
#include "log.h"
#include "mi_decommit.h"
#include "page.h"
#include "page_drop.h"
#include "pagemap.h"
#include "step_pages.h"
#include "steps.h"
#include "sub_pages_scan.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#define SLICE ((uintptr_t)1 << NIC_SLICE_SHIFT)

/* One bit per 4 KiB page of the dataplane range: given back here, its blocks held back while
 * the page at it carries its mark. Set by the owner thread, cleared by it or by the decommit. */
static uint64_t held[((size_t)NIC_CHUNK_SLOTS << (30 - NIC_PAGE_SHIFT)) / 64];
/* Steps with a page given back here since they were backed (chunk lock). */
static bool touched[NIC_CHUNK_SLOTS][NIC_STEPS_MAX];
static bool refused; /* the kernel would not drop locked pages: not tried again */

static inline size_t page_bit(uintptr_t a) {
  return (a - nic_dp.base) >> NIC_PAGE_SHIFT;
}
static inline bool held_test(size_t bit) {
  return __atomic_load_n(&held[bit >> 6], __ATOMIC_ACQUIRE) >> (bit & 63) & 1;
}
static inline void held_set(size_t bit) {
  __atomic_fetch_or(&held[bit >> 6], 1ull << (bit & 63), __ATOMIC_RELEASE);
}

/* Clears the held bits of the 4 KiB pages in [a, a + len) and the sub-page bit of its slices. */
static void forget_range(uintptr_t a, size_t len) {
  for (size_t bit = page_bit(a), end = page_bit(a + len); bit < end;) {
    const size_t n = end - bit < 64 - (bit & 63) ? end - bit : 64 - (bit & 63);
    const uint64_t mask = (n == 64 ? ~0ull : ((1ull << n) - 1)) << (bit & 63);
    if (__atomic_load_n(&held[bit >> 6], __ATOMIC_RELAXED) & mask)
      __atomic_fetch_and(&held[bit >> 6], ~mask, __ATOMIC_RELEASE);
    bit += n;
  }
  for (uintptr_t s = a & ~(SLICE - 1); s < a + len; s += SLICE)
    if (__atomic_load_n(&nic_dp_slices[(s - nic_dp.base) >> NIC_SLICE_SHIFT], __ATOMIC_RELAXED) &
        NIC_DP_SLICE_SUBPAGE)
      __atomic_fetch_and(&nic_dp_slices[(s - nic_dp.base) >> NIC_SLICE_SHIFT],
                         (uint8_t)~NIC_DP_SLICE_SUBPAGE, __ATOMIC_SEQ_CST);
}

/* Every step the range [lo, hi) touches may lose pages now (chunk lock held). */
static bool steps_allow(uintptr_t lo, uintptr_t hi) {
  const uintptr_t step_size = (uintptr_t)1 << nic_dp.step_shift;
  for (uintptr_t a = lo & ~(step_size - 1); a < hi; a += step_size)
    if (!nic_step_pages_may_drop_locked(nic_chunk_index((void *)a), nic_step_index((void *)a)))
      return false;
  return true;
}

/* Drops the 4 KiB pages set in drop (bit i: the page at lo + i * 4 KiB), a run at a time, cut at
 * step boundaries (a step's lock state is its own). Chunk lock held. */
static size_t drop_runs(uintptr_t lo, const uint64_t *drop, size_t pages) {
  const uintptr_t step_size = (uintptr_t)1 << nic_dp.step_shift;
  size_t bytes = 0;
  for (size_t i = 0; i < pages;) {
    if (!nic_bit_test(drop, i)) {
      i++;
      continue;
    }
    const uintptr_t a = lo + (i << NIC_PAGE_SHIFT), step_end = (a & ~(step_size - 1)) + step_size;
    size_t n = 1;
    while (i + n < pages && nic_bit_test(drop, i + n) && a + (n << NIC_PAGE_SHIFT) < step_end)
      n++;
    const unsigned index = nic_chunk_index((void *)a), step = nic_step_index((void *)a);
    const struct nic_step *st = &nic_chunk_at(index)->steps[step];
    nic_step_not_whole_locked(index, step); /* the next scan asks the kernel again */
    const int rc = nic_drop_pages((void *)a, n << NIC_PAGE_SHIFT, st->mapping.pinned);
    if (rc) {
      /* The blocks stay held back (their pages in memory): the lists are already without them. */
      __atomic_store_n(&refused, true, __ATOMIC_RELAXED);
      nic_log_warn_once("cannot give back the free 4 KiB pages inside dataplane pages in use "
                        "(madvise: %s); they stay pinned until their page is free",
                        strerror(-rc));
      return bytes;
    }
    touched[index][step] = true;
    bytes += n << NIC_PAGE_SHIFT;
    i += n;
  }
  return bytes;
}

static void forget_stale(uintptr_t header, uintptr_t span, size_t len) {
  (void)header;
  forget_range(span, len);
}

/* A look before the blocks leave the lists: the lock is not kept while the pass writes them
 * (sub_pages_scan.h), which a page protected for a DMA holds until the completion; the sim's
 * engine, the reaper and fork wait for this lock. */
static bool steps_allow_now(uintptr_t lo, uintptr_t hi) {
  nic_chunks_lock();
  const bool allow = steps_allow(lo, hi);
  nic_chunks_unlock();
  return allow;
}

/* Asked again under the lock: a registration that holds page references may have begun since
 * the look. Its pages then stay, their blocks held back, as when the kernel refuses the drop. */
static size_t drop_if_allowed(uintptr_t lo, const uint64_t *drop, size_t pages) {
  nic_chunks_lock();
  const size_t bytes =
      steps_allow(lo, lo + (pages << NIC_PAGE_SHIFT)) ? drop_runs(lo, drop, pages) : 0;
  nic_chunks_unlock();
  return bytes;
}

/* The blocks over the page leave free's fast path (their slices) and the map holds the page. */
static bool hold_page(uintptr_t a, uintptr_t from, uintptr_t to) {
  for (uintptr_t s = from & ~(SLICE - 1); s < to; s += SLICE)
    __atomic_fetch_or(&nic_dp_slices[(s - nic_dp.base) >> NIC_SLICE_SHIFT],
                      (uint8_t)NIC_DP_SLICE_SUBPAGE, __ATOMIC_SEQ_CST);
  held_set(page_bit(a));
  return true;
}

static bool page_held(uintptr_t a) {
  return held_test(page_bit(a));
}

static const struct nic_sub_pages_area dataplane = {
    .forget = forget_stale,
    .begin = steps_allow_now,
    .hold = hold_page,
    .drop = drop_if_allowed,
    .held = page_held,
};

size_t nic_sub_pages_drop_owned(unsigned index, struct nic_sub_pages_cursor *cursor) {
  if (__atomic_load_n(&refused, __ATOMIC_RELAXED)) return 0;
  struct nic_sub_pages_walk walk = {&dataplane, cursor};
  return nic_mi_each_owned_segment(index, nic_sub_pages_pass_segment, &walk);
}

bool nic_sub_pages_held_back(const void *p) {
  return nic_sub_pages_block_held(p, page_held);
}

void nic_sub_pages_forget(void *addr, size_t len) {
  if (nic_in_dp(addr)) forget_range((uintptr_t)addr, len);
}

/* Faults in [a, a + len) but the 4 KiB pages protect holds for a DMA in flight. A held bit
 * outlives the page that held blocks back there, once mimalloc freed it and built another over
 * it, until its owner's next pass: live blocks may lie on such a page then, and a post may have
 * protected it. The fault-in is a write, which protect would hold until the completion with the
 * chunk lock held. A protected page is in memory (mimalloc wrote its blocks), and the
 * registration that asks is refused the step while it is protected (the pin guard): it waits
 * for it without the lock and comes back here. */
static int refill_unprotected(uintptr_t a, size_t len) {
  const struct nic_sub_pages_guard *g = nic_sub_pages_guard();
  if (!g) return nic_refill_pages((void *)a, len);
  if (g->begin(a, a + len)) {
    const int rc = nic_refill_pages((void *)a, len);
    g->end(a, a + len);
    return rc;
  }
  for (size_t off = 0; len > NIC_PAGE_SIZE && off < len; off += NIC_PAGE_SIZE)
    if (refill_unprotected(a + off, NIC_PAGE_SIZE)) return -ENOMEM;
  return 0;
}

int nic_sub_pages_refill_locked(unsigned index, unsigned step) {
  if (!touched[index][step]) return 0;
  const uintptr_t base = (uintptr_t)nic_step_base(index, step);
  const size_t pages = (size_t)1 << (nic_dp.step_shift - NIC_PAGE_SHIFT);
  for (size_t i = 0; i < pages;) {
    if (!held_test(page_bit(base) + i)) {
      i++;
      continue;
    }
    size_t n = 1;
    while (i + n < pages && held_test(page_bit(base) + i + n))
      n++;
    if (refill_unprotected(base + (i << NIC_PAGE_SHIFT), n << NIC_PAGE_SHIFT)) return -ENOMEM;
    i += n;
  }
  return 0;
}

bool nic_sub_pages_touched(unsigned index, unsigned step) {
  return touched[index][step];
}

void nic_sub_pages_forget_step_locked(unsigned index, unsigned step) {
  touched[index][step] = false;
  forget_range((uintptr_t)nic_step_base(index, step), (size_t)1 << nic_dp.step_shift);
}
