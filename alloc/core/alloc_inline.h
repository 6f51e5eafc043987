/* The hot paths, inlined into the exported malloc family. Costs are counted in instructions
 * with bench/callgrind_hotpaths.sh; every line here is paid on each malloc or free. */
#ifndef NIC_ALLOC_INLINE_H
#define NIC_ALLOC_INLINE_H

#include "alloc.h"
#include "block.h"
#include "chunks.h"
#include "commit_map.h"
#include "dp_heap.h"
#include "events.h"
#include "huge_cache.h"
#include "mapped.h"
#include "mi_free_lists.h"
#include "sub_pages.h"
#include "thread.h"
#include "vspace.h"

#include <mimalloc.h>

/* SIZE_MAX (no size rule, whatever the size) unless NICMALLOC_DP_MIN_SIZE is set; read before
 * any thread turns fast. */
extern size_t nic_auto_dp_threshold;
/* NICMALLOC_FREE_CHECK: validate every pointer given to free (the default). */
extern bool nic_free_check __attribute__((visibility("hidden")));

/* Control heap, no alignment beyond 16, size already at least NIC_MIN_BLOCK. Counts nothing:
 * see struct nic_stats. */
static inline void *nic_control_alloc_fast(size_t size, bool zero) {
  void *p = zero ? mi_zalloc(size) : mi_malloc(size);
  if (__builtin_expect(p != NULL, 1) && !zero) nic_block_mark_live(p);
  return p;
}

/* mimalloc refused a request the fast path took: the general path would ask it again for the
 * same control block (for these sizes its route is the fast path's), so this only says ENOMEM.
 * Out of line and without the size, which malloc then need not keep across its call. */
void *nic_control_alloc_failed(void) __attribute__((cold));

/* mimalloc refused the inline dataplane path's request (the chunk full, or given back under an
 * allocation that began before: reaper.c): the pause at the cap, and then, for nic_malloc
 * (retry), the general path. */
void *nic_dp_alloc_fast_failed(size_t size, bool zero, bool retry) __attribute__((cold));

/* Dataplane allocation from the thread's current chunk, with no busy window and no epoch test:
 * the limits the thread keeps say that it is set up, has a heap there and was up to date with
 * the chunk states when it last looked (thread.h), and a chunk is never given back under an
 * allocation (reaper.c). Small requests take one compare and mi_heap_malloc_small; requests
 * below NIC_MIN_BLOCK or above NIC_DP_SMALL_MAX a second compare. A miss (set-up, a full or
 * changed chunk, large requests, policy: all nic_alloc's) returns NULL, or with retry
 * nic_alloc's answer. */
static inline __attribute__((always_inline)) void *nic_dp_alloc_fast(size_t size, bool zero,
                                                                     bool retry) {
  struct nic_thread *t = &nic_self;
  void *p;
  if (__builtin_expect(size - NIC_MIN_BLOCK < __atomic_load_n(&t->dp_small_span, __ATOMIC_RELAXED),
                       1)) {
    mi_heap_t *heap = t->dp_heap;
    p = zero ? mi_heap_zalloc(heap, size) : mi_heap_malloc_small(heap, size);
  } else if (size < __atomic_load_n(&t->dp_fast_below, __ATOMIC_RELAXED)) {
    mi_heap_t *heap = t->dp_heap;
    const size_t request = nic_block_request(size);
    p = zero ? mi_heap_zalloc(heap, request) : mi_heap_malloc(heap, request);
  } else {
    return retry ? nic_alloc(size, 0, zero, NIC_ROUTE_DATAPLANE) : NULL;
  }
  if (__builtin_expect(p == NULL, 0)) return nic_dp_alloc_fast_failed(size, zero, retry);
  if (!zero) nic_block_mark_live(p);
  return p;
}

/* What malloc and calloc do with a request their fast paths do not take: NICMALLOC_DP_MIN_SIZE's
 * blocks on the inline dataplane path where the general path would come to it anyway, the rest
 * on the general path. Out of line, so that malloc keeps nothing across its fast path's call.
 * caller: the program's return address, for nic_alloc_from. */
void *nic_alloc_auto_general(size_t size, bool zero, const void *caller);

/* malloc/calloc: one thread-local load and one compare choose the control fast path for a
 * request of at least NIC_MIN_BLOCK bytes (below it, size - NIC_MIN_BLOCK wraps around and
 * fails the compare); a smaller one is raised to the minimum on a second test. */
