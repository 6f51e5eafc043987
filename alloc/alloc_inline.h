/* The hot paths, inlined into the exported malloc family. */
#ifndef NIC_ALLOC_INLINE_H
#define NIC_ALLOC_INLINE_H

#include "alloc.h"
#include "block.h"
#include "chunks.h"
#include "dp_heap.h"
#include "rcache.h"
#include "thread.h"
#include "vspace.h"

#include <mimalloc.h>

/* SIZE_MAX unless NICMALLOC_DP_MIN_SIZE is set; read before any thread turns fast. */
extern size_t nic_auto_dp_threshold;

/* Control heap, no alignment beyond 16; for a thread that is set up (the caller knows). */
static inline void *nic_control_alloc_fast(size_t size, bool zero) {
  size = nic_block_request(size);
  void *p = zero ? mi_zalloc(size) : mi_malloc(size);
  if (__builtin_expect(p != NULL, 1)) {
    if (!zero) nic_block_mark_live(p);
    nic_counter_add(&nic_self.control_live, (int64_t)mi_usable_size(p));
  }
  return p;
}

/* malloc/calloc: the fast path when the thread is outside any scope and below the threshold. */
static inline void *nic_alloc_auto(size_t size, bool zero) {
  if (__builtin_expect(nic_self.fast && size < nic_auto_dp_threshold, 1)) {
    void *p = nic_control_alloc_fast(size, zero);
    if (__builtin_expect(p != NULL, 1)) return p;
  }
  return nic_alloc(size, 0, zero, NIC_ROUTE_AUTO);
}

void nic_report_bad_free(const void *p, const char *caller, bool double_free);

/* Returns false (after reporting) when p is not a live block of ours. */
static inline bool nic_check_live_block(const void *p, const char *caller) {
  /* mimalloc's segment map answers in O(1) for our blocks; the key is read only after we know
   * the address is ours, so a wild pointer is never dereferenced. */
  if (__builtin_expect(!mi_is_in_heap_region(p), 0) && nic_free_check_strict) {
    nic_report_bad_free(p, caller, false);
    return false;
  }
  if (__builtin_expect(nic_block_is_free(p), 0)) {
    nic_report_bad_free(p, caller, true);
    return false;
  }
  return true;
}

void nic_release_block_unregistered(void *p);

/* Frees a block already checked live. */
static inline void nic_release_block(void *p) {
  struct nic_thread *t = &nic_self;
  /* A thread that only frees must still be counted. */
  if (__builtin_expect(t->state != NIC_THREAD_READY, 0) && !nic_thread_ready()) {
    nic_release_block_unregistered(p);
    return;
  }
  int64_t size = (int64_t)mi_usable_size(p);
  if (nic_in_dp(p)) {
    nic_dp_enter(t);
    nic_counter_add(&t->dp_live[nic_chunk_index(p)], -size);
    nic_block_mark_free(p);
    mi_free(p);
    if (__builtin_expect(!nic_dp_epoch_seen(t), 0)) nic_dp_refresh(t);
    nic_dp_leave(t);
    return;
  }
  nic_counter_add(&t->control_live, -size);
  nic_rcache_on_free(p, (size_t)size);
  nic_block_mark_free(p);
  mi_free(p);
}

static inline void nic_free_inline(void *p, const char *caller) {
  if (p && nic_check_live_block(p, caller)) nic_release_block(p);
}

#endif
