/* Giving back the 4 KiB pages that only free blocks cover inside the control heap's mimalloc
 * pages still in use: malloc_trim's share of what glibc's gives back inside its arenas.
 *
 * mimalloc frees a page only when its last block goes, so after a program frees most of its
 * blocks at random every page keeps a few and nothing is decommitted (bench/frag: 0% returned,
 * where glibc's malloc_trim returns 66-105%). The pass of sub_pages_scan.h, on the calling
 * thread's own segments of the control arena (mimalloc changes a page's lists on its owner thread
 * only), takes the blocks over such pages off the lists and drops the pages. Other threads'
 * pages stay as they are until they trim or exit.
 *
 * What the control heap adds: the commit map (commit_map.h) holds the pages given back (held) and
 * no longer counts them committed, so a free there leaves free's fast path, and a free of a
 * block held back with its pages is told a double free (nic_control_sub_pages_held_back), though
 * its key reads as zeros or lies, intact, on a page still in memory. The drop is published as a
 * program's madvise would be (events.h: pages_leaving), so no registration over those pages
 * stays cached. Only where the commit map is trusted (not under NICMALLOC_FREE_CHECK=0). */
#ifndef NIC_CONTROL_SUB_PAGES_H
#define NIC_CONTROL_SUB_PAGES_H

#include <stdbool.h>
#include <stddef.h>

struct nic_sub_pages_cursor;

/* On the calling thread, between two of mimalloc's calls: gives back the 4 KiB pages only free
 * blocks cover in its control pages, all of them, or with a cursor (sub_pages_scan.h) as far as
 * its budget goes. Returns the bytes given back. */
size_t nic_control_sub_pages_drop_owned(struct nic_sub_pages_cursor *cursor);

/* The calling thread's share of malloc_trim, the owner's work on its control segments once its
 * control heap was collected (other threads' frees on the lists the pass reads, emptied pages
 * freed): the spans mimalloc only marked decommitted (mi_decommit.h), and the free 4 KiB pages
 * inside its pages in use given back. Returns the bytes of the last. */
size_t nic_control_trim_owned(void);

/* p (in the control arena) is a block held back here: freed. Never faults. Out of line: only a
 * free whose key matched, or whose page is not committed, asks. */
bool nic_control_sub_pages_held_back(const void *p);

/* p (in the control arena) lies on a page the commit map does not count committed. If that is
 * a page given back here under a page mimalloc has since freed and built anew (no mark: its
 * blocks are new), the map counts it committed again, so that frees there take the fast path
 * again. On any thread (sub_pages_scan.h: the page is claimed meanwhile). */
void nic_control_sub_pages_note_rebuilt(const void *p);

#endif
