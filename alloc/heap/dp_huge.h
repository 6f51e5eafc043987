/* Dataplane blocks over 16 MiB. mimalloc 2.0.9 gives each a segment of its own, claimed from
 * the chunk's arena in whole 32 MiB arena blocks, and commits the whole claim: a 17 MiB block
 * pinned 32 MiB, a 33 MiB one 64 MiB (malloc-large: 640 MiB pinned for 343 MiB live). Here the
 * claim's commit backs the steps the segment covers and no more (steps.h,
 * nic_steps_expect_huge). mimalloc hands the block out even when that commit failed; such a
 * block is given back and the request refused, as a small one whose commit failed is. */
#ifndef NIC_DP_HUGE_H
#define NIC_DP_HUGE_H

#include "huge_cache.h"

#include <mimalloc.h>
#include <stdbool.h>
#include <stddef.h>

/* Whether a request to mimalloc of size bytes at alignment (at most 16 MiB, mimalloc's limit)
 * surely gets a huge segment: the over-allocation of an aligned request counted. */
static inline size_t nic_dp_huge_align_extra(size_t alignment) {
  return alignment > sizeof(void *) * 2 ? alignment - 1 : 0;
}
static inline bool nic_dp_huge_request(size_t size, size_t alignment) {
  return size > NIC_HUGE_BLOCK_MIN - nic_dp_huge_align_extra(alignment);
}
/* A bound on the bytes of the segment mimalloc 2.0.9 makes for such a request: one 64 KiB slice
 * of header, then the block rounded as _mi_os_good_alloc_size rounds it (1 MiB below 32 MiB,
 * 4 MiB above). tests/heap/test_dp_huge.cc checks it against mimalloc's blocks. */
size_t nic_dp_huge_segment_bound(size_t size, size_t alignment);
/* nic_heap_alloc's path for those requests, from a dataplane heap. */
void *nic_dp_huge_alloc(mi_heap_t *heap, size_t size, size_t alignment, bool zero);

#endif
