/* Dataplane allocation: each thread has one mimalloc heap per chunk arena. */
#ifndef NIC_DP_HEAP_H
#define NIC_DP_HEAP_H

#include "chunks.h"
#include "thread.h"

#include <stdbool.h>
#include <stddef.h>

/* Why no chunk could hold a dataplane request. */
enum nic_dp_failure {
  NIC_DP_OK = 0,
  NIC_DP_TOO_LARGE,   /* larger than a chunk can hold */
  NIC_DP_CAP,         /* NICMALLOC_MAX_CHUNKS reached and every chunk full */
  NIC_DP_MAP_REFUSED, /* mapping or (under NICMALLOC_ON_PIN_FAIL=fail) pinning refused */
  NIC_DP_NO_THREAD,   /* the thread is being set up or has finished its exit */
};

/* Returns NULL (errno untouched) and the reason when no chunk can hold the request; the caller
 * applies the policy. */
void *nic_dp_alloc(size_t size, size_t alignment, bool zero, enum nic_dp_failure *why);
/* From a given mimalloc heap, honouring any alignment (the dataplane's per-chunk heaps,
 * nicmalloc's own heap). */
void *nic_heap_alloc(mi_heap_t *heap, size_t size, size_t alignment, bool zero);
/* Largest request a chunk can hold. */
size_t nic_dp_max_request(void);
/* At the cap: the thread's inline path off until it frees in its current chunk (dp_heap.c). */
void nic_dp_pause_fast(struct nic_thread *t);
/* The thread, its inline path paused, freed a block in chunk (after nic_dp_refresh). */
void nic_dp_freed_while_paused(struct nic_thread *t, unsigned chunk);

/* Brackets every mimalloc call on dataplane memory. A plain store is enough on this side: the
 * reaper pairs it with membarrier(2), which orders it against the epoch load that follows. */
static inline void nic_dp_enter(struct nic_thread *t) {
  __atomic_store_n(&t->dp_busy, t->dp_busy + 1, __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
static inline void nic_dp_leave(struct nic_thread *t) {
  __atomic_store_n(&t->dp_busy, t->dp_busy - 1, __ATOMIC_RELEASE);
}
/* The same for the inline dataplane path, which runs only as the outermost call (dp_busy 0):
 * two stores instead of two read-modify-writes. The mark is the request (at least
 * NIC_MIN_BLOCK, so nonzero), which a call nested in it leaves as it found it: the inline path
 * reads it back after mimalloc failed instead of keeping it in a register across the call. */
static inline void nic_dp_enter_outermost(struct nic_thread *t, size_t request) {
  __atomic_store_n(&t->dp_busy, request, __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
static inline void nic_dp_leave_outermost(struct nic_thread *t) {
  __atomic_store_n(&t->dp_busy, 0, __ATOMIC_RELEASE);
}
static inline bool nic_dp_epoch_seen(const struct nic_thread *t) {
  return __atomic_load_n(&nic_chunk_epoch, __ATOMIC_ACQUIRE) == t->seen_epoch;
}
/* A chunk changed state: hand back pages in draining chunks and move off chunks that are not
 * live. Call inside nic_dp_enter/leave. */
void nic_dp_refresh(struct nic_thread *t);
/* Frees the empty segments exited threads left on mimalloc's abandoned list (there they keep
 * their chunk from being released) without ever reclaiming a non-empty one into an ordinary
 * heap. Use it instead of mi_collect(true), which does that on the main thread. */
void nic_collect_abandoned(void);
/* Held by exiting threads around dataplane allocation and by the reaper around a release. */
void nic_dp_late_lock(void);
void nic_dp_late_unlock(void);

#endif
