/* The usable bytes of live dataplane blocks per chunk, read when asked from the headers of
 * mimalloc's pages instead of counted on every dataplane malloc and free: mimalloc keeps each
 * page's count of blocks in use (page->used) and its block size already, so the fast paths
 * count nothing. */
#ifndef NIC_DP_LIVE_H
#define NIC_DP_LIVE_H

#include "chunks.h"

#include <stdbool.h>
#include <stdint.h>

/* Fills live[i] for every chunk slot (0 where not mapped). Exact when no thread allocates or
 * frees dataplane memory meanwhile (nicmalloc's own visits of abandoned segments are waited
 * for: nic_abandoned_visits_lock); a block another thread is freeing meanwhile may be counted
 * live or not (never a block that is neither allocated nor being freed, when the chunk is
 * DRAINING, as nothing is then allocated there). Takes the chunk lock: chunks are not released
 * under the walk. Where mimalloc's headers are not laid out as 2.0.9's (checked at start-up),
 * each chunk counts the bytes of the mimalloc segments in it instead, and returns false.
 * *idle_abandoned (when not NULL) gets the bit of each chunk holding a segment whose thread
 * exited (mimalloc abandoned it) and that holds no live block: mimalloc frees such a segment
 * only when a heap visits it (nic_collect_abandoned), which a program may never make.
 * Under nic_bounded_begin (bounded_lock.h) it may find a lock held: every chunk reads 0, and it
 * returns false. */
bool nic_dp_live_sum(int64_t live[NIC_CHUNK_SLOTS], uint64_t *idle_abandoned);
/* The same for one mapped chunk, with the chunk lock held. */
int64_t nic_dp_live_chunk_locked(unsigned index, bool *idle_abandoned);
/* Whether the start-up check found the page counts read here (blocks in use, block size, span)
 * where mi_layout.h says: control_live.c reads the same. */
bool nic_dp_live_layout_checked(void);

#endif
