/* Whether a range is nicmalloc's own memory. */
#ifndef NIC_OWNS_H
#define NIC_OWNS_H

#include "chunks.h"
#include "commit_map.h"
#include "interposed.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* [p, p+len) lies in nicmalloc's heaps: the control arena or the dataplane range (its large
 * mapped blocks are not counted). Where nicmalloc is not the program's malloc (interposed.h),
 * only such memory has frees and unmaps nicmalloc sees. */
static inline bool nic_owns_range(const void *p, size_t len) {
  const uintptr_t a = (uintptr_t)p, arena = a - nic_commit_map.base;
  if (nic_in_dp(p)) return len <= nic_dp.span - (a - nic_dp.base);
  return arena < nic_commit_map.size && len <= nic_commit_map.size - arena;
}

/* Whether nicmalloc sees the frees and unmaps of [p, p+len), so that a registration of it cannot
 * outlive its pages unnoticed: any memory where nicmalloc is the program's malloc, only its own
 * heaps where it is not (interposed.h). nic_register refuses the rest, nic_sga_add copies it. */
static inline bool nic_range_watched(const void *p, size_t len) {
  return nic_malloc_interposed() || nic_owns_range(p, len);
}

#endif
