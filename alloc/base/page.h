/* The 4 KiB base page: the unit the kernel maps, protects and advises in, and so the unit of
 * every per-page table of the runtime (alloc/base/pagemap.h, alloc/os/commit_map.h). Huge page
 * sizes belong to the memory kinds (alloc/os/pin.h). */
#ifndef NIC_PAGE_H
#define NIC_PAGE_H

#include <stdint.h>

/* NIC_PAGE_4K is a memory kind (include/nicmalloc.h), not this size. */
#define NIC_PAGE_SHIFT 12
#define NIC_PAGE_SIZE ((uintptr_t)1 << NIC_PAGE_SHIFT)
/* Virtual addresses user space can have on x86-64 (4-level paging): what page maps cover. */
#define NIC_USER_BITS 47
#define NIC_USER_END ((uintptr_t)1 << NIC_USER_BITS)

static inline uintptr_t nic_page_down(uintptr_t a) {
  return a & ~(NIC_PAGE_SIZE - 1);
}
static inline uintptr_t nic_page_up(uintptr_t a) {
  return (a + NIC_PAGE_SIZE - 1) & ~(NIC_PAGE_SIZE - 1);
}

#endif
