#include "rcache_table.h"

#include <sys/mman.h>

#define L1_SHIFT 30
#define L2_SHIFT 21
#define L1_ENTRIES (1ul << (47 - L1_SHIFT)) /* user space is 47 bits on x86-64 */
#define L2_ENTRIES (1ul << (L1_SHIFT - L2_SHIFT))
#define L3_ENTRIES (1ul << (L2_SHIFT - NIC_RT_PAGE_SHIFT))

typedef uint32_t *l3_table;
typedef l3_table *l2_table;

/* The top level itself, so that a lookup starts from the table pointer with no load more. */
struct nic_rt {
  l2_table l1[L1_ENTRIES];
};

static void *map_zeroed(size_t bytes) {
  void *p =
      mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

struct nic_rt *nic_rt_create(void) {
  return map_zeroed(sizeof(struct nic_rt));
}

void nic_rt_destroy(struct nic_rt *t) {
  if (!t) return;
  for (size_t i = 0; i < L1_ENTRIES; i++) {
    l2_table l2 = t->l1[i];
    if (!l2) continue;
    for (size_t j = 0; j < L2_ENTRIES; j++)
      if (l2[j]) munmap(l2[j], L3_ENTRIES * sizeof *l2[j]);
    munmap(l2, L2_ENTRIES * sizeof *l2);
  }
  munmap(t, sizeof *t);
}

uint32_t nic_rt_get(const struct nic_rt *t, uintptr_t addr) {
  l2_table const *top = t->l1;
  if ((addr >> L1_SHIFT) >= L1_ENTRIES) return 0;
  l2_table l2 = __atomic_load_n(&top[addr >> L1_SHIFT], __ATOMIC_ACQUIRE);
  if (!l2) return 0;
  l3_table l3 = __atomic_load_n(&l2[(addr >> L2_SHIFT) & (L2_ENTRIES - 1)], __ATOMIC_ACQUIRE);
  if (!l3) return 0;
  return __atomic_load_n(&l3[(addr >> NIC_RT_PAGE_SHIFT) & (L3_ENTRIES - 1)], __ATOMIC_ACQUIRE);
}

/* Returns the leaf entry for addr, mapping missing tables when create is set. */
static uint32_t *leaf(struct nic_rt *t, uintptr_t addr, bool create) {
  l2_table *l2p = &t->l1[addr >> L1_SHIFT];
  if (!*l2p) {
    if (!create) return NULL;
    l2_table l2 = map_zeroed(L2_ENTRIES * sizeof *l2);
    if (!l2) return NULL;
    __atomic_store_n(l2p, l2, __ATOMIC_RELEASE);
  }
  l3_table *l3p = &(*l2p)[(addr >> L2_SHIFT) & (L2_ENTRIES - 1)];
  if (!*l3p) {
    if (!create) return NULL;
    l3_table l3 = map_zeroed(L3_ENTRIES * sizeof *l3);
    if (!l3) return NULL;
    __atomic_store_n(l3p, l3, __ATOMIC_RELEASE);
  }
  return &(*l3p)[(addr >> NIC_RT_PAGE_SHIFT) & (L3_ENTRIES - 1)];
}

bool nic_rt_set(struct nic_rt *t, uintptr_t start, uintptr_t end, uint32_t slot) {
  if ((end - 1) >> L1_SHIFT >= L1_ENTRIES) return false;
  /* Map every table first, so that a failure leaves the table as it was. */
  for (uintptr_t a = start; a < end; a += (uintptr_t)1 << NIC_RT_PAGE_SHIFT)
    if (!leaf(t, a, true)) return false;
  for (uintptr_t a = start; a < end; a += (uintptr_t)1 << NIC_RT_PAGE_SHIFT)
    __atomic_store_n(leaf(t, a, false), slot, __ATOMIC_RELEASE);
  return true;
}

void nic_rt_clear(struct nic_rt *t, uintptr_t start, uintptr_t end, uint32_t slot) {
  for (uintptr_t a = start; a < end; a += (uintptr_t)1 << NIC_RT_PAGE_SHIFT) {
    uint32_t *e = leaf(t, a, false);
    if (e && *e == slot) __atomic_store_n(e, 0, __ATOMIC_RELEASE);
  }
}

uint32_t nic_rt_next(const struct nic_rt *t, uintptr_t *addr, uintptr_t end) {
  l2_table const *top = t->l1;
  uintptr_t a = *addr & ~(((uintptr_t)1 << NIC_RT_PAGE_SHIFT) - 1);
  while (top && a < end && (a >> L1_SHIFT) < L1_ENTRIES) {
    l2_table l2 = top[a >> L1_SHIFT];
    if (!l2) {
      a = ((a >> L1_SHIFT) + 1) << L1_SHIFT;
      continue;
    }
    l3_table l3 = l2[(a >> L2_SHIFT) & (L2_ENTRIES - 1)];
    if (!l3) {
      a = ((a >> L2_SHIFT) + 1) << L2_SHIFT;
      continue;
    }
    uint32_t slot = l3[(a >> NIC_RT_PAGE_SHIFT) & (L3_ENTRIES - 1)];
    if (slot) {
      *addr = a;
      return slot;
    }
    a += (uintptr_t)1 << NIC_RT_PAGE_SHIFT;
  }
  *addr = end;
  return 0;
}
