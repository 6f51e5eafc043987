/* Freed control blocks over 16 MiB, kept for reuse. mimalloc 2.0.9 gives each such block a
 * segment of its own and, because the control arena is not committed up front, hands the
 * segment's memory back to the kernel (MADV_DONTNEED) the moment it is freed: the next large
 * block faults every page in again. That was most of the `large` workload's time (bench/peers.sh).
 * Cached blocks stay live to mimalloc and carry the free key (block.h), so a double free of one
 * is still caught; the reaper gives them back after NICMALLOC_PURGE_DELAY_MS. */
#ifndef NIC_HUGE_CACHE_H
#define NIC_HUGE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* mimalloc 2.0.9's MI_LARGE_OBJ_SIZE_MAX: larger requests get a huge segment. */
#define NIC_HUGE_BLOCK_MIN ((size_t)16 << 20)
/* Where a huge segment's block starts: one 64 KiB slice of segment header into the 32 MiB
 * segment. Other blocks start there only as the first block of a segment, so this cheap test
 * keeps mi_usable_size off the free path of nearly every block. If a later mimalloc moved it,
 * nothing would be cached (tests/heap/test_huge_cache.cc would say so), never anything wrong. */
#define NIC_HUGE_BLOCK_OFFSET ((uintptr_t)64 << 10)
#define NIC_SEGMENT_MASK (((uintptr_t)32 << 20) - 1)

static inline bool nic_maybe_huge_block(const void *p) {
  /* Written so, not as (p & mask) == offset: one instruction less on every free. */
  return (((uintptr_t)p - NIC_HUGE_BLOCK_OFFSET) & NIC_SEGMENT_MASK) == 0;
}

/* A segment starts with its header, so no block of mimalloc 2.0.9 starts on the boundary:
 * a pointer there is an offset block (mapped.h) or no block at all. */
static inline bool nic_segment_boundary(const void *p) {
  return ((uintptr_t)p & NIC_SEGMENT_MASK) == 0;
}
/* nic_maybe_huge_block(p) || nic_segment_boundary(p) in one test, for free's fast paths. */
static inline bool nic_maybe_huge_block_or_boundary(const void *p) {
  return ((uintptr_t)p & (NIC_SEGMENT_MASK & ~NIC_HUGE_BLOCK_OFFSET)) == 0;
}

/* Whether fresh huge blocks are made to hold nic_huge_capacity: the cache is on, the control
 * arena has address space to spare (at least 1 TiB; under an address-space limit it can be as
 * small as 64 GiB) and neither the kernel (vm.overcommit_memory=2) nor the process's data limit
 * (RLIMIT_DATA, as the program started with it) counts commits, since mimalloc commits a huge
 * block's whole segment. Set by nic_huge_cache_init. */
extern bool nic_huge_classes __attribute__((visibility("hidden")));
void nic_huge_cache_init(size_t control_arena_size);

/* How much a fresh huge block is made to hold when size is asked for: the next power of two.
 * Address space the program never writes costs nothing (the control arena reserves 4 TiB, and
 * pages are touched only as written), and blocks of one size serve every request of their class
 * once cached, where exact sizes made a block useless to any larger request (bench/peers.sh
 * large: 158k page faults with exact sizes, 111k with classes). Sizes no arena could hold are
 * returned unchanged, for mimalloc to refuse. */
static inline size_t nic_huge_capacity(size_t size) {
  if (size > ((size_t)1 << 46)) return size;
  size_t capacity = NIC_HUGE_BLOCK_MIN;
  while (capacity < size)
    capacity *= 2;
  return capacity;
}
/* What a fresh huge block for size holds here: its class, or size itself where classes are off.
 * Allocation asks mimalloc for it; the cache takes and trims by it. */
static inline size_t nic_huge_fresh_capacity(size_t size) {
  return nic_huge_classes ? nic_huge_capacity(size) : size;
}

/* Keeps p, already marked free, when it is a huge block and the cache has room; false means
 * the caller frees it. */
bool nic_huge_cache_put(void *p);
/* Whether p is a block the cache holds: freed to the program, live to mimalloc. */
bool nic_huge_cache_holds(const void *p);
/* A cached block with room for size, at most twice as large (or no larger than
 * nic_huge_fresh_capacity(size)), marked live; NULL on a miss. Pages past
 * nic_huge_fresh_capacity(size) are given back to the kernel first; those before it stay,
 * written or not. */
void *nic_huge_cache_take(size_t size);
/* Frees blocks cached longer than max_age_ms (0: all). Called by the reaper and nic_collect. */
void nic_huge_cache_purge(unsigned max_age_ms);

struct nic_huge_cache_stats {
  size_t bytes;
  unsigned blocks;
  uint64_t hits, misses, purged;
};
void nic_huge_cache_stats(struct nic_huge_cache_stats *out);

#endif
