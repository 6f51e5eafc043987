#include "dp_huge.h"

#include "chunks.h"
#include "log.h"
#include "mi_layout.h"
#include "steps.h"

#include <stdint.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
#define SLICE ((size_t)1 << NIC_SLICE_SHIFT)
size_t nic_dp_huge_segment_bound(size_t size, size_t alignment) {
  const size_t request = size + nic_dp_huge_align_extra(alignment);
  const size_t unit = request < 32 * MIB ? MIB : 4 * MIB;
  return NIC_HUGE_BLOCK_OFFSET + ((request + unit - 1) & ~(unit - 1));
}

/* mimalloc 2.0.9 hands out a huge block whose claim's commit failed (_mi_arena_alloc_aligned
 * does not look at _mi_os_commit's answer): its pages are the chunk's lazy mapping, writable
 * but backed by no step, neither pinned nor counted, and faulted in past the memory cgroup's
 * look. Given back at once: the segment's free decommits the whole claim (its slices' committed
 * bits go, its arena blocks are free again). Only the segment's header and the block's first
 * word were written there. The step's refusal was said, once, where it happened (steps.c). */
static void *refuse(void *p) {
  mi_free(p);
  return NULL;
}

void *nic_dp_huge_alloc(mi_heap_t *heap, size_t size, size_t alignment, bool zero) {
  const size_t bound = nic_dp_huge_segment_bound(size, alignment);
  nic_steps_expect_huge(bound);
  /* Zeroed here, once the block is known backed: mimalloc 2.0.9 clears a huge block whole
   * (it never takes a segment's page for zero), into the unbacked pages of a refused one too. */
  void *p = alignment <= sizeof(void *) * 2 ? mi_heap_malloc(heap, size)
                                            : mi_heap_malloc_aligned_at(heap, size, alignment, 0);
  const enum nic_huge_claim claim = nic_steps_expect_huge_done();
  if (!p || !nic_in_dp(p)) return p;
  if (claim == NIC_HUGE_CLAIM_REFUSED) return refuse(p);
  if (claim == NIC_HUGE_CLAIM_BACKED) {
    /* A mimalloc built with padding (debug builds: 8 bytes a block) can make a segment one
     * unit larger than the bound, at sizes just under a unit. The rest is backed now: its
     * pages, written or not, stay as they are (pin.c backs a step in place over resident
     * pages). */
    const uintptr_t claim_start = (uintptr_t)p & ~(NIC_MI_ARENA_BLOCK - 1);
    const uintptr_t backed = claim_start + ((bound + SLICE - 1) & ~(SLICE - 1));
    const uintptr_t end = (uintptr_t)p + mi_usable_size(p);
    if (end > backed) {
      nic_log_info("a dataplane block of %zu bytes ends %zu bytes past the bound of its "
                   "segment; backing the rest",
                   size, (size_t)(end - backed));
      if (nic_steps_commit((void *)backed, end - backed)) return refuse(p);
    }
  }
  if (zero) memset(p, 0, mi_usable_size(p));
  return p;
}
