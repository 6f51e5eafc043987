/* The 4 KiB pages only free blocks cover, given back inside mimalloc pages in use (sub_pages.h).
 * Reads and writes mimalloc 2.0.9's page headers with mi_layout.h's offsets, only where
 * mi_decommit.c and mi_free_lists.c found that layout, and only the owner thread's pages. */
#define _GNU_SOURCE
#include "sub_pages.h"

#include "chunks.h"
#include "events.h"
#include "log.h"
#include "mi_decommit.h"
#include "mi_free_lists.h"
#include "mi_layout.h"
#include "page.h"
#include "page_drop.h"
#include "step_pages.h"
#include "steps.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

/* A 64 KiB page of 8-byte blocks has the most; a segment the most 4 KiB pages. Both bound the
 * bitmaps on the owner thread's stack (1 KiB each). */
#define MAX_BLOCKS 8192
#define MAX_PAGES ((size_t)NIC_MI_SEGMENT_SIZE / NIC_PAGE_SIZE)
#define SLICE ((uintptr_t)1 << NIC_SLICE_SHIFT)
/* The mark a page with held-back blocks carries: its header's address, salted so that no
 * pointer or small count left there by chance reads as one. */
#define MARK_SALT ((uintptr_t)0x5375625061676573ull)

/* One bit per 4 KiB page of the dataplane range: given back here, its blocks held back while
 * the page at it carries its mark. Set by the owner thread, cleared by it or by the decommit. */
static uint64_t held[((size_t)NIC_CHUNK_SLOTS << (30 - NIC_PAGE_SHIFT)) / 64];
/* Steps with a page given back here since they were backed (chunk lock). */
static bool touched[NIC_CHUNK_SLOTS][NIC_STEPS_MAX];
static bool refused; /* the kernel would not drop locked pages: not tried again */

static inline uintptr_t word_at(uintptr_t a) {
  return __atomic_load_n((const uintptr_t *)a, __ATOMIC_RELAXED);
}
static inline void word_set(uintptr_t a, uintptr_t v) {
  __atomic_store_n((uintptr_t *)a, v, __ATOMIC_RELAXED);
}
static inline uintptr_t mark_of(uintptr_t header) {
  return header ^ MARK_SALT;
}
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

static inline bool bit_get(const uint64_t *bits, size_t i) {
  return bits[i >> 6] >> (i & 63) & 1;
}
/* Whether bits first..last are all set. */
static bool bits_all(const uint64_t *bits, size_t first, size_t last) {
  for (size_t i = first; i <= last; i++)
    if (!bit_get(bits, i)) return false;
  return true;
}

/* Marks in free the blocks on the list from head; false if the list is not what 2.0.9 keeps
 * (a block outside the page or off its grid, seen twice, or more of them than the page holds). */
static bool gather(const struct nic_mi_page *v, uintptr_t head, uint64_t *free, size_t *count) {
  for (uintptr_t b = head; b; b = word_at(b)) {
    if (b < v->start || b >= v->end || (b - v->start) % v->block_size) return false;
    const size_t i = (b - v->start) / v->block_size;
    if (bit_get(free, i) || ++*count > v->capacity) return false;
    free[i >> 6] |= 1ull << (i & 63);
  }
  return true;
}

