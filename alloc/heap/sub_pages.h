/* Giving back the 4 KiB pages that only free blocks cover, inside dataplane pages still in use.
 *
 * After a random shrink most freed blocks lie in pages that keep a few live ones: mimalloc frees
 * no span there, so nothing is decommitted and step_pages.h gives nothing back. Here the owner
 * thread of a page (nic_collect and the nudge's answer, nudge.h) takes the blocks over such pages
 * off its lists and drops the pages (sub_pages_scan.h: the pass, the mark, what holds meanwhile).
 *
 * What the dataplane adds:
 * - a map of the 4 KiB pages given back, one bit each over the dataplane range, and the slices
 *   holding such blocks are off free's fast path (NIC_DP_SLICE_SUBPAGE, chunks.h), so a block
 *   freed again is told a double free though its key reads as zeros;
 * - a registration that holds page references (step_pages.h) finds the pages in memory: it
 *   faults them in first, and no page is given back in its step while it lasts;
 * - pinned bytes are what is resident: a step with pages given back here is counted by mincore. */
#ifndef NIC_SUB_PAGES_H
#define NIC_SUB_PAGES_H

#include <stdbool.h>
#include <stddef.h>

struct nic_sub_pages_cursor;

/* On the owner thread, between two of mimalloc's calls: gives back the 4 KiB pages only free
 * blocks cover in its pages of chunk index, all of them, or with a cursor (sub_pages_scan.h) as
 * far as its budget goes. Returns the bytes given back. */
size_t nic_sub_pages_drop_owned(unsigned index, struct nic_sub_pages_cursor *cursor);

/* p (in a mapped dataplane chunk, a slice with NIC_DP_SLICE_SUBPAGE) is a block held back here:
 * freed. Never faults. Out of line: only frees in such slices ask. */
bool nic_sub_pages_held_back(const void *p);

/* mimalloc decommitted [addr, addr + len) (slice aligned): no page in use is there, so nothing
 * is held back there any more. */
void nic_sub_pages_forget(void *addr, size_t len);
/* Chunk lock held: the step is to be registered with a backend that holds page references (or
 * is backed anew): faults in the pages given back in it (0 or -ENOMEM), but those a post
 * write-protects (sub_pages_scan.h's guard), which are in memory. */
int nic_sub_pages_refill_locked(unsigned index, unsigned step);
/* Whether pages of the step were given back here since it was backed: its pinned bytes are then
 * what mincore finds, not the step less step_pages' units. */
bool nic_sub_pages_touched(unsigned index, unsigned step);
/* The step was given back whole or backed anew. */
void nic_sub_pages_forget_step_locked(unsigned index, unsigned step);

#endif
