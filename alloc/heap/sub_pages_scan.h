/* The owner thread's pass over its mimalloc pages that finds the 4 KiB pages only free blocks
 * cover and takes the blocks over them off the page's own free lists (free and local_free; the
 * atomic list of other threads' frees is left alone), so that mimalloc neither reads nor hands
 * out memory there and the pages can go. Those blocks are counted in no list and not in the
 * page's used count: the page empties as its live blocks are freed, mimalloc frees it and builds
 * it anew, and its writes fault the pages back in. The page carries a mark meanwhile (its padding
 * word, which mimalloc zeroes when it frees the page): with the area's own map of the pages
 * given back, it says which blocks are held back, so that freeing one again is a double free.
 * A segment another thread adopts keeps valid lists (only whole blocks left them) and its marks.
 *
 * Two areas use it, each with its own map and its own way to let pages go: dataplane chunks
 * (sub_pages.h: pinned steps, registrations that hold pages) and the control arena
 * (control_sub_pages.h: malloc_trim). */
#ifndef NIC_SUB_PAGES_SCAN_H
#define NIC_SUB_PAGES_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nic_sub_pages_area {
  /* The page at header carries no mark: what the area recorded for [span, span + len) is from
   * a page mimalloc freed since, and stale. */
  void (*forget)(uintptr_t header, uintptr_t span, size_t len);
  /* Before blocks leave the lists of [lo, hi): whether its pages may go now (false leaves the
   * page as it is). No lock of the area is held from here on while the pass writes blocks: a
   * write into a page write-protected for a DMA in flight (NICMALLOC_FENCE=protect) waits for
   * the completion, and the completion may need that lock. */
  bool (*begin)(uintptr_t lo, uintptr_t hi);
  /* The 4 KiB page at a is to go: recorded before the blocks over it, [from, to), leave the
   * lists (a free that reads zeros there asks the map). False: it could not be, and the page
   * stays, its blocks with it. */
  bool (*hold)(uintptr_t a, uintptr_t from, uintptr_t to);
  /* Drops the 4 KiB pages set in drop (bit i: the page at lo + i * 4 KiB) if they may still go
   * (else their blocks stay held back over pages in memory); returns the bytes dropped. */
  size_t (*drop)(uintptr_t lo, const uint64_t *drop, size_t pages);
  /* The 4 KiB page at a was given back by an earlier pass over a page that carries the mark. */
  bool (*held)(uintptr_t a);
};

/* Set once by the layer that write-protects pages for DMA in flight (NICMALLOC_FENCE=protect):
 * begin is false when a page of [start, end) is protected now, else no page of it will be until
 * end. A pass rewrites a page's lists only between the two, and passes over it otherwise; a
 * registration's refill of the pages given back (sub_pages.h) faults in none it refuses. */
struct nic_sub_pages_guard {
  bool (*begin)(uintptr_t start, uintptr_t end);
  void (*end)(uintptr_t start, uintptr_t end);
};
void nic_sub_pages_guard_set(const struct nic_sub_pages_guard *g);
const struct nic_sub_pages_guard *nic_sub_pages_guard(void); /* NULL: none set */

/* A pass spread over several calls: where it goes on, and how much one call may read. A pass
 * run for another thread's sake (the nudge's answers, malloc_trim's asks: nudge.c) runs inside
 * one of the program's own allocations, and reading every free list of a large heap took
 * 100 ms there. */
struct nic_sub_pages_cursor {
  uintptr_t next; /* the span to go on from (0: the first); later spans only */
  size_t budget;  /* free-list blocks the call may still read; a page is read whole */
  bool stopped;   /* set when the budget ran out: next is where */
};

struct nic_sub_pages_walk {
  const struct nic_sub_pages_area *area;
  struct nic_sub_pages_cursor *cursor; /* NULL: the whole pass at once */
};

/* For nic_mi_each_owned_segment*: each span of an owned segment, walk the struct above. Returns
 * the bytes given back. On the owner thread, between two of mimalloc's calls. */
size_t nic_sub_pages_pass_segment(uintptr_t segment, void *walk);

struct nic_mi_page;
/* The page holding p, found as mimalloc's free finds it (mi_free_lists.h): 1 if it carries the
 * mark, 0 if not, -1 when p is not in a page in use or its header cannot be read. */
int nic_sub_pages_page_of(const void *p, struct nic_mi_page *v);

/* p lies in a page mimalloc freed and built anew since a pass gave back pages under it (no
 * mark): the area forgets what it recorded there, on any thread (the page, claimed meanwhile, is
 * left alone by a pass of its owner). False when p's page carries the mark, is not in use, or is
 * being changed by another thread. */
bool nic_sub_pages_forget_rebuilt(const void *p, const struct nic_sub_pages_area *area);

/* Whether the block holding p is held back: its page, found as mimalloc's free finds it, carries
 * the mark, and held(a) says of one of the 4 KiB pages the block overlaps that it went. Never
 * faults. */
bool nic_sub_pages_block_held(const void *p, bool (*held)(uintptr_t a));

#endif