static inline void *nic_alloc_auto(size_t size, bool zero) {
  if (__builtin_expect(size - NIC_MIN_BLOCK < nic_self.fast_span, 1)) {
    void *p = nic_control_alloc_fast(size, zero);
    return __builtin_expect(p != NULL, 1) ? p : nic_control_alloc_failed();
  }
  if (size < NIC_MIN_BLOCK &&
      /* loaded again, not kept in a register the common path would pay for */
      __atomic_load_n(&nic_self.fast_span, __ATOMIC_RELAXED) != 0) {
    void *p = nic_control_alloc_fast(NIC_MIN_BLOCK, zero);
    return __builtin_expect(p != NULL, 1) ? p : nic_control_alloc_failed();
  }
  /* The return address of the exported function this is inlined into (malloc, calloc, new):
   * where the program's call returns to, which NICMALLOC_SITES tests before any stack walk. */
  return nic_alloc_auto_general(size, zero, __builtin_return_address(0));
}

/* What a call does with the block it is given, for its report when the block is not live. */
enum nic_block_use { NIC_USE_FREE, NIC_USE_REALLOC, NIC_USE_SIZE };
void nic_report_bad_block(const void *p, const char *caller, enum nic_block_use use, bool freed);
/* p lies inside a block (starting at block, 0 when not known) or where no block starts. */
void nic_report_inside_block(const void *p, const char *caller, uintptr_t block);
/* p, a block that may be ours, holds the free key in word 1: freed, or live with data equal to
 * the key (a peer's bytes in a received buffer can be). True when nicmalloc's or mimalloc's free
 * lists hold it, or when mimalloc's cannot be read. Out of line: only a key match pays for it. */
bool nic_key_match_freed(const void *p);
/* p, a control block that may be ours, lies on a page mimalloc decommitted (MADV_DONTNEED), which
 * reads as zeros: a freed block there has lost its key. True when mimalloc holds no block at p
 * (its span is free). A live block lies on such a page only if the program dropped the page
 * itself: rare enough to ask mimalloc. Out of line. */
bool nic_dropped_block_freed(const void *p);
static inline bool nic_block_on_dropped_page(const void *p) {
  const uintptr_t offset = (uintptr_t)p - nic_commit_map.base;
  return offset < __atomic_load_n(&nic_commit_map.checked, __ATOMIC_RELAXED) &&
         !nic_commit_map_has(offset);
}
/* p, a dataplane block that may be ours, lies in a slice mimalloc does not hold committed, or is
 * one of the blocks held back with their 4 KiB pages (sub_pages.h): it is freed (no live block lies
 * there), and its pages may have left (a released step, or a unit given back inside a live step:
 * steps.h, step_pages.h), reading as zeros, so its key is not read. Asked once, before the key: a
 * second free racing with mimalloc's decommit of the same slice (the block's span freed and purged
 * between the look and the read) is a racy double free, reported as well as can be: its key may
 * then read as zeros and the free reach mimalloc. */
static inline bool nic_block_was_freed(const void *p) {
  if (nic_in_dp(p)) {
    const uint8_t slice = nic_dp_slice_byte((uintptr_t)p - nic_dp.base);
    if (__builtin_expect(!(slice & NIC_DP_SLICE_COMMITTED), 0)) return true;
    /* Blocks held back inside a page in use (sub_pages.h): their key may read as zeros, or
     * still be there with mimalloc's lists no longer holding them. */
    if (__builtin_expect(slice & NIC_DP_SLICE_SUBPAGE, 0) && nic_sub_pages_held_back(p))
      return true;
  }
  if (__builtin_expect(nic_block_is_free(p), 0)) return nic_key_match_freed(p);
  return __builtin_expect(nic_block_on_dropped_page(p), 0) && nic_dropped_block_freed(p);
}

/* May p be a block of ours, and is the word after it readable? Control blocks: the commit map
 * (commit_map.h) answers for the control arena, and mimalloc's segment map for a page the
 * program dropped itself; dataplane blocks: their chunk must be mapped. Anything else (or
 * everything, when the map could not be proven) asks mimalloc's segment map, an exported call
 * that costs about three times as much as the commit map. */
