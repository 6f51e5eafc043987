#include "pagecount.h"

#include "events.h"

#include <stddef.h>
#include <sys/mman.h>

#define L1_SHIFT 30
#define L2_SHIFT 21
#define L1_ENTRIES (1ul << (47 - L1_SHIFT)) /* user space is 47 bits on x86-64 */
#define L2_ENTRIES (1ul << (L1_SHIFT - L2_SHIFT))
#define L3_ENTRIES (1ul << (L2_SHIFT - NIC_PC_PAGE_SHIFT))
#define PAGE ((uintptr_t)1 << NIC_PC_PAGE_SHIFT)

typedef uint64_t *l3_table;
typedef l3_table *l2_table;

unsigned long nic_safety_refs;
/* 1 MiB of zero pages in .bss: costs nothing until a range is tracked. Tables below it are
 * mapped on first use and never freed, so readers need no lock. */
static l2_table l1[L1_ENTRIES];

/* Returns *slot, mapping a zeroed table into it first when create is set and it is empty.
 * Two threads may race: the loser unmaps its table and uses the winner's. */
static void *table(void **slot, size_t bytes, bool create) {
  void *t = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (t || !create) return t;
  void *fresh =
      mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (fresh == MAP_FAILED) return NULL;
  if (__atomic_compare_exchange_n(slot, &t, fresh, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return fresh;
  munmap(fresh, bytes);
  return t;
}

static uint64_t *leaf(uintptr_t a, bool create) {
  l2_table l2 = table((void **)&l1[a >> L1_SHIFT], L2_ENTRIES * sizeof(l3_table), create);
  if (!l2) return NULL;
  l3_table l3 = table((void **)&l2[(a >> L2_SHIFT) & (L2_ENTRIES - 1)],
                      L3_ENTRIES * sizeof(uint64_t), create);
  return l3 ? &l3[(a >> NIC_PC_PAGE_SHIFT) & (L3_ENTRIES - 1)] : NULL;
}

static bool page_range(uintptr_t start, uintptr_t end, uintptr_t *first, uintptr_t *last) {
  if (end <= start || (end - 1) >> L1_SHIFT >= L1_ENTRIES) return false;
  *first = start & ~(PAGE - 1);
  *last = (end - 1) & ~(PAGE - 1);
  return true;
}

bool nic_pc_add(uintptr_t start, uintptr_t end, uint64_t unit) {
  uintptr_t first, last;
  if (!page_range(start, end, &first, &last)) return false;
  for (uintptr_t a = first; a <= last; a += PAGE) /* every table first: all or nothing */
    if (!leaf(a, true)) return false;
  const unsigned long pages = ((last - first) >> NIC_PC_PAGE_SHIFT) + 1;
  nic_watch_blocks((int64_t)pages); /* before the count: events.h */
  __atomic_add_fetch(&nic_safety_refs, pages, __ATOMIC_SEQ_CST);
  for (uintptr_t a = first; a <= last; a += PAGE)
    __atomic_add_fetch(leaf(a, false), unit, __ATOMIC_SEQ_CST);
  return true;
}

void nic_pc_sub(uintptr_t start, uintptr_t end, uint64_t unit) {
  uintptr_t first, last;
  if (!page_range(start, end, &first, &last)) return;
  for (uintptr_t a = first; a <= last; a += PAGE)
    __atomic_sub_fetch(leaf(a, false), unit, __ATOMIC_SEQ_CST);
  const unsigned long pages = ((last - first) >> NIC_PC_PAGE_SHIFT) + 1;
  __atomic_sub_fetch(&nic_safety_refs, pages, __ATOMIC_SEQ_CST);
  nic_watch_blocks(-(int64_t)pages); /* after the count: events.h */
}

uint64_t nic_pc_count(uintptr_t a) {
  if (a >> 47) return 0;
  l2_table l2 = __atomic_load_n(&l1[a >> L1_SHIFT], __ATOMIC_ACQUIRE);
  l3_table l3 = l2 ? __atomic_load_n(&l2[(a >> L2_SHIFT) & (L2_ENTRIES - 1)], __ATOMIC_ACQUIRE) : 0;
  return l3 ? __atomic_load_n(&l3[(a >> NIC_PC_PAGE_SHIFT) & (L3_ENTRIES - 1)], __ATOMIC_SEQ_CST)
            : 0;
}

bool nic_pc_any(uintptr_t start, uintptr_t end, uint64_t mask) {
  uintptr_t a, last;
  if (!page_range(start, end, &a, &last)) return false;
  while (a <= last) {
    l2_table l2 = __atomic_load_n(&l1[a >> L1_SHIFT], __ATOMIC_ACQUIRE);
    if (!l2) {
      a = ((a >> L1_SHIFT) + 1) << L1_SHIFT;
      continue;
    }
    l3_table l3 = __atomic_load_n(&l2[(a >> L2_SHIFT) & (L2_ENTRIES - 1)], __ATOMIC_ACQUIRE);
    if (!l3) {
      a = ((a >> L2_SHIFT) + 1) << L2_SHIFT;
      continue;
    }
    if (__atomic_load_n(&l3[(a >> NIC_PC_PAGE_SHIFT) & (L3_ENTRIES - 1)], __ATOMIC_SEQ_CST) & mask)
      return true;
    a += PAGE;
  }
  return false;
}

void nic_pc_void_dma(void) {
  if (!__atomic_load_n(&nic_safety_refs, __ATOMIC_ACQUIRE)) return;
  unsigned long holds = 0;
  for (size_t i = 0; i < L1_ENTRIES; i++) {
    l2_table l2 = l1[i];
    for (size_t j = 0; l2 && j < L2_ENTRIES; j++) {
      l3_table l3 = l2[j];
      for (size_t k = 0; l3 && k < L3_ENTRIES; k++) {
        l3[k] &= ~NIC_PC_DMA_MASK;
        holds += l3[k] / NIC_PC_HOLD;
      }
    }
  }
  /* Recounted rather than decremented: a post the fork cut in half may have counted its pages
   * in the total and not yet in the table. */
  const unsigned long counted = __atomic_exchange_n(&nic_safety_refs, holds, __ATOMIC_SEQ_CST);
  /* The watch word counted at least what the total did (it is raised first), so this leaves
   * it at or above holds; other watchers' shares stay. */
  nic_watch_blocks((int64_t)holds - (int64_t)counted);
}
