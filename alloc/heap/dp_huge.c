#include "dp_huge.h"

#include "chunks.h"
#include "log.h"
#include "mi_layout.h"
#include "steps.h"

#include <stdint.h>

#define MIB ((size_t)1 << 20)
#define SLICE ((size_t)1 << NIC_SLICE_SHIFT)
size_t nic_dp_huge_segment_bound(size_t size, size_t alignment) {
  const size_t request = size + nic_dp_huge_align_extra(alignment);
  const size_t unit = request < 32 * MIB ? MIB : 4 * MIB;
  return NIC_HUGE_BLOCK_OFFSET + ((request + unit - 1) & ~(unit - 1));
}

void *nic_dp_huge_alloc(mi_heap_t *heap, size_t size, size_t alignment, bool zero) {
  const size_t bound = nic_dp_huge_segment_bound(size, alignment);
  nic_steps_expect_huge(bound);
  void *p = alignment <= sizeof(void *) * 2
                ? (zero ? mi_heap_zalloc(heap, size) : mi_heap_malloc(heap, size))
            : zero ? mi_heap_zalloc_aligned_at(heap, size, alignment, 0)
                   : mi_heap_malloc_aligned_at(heap, size, alignment, 0);
  /* Still set: no claim was committed (the request failed, or found its blocks committed). */
  const bool cut = nic_steps_expect_huge_done();
  if (!p || !cut || !nic_in_dp(p)) return p;
  /* A mimalloc built with padding (debug builds: 8 bytes a block) can make a segment one unit
   * larger than the bound, at sizes just under a unit. The rest is backed now: its pages,
   * written or not, stay as they are (pin.c backs a step in place over resident pages). */
  const uintptr_t claim = (uintptr_t)p & ~(NIC_MI_ARENA_BLOCK - 1);
  const uintptr_t backed = claim + ((bound + SLICE - 1) & ~(SLICE - 1));
  const uintptr_t end = (uintptr_t)p + mi_usable_size(p);
  if (end > backed) {
    nic_log_info("a dataplane block of %zu bytes ends %zu bytes past the bound of its "
                 "segment; backing the rest",
                 size, (size_t)(end - backed));
    if (nic_steps_commit((void *)backed, end - backed)) {
      mi_free(p);
      return NULL;
    }
  }
  return p;
}
