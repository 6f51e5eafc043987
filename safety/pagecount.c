#include "pagecount.h"

#include "events.h"
#include "pagemap.h"

unsigned long nic_safety_refs;
/* Any thread may add references, so tables are made with compare-and-swap (the page map's). */
static void *root[NIC_PAGEMAP_ROOT_ENTRIES];
static const struct nic_pagemap map = NIC_PAGEMAP(root, 3, 64);

static bool page_range(uintptr_t start, uintptr_t end, uintptr_t *first, uintptr_t *last) {
  if (end <= start || end > NIC_USER_END) return false;
  *first = nic_page_down(start);
  *last = nic_page_down(end - 1);
  return true;
}

bool nic_pc_add(uintptr_t start, uintptr_t end, uint64_t unit) {
  uintptr_t first, last;
  if (!page_range(start, end, &first, &last)) return false;
  if (!nic_pagemap_reserve(&map, first, last + NIC_PAGE_SIZE)) return false; /* all or nothing */
  const unsigned long pages = ((last - first) >> NIC_PAGE_SHIFT) + 1;
  nic_watch_blocks((int64_t)pages); /* before the count: events.h */
  __atomic_add_fetch(&nic_safety_refs, pages, __ATOMIC_SEQ_CST);
  for (uintptr_t a = first; a <= last; a += NIC_PAGE_SIZE)
    __atomic_add_fetch(nic_pagemap_u64(&map, a), unit, __ATOMIC_SEQ_CST);
  return true;
}

void nic_pc_sub(uintptr_t start, uintptr_t end, uint64_t unit) {
  uintptr_t first, last;
  if (!page_range(start, end, &first, &last)) return;
  for (uintptr_t a = first; a <= last; a += NIC_PAGE_SIZE)
    __atomic_sub_fetch(nic_pagemap_u64(&map, a), unit, __ATOMIC_SEQ_CST);
  const unsigned long pages = ((last - first) >> NIC_PAGE_SHIFT) + 1;
  __atomic_sub_fetch(&nic_safety_refs, pages, __ATOMIC_SEQ_CST);
  nic_watch_blocks(-(int64_t)pages); /* after the count: events.h */
}

uint64_t nic_pc_count(uintptr_t a) {
  const uint64_t *e = nic_pagemap_u64(&map, a);
  return e ? __atomic_load_n(e, __ATOMIC_SEQ_CST) : 0;
}

bool nic_pc_any(uintptr_t start, uintptr_t end, uint64_t mask) {
  uintptr_t a, last;
  if (!page_range(start, end, &a, &last)) return false;
  /* Page by page, as most ranges are a page or two; an absent table is skipped whole. */
  for (uintptr_t next; a <= last;) {
    const uint64_t *leaf = nic_pagemap_span(&map, a, &next);
    if (!leaf) {
      a = next; /* nothing in flight where no table was made */
      continue;
    }
    if (__atomic_load_n(&leaf[nic_pagemap_index(&map, a)], __ATOMIC_SEQ_CST) & mask) return true;
    a += NIC_PAGE_SIZE;
  }
  return false;
}

void nic_pc_void_dma(void) {
  if (!__atomic_load_n(&nic_safety_refs, __ATOMIC_ACQUIRE)) return;
  unsigned long holds = 0;
  for (uintptr_t a = 0, next; a < NIC_USER_END; a = next) {
    uint64_t *leaf = nic_pagemap_span(&map, a, &next);
    for (size_t i = 0; leaf && i < nic_pagemap_leaf_bytes(&map) / sizeof *leaf; i++) {
      leaf[i] &= ~NIC_PC_DMA_MASK;
      holds += leaf[i] / NIC_PC_HOLD;
    }
  }
  /* Recounted rather than decremented: a post the fork cut in half may have counted its pages
   * in the total and not yet in the table. */
  const unsigned long counted = __atomic_exchange_n(&nic_safety_refs, holds, __ATOMIC_SEQ_CST);
  /* The watch word counted at least what the total did (it is raised first), so this leaves
   * it at or above holds; other watchers' shares stay. */
  nic_watch_blocks((int64_t)holds - (int64_t)counted);
}
