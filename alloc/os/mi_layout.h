/* mimalloc 2.0.9's segment, page and heap headers, as read from outside (mi_free_lists.c,
 * dp_live.c; mi_decommit.c also writes the commit masks): the offsets of its mimalloc-types.h for
 * x86-64 with MI_SECURE 0 and MI_DEBUG 0 (Debian's build). A segment is 32 MiB of 64 KiB slices,
 * and each slice entry of its header is a page header. Each reader checks the offsets it uses
 * against real blocks at start-up. */
#ifndef NIC_MI_LAYOUT_H
#define NIC_MI_LAYOUT_H

#include <mimalloc.h>
#include <stdbool.h>
#include <stdint.h>

#define NIC_MI_SEGMENT_SIZE ((uintptr_t)32 << 20)
#define NIC_MI_SEGMENT_MASK (NIC_MI_SEGMENT_SIZE - 1)
/* Its arena's unit: a claim is a whole number of these, committed whole (src/arena.c). */
#define NIC_MI_ARENA_BLOCK ((size_t)32 << 20)
#define NIC_MI_SLICE_SHIFT 16
#define NIC_MI_SEG_ALLOW_DECOMMIT 32  /* bool */
#define NIC_MI_SEG_DECOMMIT_EXPIRE 40 /* int64_t, ms */
#define NIC_MI_SEG_DECOMMIT_MASK 48   /* 8 words: committed slices marked for decommit */
#define NIC_MI_SEG_COMMIT_MASK 112    /* 8 words: committed slices */
#define NIC_MI_SEG_COOKIE 216         /* its address xor mimalloc's main cookie */
#define NIC_MI_SEG_SLICES_TOTAL 224   /* size_t segment_slices: its length in slices */
#define NIC_MI_SEG_KIND 240           /* 0 normal, 1 huge */
#define NIC_MI_SEG_SLICE_ENTRIES 248  /* size_t */
#define NIC_MI_SEG_THREAD_ID 256      /* the owning thread's id: its thread pointer */
#define NIC_MI_SEG_SLICES 264         /* the page headers */
#define NIC_MI_PAGE_HEADER 80         /* sizeof(mi_page_t) */
#define NIC_MI_PAGE_SLICE_COUNT 0     /* uint32_t, and slice_offset (bytes back to the page) at 4 */
#define NIC_MI_PAGE_CAPACITY 8        /* in the word at 8: the uint16_t at byte 10 */
#define NIC_MI_PAGE_RESERVED 8        /* in the word at 8: the uint16_t at byte 12 */
/* In the word at 8: the flags byte at 14, in_full its bit 0 and has_aligned its bit 1 (an aligned
 * allocation handed out a pointer past the start of its block on this page). */
#define NIC_MI_PAGE_FLAGS 8
#define NIC_MI_PAGE_HAS_ALIGNED_BIT 49
#define NIC_MI_PAGE_FREE 16
#define NIC_MI_PAGE_USED 24        /* uint32_t: blocks allocated and not freed by their owner */
#define NIC_MI_PAGE_XBLOCK_SIZE 24 /* in the word at 24: the uint32_t at byte 28 */
#define NIC_MI_PAGE_LOCAL_FREE 32
#define NIC_MI_PAGE_XTHREAD_FREE 40 /* blocks other threads freed; low two bits are flags */
#define NIC_MI_PAGE_XHEAP 48
/* The page's last word, padding that 2.0.9 never writes but zeroes with the page data when it
 * frees the page (segment.c's page_clear) or sets a segment up: sub_pages.c's mark. */
#define NIC_MI_PAGE_PADDING 72
#define NIC_MI_HEAP_DELAYED_FREE 2840 /* after tld, 129 direct pages and 75 page queues */
#define NIC_MI_HEAP_THREAD_ID 2848
#define NIC_MI_HUGE_BLOCK_SIZE ((uint32_t)1 << 31) /* xblock_size of a huge page */

/* Whether mimalloc holds a segment over the 32 MiB block starting at boundary (its own segment,
 * or a huge one spanning it). One byte in: 2.0.9 maps a pointer to its segment as
 * (p - 1) & ~mask, so the boundary itself belongs to the block before. */
static inline bool nic_mi_segment_at(uintptr_t boundary) {
  return mi_is_in_heap_region((const void *)(boundary + 1));
}

/* The bytes of arena claimed by a segment of this many slices: whole arena blocks, so the next
 * segment starts at the next block boundary, not where a huge one ends (40 MiB of block, 64 MiB
 * claimed). Walks of a chunk's segments step by it. */
static inline uintptr_t nic_mi_segment_claim(uintptr_t slices_total) {
  const uintptr_t length = slices_total << NIC_MI_SLICE_SHIFT;
  if (length <= NIC_MI_SEGMENT_SIZE) return NIC_MI_SEGMENT_SIZE;
  return (length + NIC_MI_ARENA_BLOCK - 1) & ~(uintptr_t)(NIC_MI_ARENA_BLOCK - 1);
}

#endif
