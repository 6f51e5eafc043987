/* Whether mimalloc holds a block as free, from its own lists: the confirmation a free key match
 * (block.h) needs before a free is refused. mimalloc 2.0.9 exports no such answer, so this reads
 * its page and heap headers with 2.0.9's layout (x86-64 release build, free lists not encoded),
 * which nic_mi_free_lists_init checks once against real blocks; where the check fails nothing is
 * confirmed and the answer is NIC_MI_UNKNOWN. Only a key match pays for the walk. */
#ifndef NIC_MI_FREE_LISTS_H
#define NIC_MI_FREE_LISTS_H

#include <stdbool.h>
#include <stdint.h>

enum nic_mi_block_state {
  NIC_MI_LIVE,    /* on none of the lists its page and heap keep */
  NIC_MI_FREE,    /* on one of them, or its page holds no blocks any more */
  NIC_MI_UNKNOWN, /* the headers could not be read, or the layout is not the one expected */
};

/* After the control arena is set up: it allocates and frees a few blocks. */

/* p passed the free check's pointer tests (nic_may_be_block). Never faults: every word it reads
 * is first known to be mapped readable, links are followed only to blocks of the page (or, on
 * the heap's delayed list, to readable memory) and for at most as many steps as the page has
 * blocks. The lists of the calling thread's own pages hold still under the walk; another
 * thread's can change, and a block it allocates or frees meanwhile can then be missed or found,
 * which only a double free racing with that thread can run into. */
enum nic_mi_block_state nic_mi_block_state(const void *p);

/* A mimalloc page. in_use false: a free span, and nothing else is set but header. Blocks run
 * from start to end (capacity of block_size bytes). */
struct nic_mi_page {
  uintptr_t header, start, end, block_size, capacity;
  bool in_use;
  bool has_aligned; /* an aligned allocation here handed out a pointer inside its block */
};
/* The page whose span starts at slice entry page_index of segment, slice_count slices long: as a
 * walk of the segment's spans from its first slice finds it (the only entries 2.0.9 keeps true
 * for freed memory). False when the headers cannot be read or their layout is not 2.0.9's. */
bool nic_mi_page_at(uintptr_t segment, uintptr_t page_index, uint32_t slice_count,
                    struct nic_mi_page *out);
/* The same in one step, as mimalloc's own free finds a block's page: from p's slice entry's
 * offset back to its page. True only for a pointer into a page in use (2.0.9 keeps the offsets
 * of a freed span's inner slices stale); the answer is then a page whose span covers p, which
 * for p in a page in use is that page. Never faults. */
bool nic_mi_page_by_offset(const void *p, struct nic_mi_page *out);

/* Whether p, which passed the free check's pointer tests (nic_may_be_block), lies where mimalloc
 * holds memory but no pointer it handed out can be: inside a block of a page in use but not at
 * its start, nor where an aligned allocation in that block could have started (on a page mimalloc
 * marked for them, the first multiple of some power of two dividing p at or after the block's
 * start); in a page in use but before its first block or past its last; past the first 32 MiB of
 * a huge segment. *block is then the block's start, or 0 where no block or no start is known.
 * False when p may be such a pointer, or when the headers cannot tell (p in no page in use, a
 * layout not 2.0.9's): only a sure answer refuses a free. Never faults; reads the headers
 * mimalloc's own free reads. */
bool nic_mi_inside_block(const void *p, uintptr_t *block);

/* Reads the word at a (8-aligned) without ever faulting: directly where the control arena's
 * commit map or a mapped dataplane chunk vouches for it, else copied by the kernel. False when
 * it cannot be read. */
bool nic_mi_load_word(uintptr_t a, uintptr_t *out);

#endif
