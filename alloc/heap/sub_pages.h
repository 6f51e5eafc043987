/* Giving back the 4 KiB pages that only free blocks cover, inside mimalloc pages still in use.
 *
 * After a random shrink most freed blocks lie in pages that keep a few live ones: mimalloc frees
 * no span there, so nothing is decommitted and step_pages.h gives nothing back. Here the owner
 * thread of a page (the one mimalloc itself changes its lists on: nic_collect and the nudge's
 * answer, nudge.h) reads the page's own free lists (free and local_free; the atomic list of
 * other threads' frees is left alone), finds the 4 KiB pages wholly covered by free blocks, takes
 * every block that overlaps one of them off those lists, and drops the pages (page_drop.h).
 * mimalloc then neither reads nor hands out memory there. Those blocks are counted in no list and
 * not in the page's used count: the page empties as its live blocks are freed, mimalloc frees it
 * and builds it anew, and its writes fault the pages back in.
 *
 * What has to stay true meanwhile:
 * - such a block freed again is a double free, though its key reads as zeros: a map of the 4 KiB
 *   pages given back, and the page's mark (its padding word, which mimalloc zeroes when it frees
 *   the page), say which blocks are held back; the slices holding them are off free's fast path
 *   (NIC_DP_SLICE_SUBPAGE, chunks.h);
 * - a registration that holds page references (step_pages.h) finds the pages in memory: it
 *   faults them in first, and no page is given back in its step while it lasts;
 * - pinned bytes are what is resident: a step with pages given back here is counted by mincore.
 * A segment another thread adopts keeps valid lists (only whole blocks left them) and its marks. */
#ifndef NIC_SUB_PAGES_H
#define NIC_SUB_PAGES_H

#include <stdbool.h>
#include <stddef.h>

/* On the owner thread, between two of mimalloc's calls: gives back the 4 KiB pages only free
 * blocks cover in its pages of chunk index. Returns the bytes given back. */
size_t nic_sub_pages_drop_owned(unsigned index);

/* p (in a mapped dataplane chunk, a slice with NIC_DP_SLICE_SUBPAGE) is a block held back here:
 * freed. Never faults. Out of line: only frees in such slices ask. */
bool nic_sub_pages_held_back(const void *p);

/* mimalloc decommitted [addr, addr + len) (slice aligned): no page in use is there, so nothing
 * is held back there any more. */
void nic_sub_pages_forget(void *addr, size_t len);
/* Chunk lock held: the step is to be registered with a backend that holds page references (or
 * is backed anew): faults in the pages given back in it (0 or -ENOMEM). */
int nic_sub_pages_refill_locked(unsigned index, unsigned step);
/* Whether pages of the step were given back here since it was backed: its pinned bytes are then
 * what mincore finds, not the step less step_pages' units. */
bool nic_sub_pages_touched(unsigned index, unsigned step);
/* The step was given back whole or backed anew. */
void nic_sub_pages_forget_step_locked(unsigned index, unsigned step);

#endif