static inline bool nic_may_be_block(const void *p) {
  const uintptr_t offset = (uintptr_t)p - nic_commit_map.base;
  if (__builtin_expect(offset < __atomic_load_n(&nic_commit_map.checked, __ATOMIC_RELAXED), 1))
    return nic_commit_map_has(offset) ||
           (nic_commit_map_readable(offset) && mi_is_in_heap_region(p));
  if (nic_in_dp(p)) return nic_chunk_readable(nic_chunk_index(p));
  return mi_is_in_heap_region(p) || nic_vspace_trusted_beyond_map(p);
}

/* Returns false (after reporting) when p is not a live block of ours. The key is read only
 * after nic_may_be_block, so a wild pointer is never dereferenced. A pointer inside a block, at a
 * multiple of 16 bytes, is told from the block's start by mimalloc's page header
 * (nic_mi_inside_block): mimalloc would put it on a free list as a block, to be handed out over
 * the live one. Free's fast path does not ask: it would cost a
 * third more per malloc/free pair (README.md, "Frees"). */
static inline bool nic_check_live_block(const void *p, const char *caller, enum nic_block_use use) {
  if (!nic_free_check) return true;
  if (__builtin_expect(!nic_block_aligned(p) || nic_segment_boundary(p) || !nic_may_be_block(p),
                       0)) {
    nic_report_bad_block(p, caller, use, false);
    return false;
  }
  if (nic_block_was_freed(p)) {
    nic_report_bad_block(p, caller, use, true);
    return false;
  }
  /* After the freed test: a freed block's span merged with its neighbours keeps stale slice
   * entries, which would call its start no block's (nic_block_was_freed walks the spans). */
  uintptr_t block;
  if (__builtin_expect(nic_mi_inside_block(p, &block), 0)) {
    nic_report_inside_block(p, caller, block);
    return false;
  }
  return true;
}

/* Whether p starts a block nicmalloc mapped itself (mapped.h). */
static inline bool nic_is_mapped(const void *p) {
  return nic_mapped_maybe(p) && nic_mapped_usable(p) != 0;
}

/* The usable size of a block already checked live, wherever it came from. */
static inline size_t nic_block_usable(const void *p) {
  if (__builtin_expect(nic_mapped_maybe(p), 0)) {
    const size_t usable = nic_mapped_usable(p);
    if (usable) return usable;
  }
  return mi_usable_size(p);
}

/* No busy window and no epoch test: a block being freed is live, so its chunk cannot be
 * released under it (see reaper.c), and free reads no thread state. Nothing is counted: live
 * bytes are read from mimalloc's pages when asked (dp_live.h). What a free may owe its thread
 * (catching up with the chunk states, ending a pause at the cap) is done on the general path:
 * nic_free_dp_block, where a paused thread's chunk sends its frees (chunks.h). */
static inline __attribute__((always_inline)) void nic_free_dp_block_keyed(void *p, uintptr_t key) {
  nic_block_set_word(p, key);
  mi_free(p);
}
/* The general path's dataplane free. */
void nic_free_dp_block(void *p);

/* A block a watcher took at its free (events.h: the NIC may still read it), released now. */
void nic_release_deferred(void *p);

/* Frees a block already checked live; ends in a tail call to mi_free on the control path. */
static inline void nic_release_block_now(void *p) {
  if (__builtin_expect(nic_mapped_maybe(p), 0)) {
    void *base;
    const size_t len = nic_mapped_take(p, &base);
    if (len && !base) {
      if (nic_watching_ranges()) nic_publish_range_stale((uintptr_t)p, len);
      nic_mapped_unmap(p, len);
      return;
    }
    if (base) p = base; /* an offset block: its base goes back as any block */
    /* Gone from the table under a racing double free: with the control arena in place nothing
     * else lives out here, and p may be unmapped already. */
    else if (nic_free_check_strict && !nic_in_dp(p))
      return;
  }
  if (nic_in_dp(p)) {
    nic_free_dp_block(p);
    return;
  }
  if (__builtin_expect(nic_watching_ranges(), 0))
    nic_publish_range_stale((uintptr_t)p, mi_usable_size(p));
  nic_block_mark_free(p);
  if (__builtin_expect(nic_maybe_huge_block(p), 0) && nic_huge_cache_put(p)) return;
  mi_free(p);
}

