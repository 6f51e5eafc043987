#include "pagemap.h"

#include "map.h"

#include <sys/mman.h>

/* *slot, or a zeroed table of bytes stored there first when it is empty. The loser of a race
 * unmaps its table, which nobody saw, and takes the winner's. */
static void *table(void **slot, size_t bytes) {
  void *t = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (t) return t;
  void *fresh = nic_map_anon(bytes, PROT_READ | PROT_WRITE, true);
  if (!fresh) return NULL;
  if (__atomic_compare_exchange_n(slot, &t, fresh, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return fresh;
  nic_unmap(fresh, bytes);
  return t;
}

void *nic_pagemap_make(const struct nic_pagemap *m, uintptr_t a) {
  if (a >> NIC_USER_BITS) return NULL;
  void **slot = &m->root[a >> NIC_PAGEMAP_ROOT_SHIFT];
  if (m->levels == 3) {
    void **mid = table(slot, NIC_PAGEMAP_MID_ENTRIES * sizeof(void *));
    if (!mid) return NULL;
    slot = &mid[(a >> NIC_PAGEMAP_MID_SHIFT) & (NIC_PAGEMAP_MID_ENTRIES - 1)];
  }
  return table(slot, nic_pagemap_leaf_bytes(m));
}

void nic_pagemap_bits(const struct nic_pagemap *m, uintptr_t start, uintptr_t end, bool on) {
  for (uintptr_t a = nic_page_down(start), next; a < end; a = next) {
    uint64_t *leaf = nic_pagemap_span(m, a, &next);
    if (!leaf) continue; /* nothing set there */
    const uintptr_t stop = end < next ? end : next;
    size_t i = nic_pagemap_index(m, a), left = (nic_page_up(stop) - a) >> NIC_PAGE_SHIFT, n;
    for (; left; left -= n, i += n) {
      const uint64_t mask = nic_bits_run(i, left, &n);
      if (on)
        __atomic_or_fetch(&leaf[i / 64], mask, __ATOMIC_RELEASE);
      else
        __atomic_and_fetch(&leaf[i / 64], ~mask, __ATOMIC_RELEASE);
    }
  }
}
