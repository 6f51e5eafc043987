/* mimalloc 2.0.9's delayed decommit, forced on the owning thread (mi_decommit.h). */
#define _GNU_SOURCE
#include "mi_decommit.h"

#include "chunks.h"
#include "commit_map.h"
#include "log.h"
#include "mi_layout.h"
#include "mimalloc_imports.h"
#include "steps.h"

#include <mimalloc.h>
#include <pthread.h>
#include <stdint.h>

#define MASK_WORDS 8 /* a commit mask: one bit per 64 KiB slice of a 32 MiB segment */

static inline uintptr_t word_at(uintptr_t a) {
  return __atomic_load_n((const uintptr_t *)a, __ATOMIC_RELAXED);
}
static inline void word_set(uintptr_t a, uintptr_t v) {
  __atomic_store_n((uintptr_t *)a, v, __ATOMIC_RELAXED);
}

/* mimalloc's cookie: each segment header holds its address xor this (2.0.9's _mi_ptr_cookie),
 * which is how mimalloc itself tells a segment header from other bytes. 0: not known (yet). */
static uintptr_t main_cookie;
static int layout_state; /* 0 unchecked, 1 as in 2.0.9, -1 not */

/* Threads that check the layout at once all find the same cookie. */
static uintptr_t cookie(void) {
  return __atomic_load_n(&main_cookie, __ATOMIC_RELAXED);
}

/* A normal segment the calling thread owns, with 2.0.9's fields where this reads them. */
static bool own_segment(uintptr_t segment) {
  if (word_at(segment + NIC_MI_SEG_COOKIE) != (segment ^ cookie())) return false;
  if (word_at(segment + NIC_MI_SEG_THREAD_ID) != (uintptr_t)pthread_self()) return false;
  if (word_at(segment + NIC_MI_SEG_KIND) != 0 ||
      word_at(segment + NIC_MI_SEG_SLICES_TOTAL) != (NIC_MI_SEGMENT_SIZE >> NIC_MI_SLICE_SHIFT))
    return false;
  if (*(const uint8_t *)(segment + NIC_MI_SEG_ALLOW_DECOMMIT) > 1) return false;
  /* 2.0.9's invariant: only committed slices are marked. */
  for (unsigned w = 0; w < MASK_WORDS; w++)
    if (word_at(segment + NIC_MI_SEG_DECOMMIT_MASK + 8 * w) &
        ~word_at(segment + NIC_MI_SEG_COMMIT_MASK + 8 * w))
      return false;
  return true;
}

/* Checked once, on a segment of a heap of the calling thread's own. */
static bool layout_checked(void) {
  int state = __atomic_load_n(&layout_state, __ATOMIC_ACQUIRE);
  if (state) return state > 0;
  bool ok = false;
  mi_heap_t *heap = mi_version() == 209 ? mi_heap_new() : NULL;
  void *p = heap ? mi_heap_malloc(heap, 5000) : NULL;
  if (p) {
    const uintptr_t segment = ((uintptr_t)p - 1) & ~NIC_MI_SEGMENT_MASK;
    __atomic_store_n(&main_cookie, word_at(segment + NIC_MI_SEG_COOKIE) ^ segment,
                     __ATOMIC_RELAXED);
    /* The block's own slice is committed and not marked. */
    const unsigned slice = (unsigned)(((uintptr_t)p - segment) >> NIC_MI_SLICE_SHIFT);
    ok = own_segment(segment) &&
         (word_at(segment + NIC_MI_SEG_COMMIT_MASK + 8 * (slice / 64)) >> (slice % 64) & 1) &&
         !(word_at(segment + NIC_MI_SEG_DECOMMIT_MASK + 8 * (slice / 64)) >> (slice % 64) & 1);
    mi_free(p);
  }
  if (heap) mi_heap_delete(heap);
  __atomic_store_n(&layout_state, ok ? 1 : -1, __ATOMIC_RELEASE);
  if (!ok)
    nic_log_info("mimalloc's segments are not laid out as in 2.0.9: freed dataplane memory is "
                 "decommitted only when mimalloc gets to it");
  return ok;
}

/* 2.0.9's mi_segment_delayed_decommit(segment, true): the marks are taken, the deadline
 * cleared, and each run of marked slices decommitted (by decommit, as the segment's arena does
 * it) and taken out of the commit mask. */
