/* The usable size of a small block, known from the request alone. The dataplane fast path
 * counts every block's usable bytes into its chunk's live total (the reaper's "empty" test and
 * the stats); asking mimalloc (mi_usable_size: a segment and a page lookup, ~28 instructions)
 * right after it handed the block out was a tenth of a dataplane malloc/free pair. */
#ifndef NIC_SMALL_USABLE_H
#define NIC_SMALL_USABLE_H

#include <mimalloc.h>
#include <stddef.h>
#include <stdint.h>

#define NIC_SMALL_USABLE_MAX 1024

/* Indexed by (size + 7) / 8; 0 where not known, and everywhere until nic_small_usable_init. */
extern uint32_t nic_small_usable[NIC_SMALL_USABLE_MAX / 8 + 1]
    __attribute__((visibility("hidden")));

/* Fills the table from mi_good_size, keeping only entries a real allocation confirms. */

/* p is a block mimalloc just returned for size. */
static inline size_t nic_usable_of_new(const void *p, size_t size) {
  if (size <= NIC_SMALL_USABLE_MAX) {
    uint32_t usable = nic_small_usable[(size + 7) >> 3];
    if (__builtin_expect(usable != 0, 1)) return usable;
  }
  return mi_usable_size(p);
}

#endif