/* Every release (free, delete, realloc's old block) goes through here. The watchers' test is one
 * relaxed load and a predictable branch while nobody watches; a block the NIC may still read is
 * neither written (not even its key) nor reused until its completion (safety/deferred.c takes
 * it). */
static inline void nic_release_block(void *p) {
  if (__builtin_expect(nic_watching_blocks(), 0) && nic_publish_block_freeing(p)) return;
  nic_release_block_now(p);
}

/* Every free the fast path below does not take: NULL, dataplane blocks it cannot read, pointers
 * outside the proven control arena (under NICMALLOC_FREE_CHECK=0: outside the control arena),
 * pages the program dropped, blocks holding the free key (double frees, or data equal to the
 * key), every free while a watcher of frees holds something (events.h), and huge blocks. */
void nic_free_general(void *p, const char *caller);

/* The common frees as chains of tests, each a branch out to nic_free_general. A control block:
 * in the control arena (which also rules out NULL), on a page mimalloc committed (so the key
 * word can be read), not holding the free key, not a huge block; it ends in a tail call to
 * mi_free. A dataplane block: its slice mapped and held committed by mimalloc (one byte:
 * chunks.h), not holding the free key, whatever NICMALLOC_FREE_CHECK says (with it off the general
 * path releases without checks, so a block these tests send there is released all the same). Both
 * first ask, in one compare with the range, for the alignment every block has and that nothing is
 * in flight or registered (fast_spans.h), so that a watcher sees every free. The other tests are
 * those of nic_check_live_block in the same order, so every path reports and releases alike; a key
 * match is confirmed only on the general path. */
static inline __attribute__((always_inline)) void nic_free_inline(void *p, const char *caller) {
  const uintptr_t offset = (uintptr_t)p - nic_commit_map.base;
  /* Rotated right by 4 bits, the offset of a p off the 16-byte alignment of every block (the
   * arena's base is aligned) has a top bit set: one compare tests the range and the alignment. */
  _Static_assert(NIC_BLOCK_ALIGN == 16, "the fast spans count 16-byte units");
  const uintptr_t units = (offset >> 4) | (offset << 60);
  /* 0 while a watcher of frees holds anything (fast_spans.h): a compare against it also asks
   * whether a post, a hold or a cached registration may concern the block. */
  if (__builtin_expect(units < nic_fast_span(NIC_FAST_CONTROL), 1)) {
    const uintptr_t key = nic_free_key(); /* once, for the test and the mark */
    if (__builtin_expect(nic_commit_map_has_16(units) && !nic_block_holds(p, key) &&
                             !nic_maybe_huge_block_or_boundary(p),
                         1)) {
      nic_block_set_word(p, key);
      mi_free(p);
      return;
    }
  } else {
    /* The same rotation against the dataplane range, taken from the control arena's: with both
     * bases 16-byte aligned and the ranges disjoint, units - rel_16 is below the range's span
     * exactly when p's own rotated offset into the range is (in range and aligned), and then
     * equals it. rel_16 is set once, before any dataplane block exists, and read as plainly as
     * the bases; the span is 0 while a block watcher holds anything (fast_spans.h). The slice
     * byte (chunks.h) is FAST only in a slice mimalloc holds committed (so the key can be read)
     * where a block may start and no one watches. */
    const uintptr_t dp_units = units - nic_dp.rel_16;
    if (dp_units < nic_fast_span(NIC_FAST_DATAPLANE)) {
      if (nic_dp_units_fast(dp_units)) {
        const uintptr_t key = nic_free_key();
        if (__builtin_expect(!nic_block_holds(p, key), 1)) {
          nic_free_dp_block_keyed(p, key);
          return;
        }
      }
    } else if (dp_units + __atomic_load_n(&nic_dp.rel_16, __ATOMIC_RELAXED) <
                   nic_fast_span(NIC_FAST_UNCHECKED) &&
               !nic_maybe_huge_block_or_boundary(p)) {
      /* NICMALLOC_FREE_CHECK=0: a block of the control arena, released as the general path
       * would release it unchecked, without reading or writing it (no key: nothing reads one).
       * Its units again from dp_units (a second load the compiler cannot merge), so that the
       * dataplane test keeps no copy of them: one instruction less on every dataplane free. */
      mi_free(p);
      return;
    }
  }
  nic_free_general(p, caller);
}

#endif
