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
  NIC_DP_NO_TABLE,    /* an over-aligned block's entry found no room: its table could not grow */
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
/* The thread, its inline path paused, freed a block in chunk. */
void nic_dp_freed_while_paused(struct nic_thread *t, unsigned chunk);

static inline bool nic_dp_epoch_seen(const struct nic_thread *t) {
  return __atomic_load_n(&nic_chunk_epoch, __ATOMIC_ACQUIRE) == t->seen_epoch;
}
/* A chunk changed state: hand back pages in draining chunks and move off chunks that are not
 * live; then the inline path opens again (nic_thread_refresh_fast). */
void nic_dp_refresh(struct nic_thread *t);
/* The thread's pause at the cap ends (it is gone, or left the inline path on). */
void nic_dp_unpause(struct nic_thread *t);
/* Frees the empty segments exited threads left on mimalloc's abandoned list (there they keep
 * their chunk from being released) without ever reclaiming a non-empty one into an ordinary
 * heap. Use it instead of mi_collect(true), which does that on the main thread. */
void nic_collect_abandoned(void);
/* mi_heap_collect of a heap of the calling thread, made for the program (nic_collect,
 * malloc_trim): every collect visits mimalloc's abandoned segments too, so it holds the lock
 * below. */
void nic_heap_collect_visiting(mi_heap_t *heap, bool force);
/* Held by the visits nicmalloc makes; the live walk (dp_live.h) takes it so as not to read
 * a page halfway through the visit's collect of it. Before the chunk lock. */
void nic_abandoned_visits_lock(void);
/* The same, which may give up under nic_bounded_begin (bounded_lock.h): false then. */
bool nic_abandoned_visits_lock_bounded(void);
void nic_abandoned_visits_unlock(void);
/* Tests only: called under the growth lock with a chunk just mapped for a request, before the
 * request tries it, so that a test can take its room the way racing threads do. */
extern void (*nic_dp_grow_hook)(unsigned index) __attribute__((visibility("hidden")));

#endif
