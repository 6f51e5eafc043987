/* Blocks mimalloc does not hand out as they are. Mappings: nicmalloc maps control requests of
 * NIC_MAPPED_MIN bytes or more, and those aligned beyond what mimalloc 2.0.9 serves, itself.
 * Offset blocks: a dataplane request aligned beyond that is served from inside a larger
 * dataplane block, its base, since it must lie in a chunk.
 *
 * Size: in mimalloc a huge block costs memory in proportion to its size even if never written.
 * On arena memory used before, it clears 80 bytes of segment header per 64 KiB of block (the
 * slice table, which for a huge segment runs on into the block: 2.6 GiB for a 2 TiB block), and
 * the commit map (commit_map.h) sets 2 bits per page, one write fault per 16 MiB. A mapping of
 * its own costs address space only, as under glibc, and realloc moves it with mremap. Below
 * 1 GiB those costs stay under a MiB a block, and mimalloc and the huge cache keep their speed.
 * Alignment: mimalloc 2.0.9 refuses alignments over 16 MiB (a block never starts at a segment
 * boundary, where its header sits), and glibc serves them.
 *
 * Such a block is known by its start in a table, so that free, realloc and malloc_usable_size
 * recognise it exactly; mimalloc is never asked about it (for an offset block it would read a
 * segment header at the block's start, which is a segment boundary). */
#ifndef NIC_MAPPED_H
#define NIC_MAPPED_H

#include "chunks.h"
#include "page.h"
#include "vspace.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NIC_MAPPED_MIN ((size_t)1 << 30)
/* mimalloc 2.0.9's MI_ALIGNMENT_MAX: larger alignments it refuses. */
#define NIC_MI_ALIGNMENT_MAX ((size_t)16 << 20)

/* Whether a control request goes to nic_mapped_alloc. */
static inline bool nic_mapped_wanted(size_t size, size_t alignment) {
  return size >= NIC_MAPPED_MIN || alignment > NIC_MI_ALIGNMENT_MAX;
}

/* Live mapped blocks; while 0, no pointer needs the table looked at. */
extern unsigned long nic_mapped_blocks __attribute__((visibility("hidden")));

/* Might p start a block of the table? A cheap filter before it: such blocks start on a page,
 * outside the control arena. */
static inline bool nic_mapped_maybe(const void *p) {
  return __atomic_load_n(&nic_mapped_blocks, __ATOMIC_RELAXED) != 0 &&
         ((uintptr_t)p & (NIC_PAGE_SIZE - 1)) == 0 &&
         (uintptr_t)p - nic_control_base >= nic_control_size;
}

/* A zero-filled block of at least size bytes aligned to alignment (0 or a power of two), or
 * NULL when the address space or the kernel refuses it. */
void *nic_mapped_alloc(size_t size, size_t alignment);
/* The usable size of mapped block p, 0 when p does not start one. */
size_t nic_mapped_usable(const void *p);
/* Whether p lies inside a mapped block (for nic_hold, which takes any address of a block). */
bool nic_mapped_contains(const void *p);
/* Records offset block p of usable bytes inside base; false when the table cannot grow. */
bool nic_mapped_add(void *p, size_t usable, void *base);
/* Removes p from the table: returns its usable size (0 when p does not start a block of it)
 * and, for an offset block, its base, which the caller then frees; a mapping the caller gives
 * to nic_mapped_unmap. */
size_t nic_mapped_take(const void *p, void **base);
void nic_mapped_unmap(void *p, size_t len);
/* Moves or resizes mapping p to hold size bytes (mremap), keeping its contents; NULL, with p
 * unchanged, when the kernel refuses or p is an offset block. */
void *nic_mapped_resize(void *p, size_t size);
/* The live mappings (not offset blocks) and their bytes, for mallinfo. */
void nic_mapped_totals(size_t *blocks, size_t *bytes);

#endif