/* The list from head without the blocks whose free bit is clear, in the same order. */
static uintptr_t relink(const struct nic_mi_page *v, uintptr_t head, const uint64_t *keep) {
  uintptr_t first = 0, last = 0;
  for (uintptr_t b = head; b;) {
    const uintptr_t next = word_at(b); /* read before b is written */
    if (bit_get(keep, (b - v->start) / v->block_size)) {
      if (last)
        word_set(last, b);
      else
        first = b;
      last = b;
    }
    b = next;
  }
  if (last) word_set(last, 0);
  return first;
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
    if (!bit_get(drop, i)) {
      i++;
      continue;
    }
    const uintptr_t a = lo + (i << NIC_PAGE_SHIFT), step_end = (a & ~(step_size - 1)) + step_size;
    size_t n = 1;
    while (i + n < pages && bit_get(drop, i + n) && a + (n << NIC_PAGE_SHIFT) < step_end)
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

/* One mimalloc page of an owned segment, at header, its span [span, span + span_len). */
static size_t pass_page(uintptr_t header, uintptr_t span, size_t span_len) {
  /* A page without the mark holds nothing back: what the map says there is from a page mimalloc
   * freed since (it zeroes the mark then) and is stale. */
  if (word_at(header + NIC_MI_PAGE_PADDING) != mark_of(header)) forget_range(span, span_len);
  const uintptr_t sizes = word_at(header + NIC_MI_PAGE_USED);
  const uint32_t used = (uint32_t)sizes, xblock_size = (uint32_t)(sizes >> 32);
  /* A free span, a page mimalloc will free once collected (none used), or a huge block. */
  if (xblock_size < 8 || xblock_size >= NIC_MI_HUGE_BLOCK_SIZE || used == 0) return 0;
  struct nic_mi_page v;
  if (!nic_mi_page_of((const void *)span, &v) || !v.in_use || v.header != header ||
      v.capacity < 2 || v.capacity > MAX_BLOCKS)
    return 0;
  uint64_t free[MAX_BLOCKS / 64];
  memset(free, 0, (v.capacity + 63) / 64 * sizeof free[0]);
  size_t count = 0;
  const uintptr_t head = word_at(header + NIC_MI_PAGE_FREE);
  const uintptr_t local = word_at(header + NIC_MI_PAGE_LOCAL_FREE);
  if (!gather(&v, head, free, &count) || !gather(&v, local, free, &count) ||
      count + used > v.capacity)
    return 0;
  /* The 4 KiB pages wholly inside the page's blocks and covered by free ones only. */
  const uintptr_t lo = (v.start + NIC_PAGE_SIZE - 1) & ~(NIC_PAGE_SIZE - 1);
  const uintptr_t hi = v.end & ~(NIC_PAGE_SIZE - 1);
  if (hi <= lo) return 0;
  const size_t pages = (hi - lo) >> NIC_PAGE_SHIFT;
  if (pages > MAX_PAGES) return 0;
  uint64_t drop[MAX_PAGES / 64];
  memset(drop, 0, (pages + 63) / 64 * sizeof drop[0]);
  bool any = false;
  for (size_t i = 0; i < pages; i++) {
    const uintptr_t a = lo + (i << NIC_PAGE_SHIFT);
    const size_t first = (a - v.start) / v.block_size;
    const size_t last = (a + NIC_PAGE_SIZE - 1 - v.start) / v.block_size;
    if (bits_all(free, first, last)) drop[i >> 6] |= 1ull << (i & 63), any = true;
  }
  if (!any) return 0;
  /* Outside the chunk lock, as step_pages.c does: their watchers' locks come before it. */
  for (size_t i = 0; i < pages;) {
    size_t n = 0;
    while (i + n < pages && bit_get(drop, i + n))
      n++;
    if (n) nic_publish_pages_leaving(lo + (i << NIC_PAGE_SHIFT), n << NIC_PAGE_SHIFT);
    i += n ? n : 1;
  }
  nic_chunks_lock();
  if (!steps_allow(lo, hi)) {
    nic_chunks_unlock();
    return 0;
  }
  /* The blocks over each page leave the lists; their slices leave free's fast path; the map and
   * the mark say so before the pages go (a free that reads zeros there asks them). */
  for (size_t i = 0; i < pages; i++) {
    if (!bit_get(drop, i)) continue;
    const uintptr_t a = lo + (i << NIC_PAGE_SHIFT);
    const size_t first = (a - v.start) / v.block_size;
    const size_t last = (a + NIC_PAGE_SIZE - 1 - v.start) / v.block_size;
    for (size_t b = first; b <= last; b++)
      free[b >> 6] &= ~(1ull << (b & 63));
    const uintptr_t from = v.start + first * v.block_size, to = v.start + (last + 1) * v.block_size;
    for (uintptr_t s = from & ~(SLICE - 1); s < to; s += SLICE)
      __atomic_fetch_or(&nic_dp_slices[(s - nic_dp.base) >> NIC_SLICE_SHIFT],
                        (uint8_t)NIC_DP_SLICE_SUBPAGE, __ATOMIC_SEQ_CST);
    held_set(page_bit(a));
  }
  word_set(header + NIC_MI_PAGE_FREE, relink(&v, head, free));
  word_set(header + NIC_MI_PAGE_LOCAL_FREE, relink(&v, local, free));
  __atomic_store_n((uintptr_t *)(header + NIC_MI_PAGE_PADDING), mark_of(header), __ATOMIC_RELEASE);
  const size_t bytes = drop_runs(lo, drop, pages);
  nic_chunks_unlock();
  return bytes;
}

/* Each span of an owned segment, from its first slice (spans tile the segment). */
static size_t pass_segment(uintptr_t segment, void *arg) {
  (void)arg;
  const uintptr_t entries = word_at(segment + NIC_MI_SEG_SLICE_ENTRIES);
  size_t bytes = 0;
  for (uintptr_t i = 0; i < entries;) {
    const uintptr_t header = segment + NIC_MI_SEG_SLICES + i * NIC_MI_PAGE_HEADER;
    const uint32_t span = (uint32_t)word_at(header + NIC_MI_PAGE_SLICE_COUNT);
    if (span == 0) break; /* not a span start: not 2.0.9's tiling */
    if (i > 0)
      bytes += pass_page(header, segment + (i << NIC_SLICE_SHIFT), (size_t)span << NIC_SLICE_SHIFT);
    i += span;
  }
  return bytes;
}

size_t nic_sub_pages_drop_owned(unsigned index) {
  if (__atomic_load_n(&refused, __ATOMIC_RELAXED)) return 0;
  return nic_mi_each_owned_segment(index, pass_segment, NULL);
}

/* The page is found as mimalloc's free finds it, not by walking the segment's spans (a free in
 * such a slice paid 20 times a fast free's time for the walk): a live block's page is found
 * right; a pointer into a free span may be taken to a page that does not hold it (its inner
 * entries are stale), and then mark and map are that page's, and the pointer, not a block, is
 * not taken for a live one. Only a page with the mark counts, and its held bits are all its
 * own (a pass clears a page's bits before it marks it). */
bool nic_sub_pages_held_back(const void *p) {
  struct nic_mi_page v;
  uintptr_t mark;
  if (!nic_mi_page_by_offset(p, &v) || !v.in_use || (uintptr_t)p < v.start ||
      (uintptr_t)p >= v.end || !nic_mi_load_word(v.header + NIC_MI_PAGE_PADDING, &mark) ||
      mark != mark_of(v.header))
    return false;
  const uintptr_t block = (uintptr_t)p - ((uintptr_t)p - v.start) % v.block_size;
  for (size_t bit = page_bit(block), last = page_bit(block + v.block_size - 1); bit <= last; bit++)
    if (held_test(bit)) return true;
  return false;
}

void nic_sub_pages_forget(void *addr, size_t len) {
  if (nic_in_dp(addr)) forget_range((uintptr_t)addr, len);
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
    if (nic_refill_pages((void *)(base + (i << NIC_PAGE_SHIFT)), n << NIC_PAGE_SHIFT))
      return -ENOMEM;
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
