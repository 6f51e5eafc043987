#include "rcache_table.h"

#include "pagemap.h"

static void *root[NIC_PAGEMAP_ROOT_ENTRIES];
static const struct nic_pagemap map = NIC_PAGEMAP(root, 3, 32);

uint32_t nic_rt_get(uintptr_t addr) {
  const uint32_t *e = nic_pagemap_u32(&map, addr);
  return e ? __atomic_load_n(e, __ATOMIC_ACQUIRE) : 0;
}

bool nic_rt_set(uintptr_t start, uintptr_t end, uint32_t slot) {
  if (end <= start) return true;
  /* Every table first, so that a failure leaves the entries as they were. */
  if (!nic_pagemap_reserve(&map, start, end)) return false;
  for (uintptr_t a = start; a < end; a += NIC_PAGE_SIZE)
    __atomic_store_n(nic_pagemap_u32(&map, a), slot, __ATOMIC_RELEASE);
  return true;
}

void nic_rt_clear(uintptr_t start, uintptr_t end, uint32_t slot) {
  for (uintptr_t a = start; a < end; a += NIC_PAGE_SIZE) {
    uint32_t *e = nic_pagemap_u32(&map, a);
    if (e && __atomic_load_n(e, __ATOMIC_RELAXED) == slot) __atomic_store_n(e, 0, __ATOMIC_RELEASE);
  }
}

uint32_t nic_rt_next(uintptr_t *addr, uintptr_t end) {
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
