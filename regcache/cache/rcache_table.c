#include "rcache_table.h"

#include "map.h"
#include "pagemap.h"

#include <sys/mman.h>

/* The root itself, so that a lookup starts from the table pointer with no load more; the map's
 * shape is a constant of each function, which the page map's inline accessors fold. */
struct nic_rt {
  void *root[NIC_PAGEMAP_ROOT_ENTRIES];
};
#define MAP_OF(t) ((const struct nic_pagemap)NIC_PAGEMAP((void **)(t)->root, 3, 32))

struct nic_rt *nic_rt_create(void) {
  return nic_map_anon(sizeof(struct nic_rt), PROT_READ | PROT_WRITE, true);
}

void nic_rt_destroy(struct nic_rt *t) {
  if (!t) return;
  const struct nic_pagemap map = MAP_OF(t);
  for (size_t i = 0; i < NIC_PAGEMAP_ROOT_ENTRIES; i++) {
    void **mid = t->root[i];
    if (!mid) continue;
    for (size_t j = 0; j < NIC_PAGEMAP_MID_ENTRIES; j++)
      if (mid[j]) nic_unmap(mid[j], nic_pagemap_leaf_bytes(&map));
    nic_unmap(mid, NIC_PAGEMAP_MID_ENTRIES * sizeof *mid);
  }
  nic_unmap(t, sizeof *t);
}

uint32_t nic_rt_get(const struct nic_rt *t, uintptr_t addr) {
  const struct nic_pagemap map = MAP_OF(t);
  const uint32_t *e = nic_pagemap_u32(&map, addr);
  return e ? __atomic_load_n(e, __ATOMIC_ACQUIRE) : 0;
}

bool nic_rt_set(struct nic_rt *t, uintptr_t start, uintptr_t end, uint32_t slot) {
  const struct nic_pagemap map = MAP_OF(t);
  if (end <= start) return true;
  /* Every table first, so that a failure leaves the entries as they were. */
  if (!nic_pagemap_reserve(&map, start, end)) return false;
  for (uintptr_t a = start; a < end; a += NIC_PAGE_SIZE)
    __atomic_store_n(nic_pagemap_u32(&map, a), slot, __ATOMIC_RELEASE);
  return true;
}

void nic_rt_clear(struct nic_rt *t, uintptr_t start, uintptr_t end, uint32_t slot) {
  const struct nic_pagemap map = MAP_OF(t);
  for (uintptr_t a = start; a < end; a += NIC_PAGE_SIZE) {
    uint32_t *e = nic_pagemap_u32(&map, a);
    if (e && __atomic_load_n(e, __ATOMIC_RELAXED) == slot) __atomic_store_n(e, 0, __ATOMIC_RELEASE);
  }
}

uint32_t nic_rt_next(const struct nic_rt *t, uintptr_t *addr, uintptr_t end) {
  const struct nic_pagemap map = MAP_OF(t);
  for (uintptr_t a = nic_page_down(*addr), next; a < end;) {
    const uint32_t *leaf = nic_pagemap_span(&map, a, &next);
    if (!leaf) {
      a = next;
      continue;
    }
    for (; a < end && a < next; a += NIC_PAGE_SIZE) {
      uint32_t slot = __atomic_load_n(&leaf[nic_pagemap_index(&map, a)], __ATOMIC_ACQUIRE);
      if (slot) {
        *addr = a;
        return slot;
      }
    }
  }
  *addr = end;
  return 0;
}