static size_t decommit_marked(uintptr_t segment, void (*decommit)(void *addr, size_t len)) {
  uintptr_t mask[MASK_WORDS];
  bool any = false;
  for (unsigned w = 0; w < MASK_WORDS; w++) {
    mask[w] = word_at(segment + NIC_MI_SEG_DECOMMIT_MASK + 8 * w);
    any |= mask[w] != 0;
  }
  if (!any) return 0;
  const bool allowed = *(const uint8_t *)(segment + NIC_MI_SEG_ALLOW_DECOMMIT);
  word_set(segment + NIC_MI_SEG_DECOMMIT_EXPIRE, 0);
  size_t bytes = 0;
  for (unsigned w = 0; w < MASK_WORDS; w++) {
    word_set(segment + NIC_MI_SEG_DECOMMIT_MASK + 8 * w, 0);
    const uintptr_t commit = word_at(segment + NIC_MI_SEG_COMMIT_MASK + 8 * w);
    word_set(segment + NIC_MI_SEG_COMMIT_MASK + 8 * w, commit & ~mask[w]);
  }
  if (!allowed) return 0; /* 2.0.9 clears the bits and keeps the memory */
  for (unsigned i = 0; i < MASK_WORDS * 64;) {
    if (!(mask[i / 64] >> (i % 64) & 1)) {
      i++;
      continue;
    }
    unsigned n = 1;
    while (i + n < MASK_WORDS * 64 && (mask[(i + n) / 64] >> ((i + n) % 64) & 1))
      n++;
    const size_t len = (size_t)n << NIC_MI_SLICE_SHIFT;
    decommit((void *)(segment + ((uintptr_t)i << NIC_MI_SLICE_SHIFT)), len);
    bytes += len;
    i += n;
  }
  return bytes;
}

/* Each normal segment the calling thread owns among those mimalloc holds in [base, base +
 * size), a 32 MiB-aligned range whose segment headers are readable where mimalloc holds one;
 * readable (if given) says first whether a header may be there at all. */
static size_t each_owned_in(uintptr_t base, size_t size, bool (*readable)(uintptr_t segment),
                            size_t (*fn)(uintptr_t segment, void *arg), void *arg) {
  size_t total = 0;
  /* A segment at each arena block (nic_mi_segment_at); a huge segment (its own kind, never
   * marked) is passed over by its arena claim. */
  for (size_t off = 0; off < size;) {
    const uintptr_t segment = base + off;
    size_t length = NIC_MI_SEGMENT_SIZE;
    if ((!readable || readable(segment)) && nic_mi_segment_at(segment) &&
        word_at(segment + NIC_MI_SEG_COOKIE) == (segment ^ cookie())) {
      if (word_at(segment + NIC_MI_SEG_KIND) != 0)
        length = nic_mi_segment_claim(word_at(segment + NIC_MI_SEG_SLICES_TOTAL));
      else if (own_segment(segment))
        total += fn(segment, arg);
    }
    off += length;
  }
  return total;
}

size_t nic_mi_each_owned_segment(unsigned index, size_t (*fn)(uintptr_t segment, void *arg),
                                 void *arg) {
  if (!nic_chunk_readable(index) || !layout_checked()) return 0;
  return each_owned_in((uintptr_t)nic_chunk_base(index), (size_t)1 << nic_dp.shift, NULL, fn, arg);
}

/* The header's first slice, in which 2.0.9 keeps the whole header of a normal segment. */
static bool control_header_readable(uintptr_t segment) {
  const uintptr_t offset = segment - nic_commit_map.base;
  for (uintptr_t a = 0; a < ((uintptr_t)1 << NIC_MI_SLICE_SHIFT); a += NIC_PAGE_SIZE)
    if (!nic_commit_map_readable(offset + a)) return false;
  return true;
}

size_t nic_mi_each_owned_control_segment(size_t (*fn)(uintptr_t segment, void *arg), void *arg) {
  const size_t checked = __atomic_load_n(&nic_commit_map.checked, __ATOMIC_ACQUIRE);
  if (!checked || !layout_checked()) return 0;
  /* Up to the last segment mimalloc ever committed in: a walk of the whole arena read a bit of
   * the map every 32 MiB of it, and its first read of each page of the map faulted that page in
   * (about 25 ms for a 4 TiB arena, in a program that had allocated nothing). */
  const size_t high =
      (__atomic_load_n(&nic_commit_map.high, __ATOMIC_ACQUIRE) + NIC_MI_SEGMENT_MASK) &
      ~(size_t)NIC_MI_SEGMENT_MASK;
  return each_owned_in(nic_commit_map.base,
                       (high < checked ? high : checked) & ~(size_t)NIC_MI_SEGMENT_MASK,
                       control_header_readable, fn, arg);
}

static size_t decommit_segment(uintptr_t segment, void *arg) {
  (void)arg;
  return decommit_marked(segment, nic_steps_decommit);
}

size_t nic_mi_decommit_owned(unsigned index) {
  return nic_mi_each_owned_segment(index, decommit_segment, NULL);
}

static void control_decommit(void *addr, size_t len) {
  nic_mimalloc_decommit(addr, len);
}

static size_t decommit_control_segment(uintptr_t segment, void *arg) {
  (void)arg;
  return decommit_marked(segment, control_decommit);
}

size_t nic_mi_decommit_owned_control(void) {
  return nic_mi_each_owned_control_segment(decommit_control_segment, NULL);
}
