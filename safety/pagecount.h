/* In-flight references per 4 KiB page: an instance of the runtime's page map
 * (alloc/base/pagemap.h: lock-free reads, tables made with compare-and-swap, so that any thread
 * may add references). Each page has one 64-bit word: the low half counts posted SG entries that
 * cover the page (DMA), the high half nic_hold references. free() defers a block while any page of
 * it has either; nic_fence_write waits only for the DMA half. */
#ifndef NIC_PAGECOUNT_H
#define NIC_PAGECOUNT_H

#include "page.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NIC_PC_DMA 1ull                  /* one posted entry */
#define NIC_PC_HOLD (1ull << 32)         /* one nic_hold */
#define NIC_PC_DMA_MASK 0xffffffffull    /* what a write fence waits for */
#define NIC_PC_ANY 0xffffffffffffffffull /* what a free waits for */
#define NIC_PC_USER_END NIC_USER_END     /* the tables cover the 47-bit user space */

/* [p, p+len) is not empty and lies in the user space: what every public entry taking a range
 * checks first. A range past it would not be found in the tables, and be taken as clear. */
static inline bool nic_pc_user_range(const void *p, size_t len) {
  return len && (uintptr_t)p < NIC_PC_USER_END && len <= NIC_PC_USER_END - (uintptr_t)p;
}

/* Page references outstanding in the whole table (added before the pages, dropped after):
 * zero means no page is in flight, so free's filter is this one relaxed load. */
extern unsigned long nic_safety_refs;

/* Adds unit to every page touching [start, end). Returns false (nothing changed) when the range
 * is outside the 47-bit user space or a table could not be mapped. */
bool nic_pc_add(uintptr_t start, uintptr_t end, uint64_t unit);
/* Takes back what nic_pc_add(start, end, unit) added. */
void nic_pc_sub(uintptr_t start, uintptr_t end, uint64_t unit);
/* The count of the page holding a (0 when none). Lock-free, async-signal-safe. */
uint64_t nic_pc_count(uintptr_t a);
/* True when a page touching [start, end) has a count under mask. Lock-free; skips absent
 * tables, so a free of a large block far from anything in flight stays cheap. */
bool nic_pc_any(uintptr_t start, uintptr_t end, uint64_t mask);
/* Fork child, no other thread: drops every DMA reference (the parent's posts complete in the
 * parent only), keeps the holds, and recounts nic_safety_refs from them. */
void nic_pc_void_dma(void);

#endif
