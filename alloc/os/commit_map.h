/* Which 4 KiB pages of the control arena mimalloc has committed. mimalloc 2.0.9 (release build)
 * commits arena memory with mprotect(PROT_READ | PROT_WRITE) and decommits it with
 * madvise(MADV_DONTNEED); nicmalloc interposes both (alloc/os/interpose.c) and keeps two flags
 * per page. The free check then knows in a few instructions, without calling into mimalloc,
 * that the word it reads next to a pointer is readable and that mimalloc holds memory there.
 *   committed: made readable and not dropped since (MADV_DONTNEED clears it);
 *   readable:  mapped readable, dropped or not (only mprotect, munmap and mmap change it);
 *   held:      dropped by nicmalloc inside a mimalloc page in use, the free blocks over it held
 *              back (heap/control_sub_pages.h); mprotect and munmap clear it.
 * A page a program dropped itself inside a live block is readable but not committed: the free
 * check then asks mimalloc (nic_may_be_block). */
/* Not an instance of the page map (alloc/base/pagemap.h): this one is read on free's fast path,
 * where a radix walk would add two dependent loads to every free, and it covers one fixed range
 * known at start-up, so a flat table indexed by offset is one load. committed is one byte per
 * page, not one bit: free's fast path then tests it with a shift and a compare of memory (four
 * instructions, where extracting a bit took seven), for 1 GiB of read-only address space per
 * 4 TiB of arena instead of 128 MiB. readable, off the fast path, stays one bit per page. Both
 * share the page map's page size and its table mapping (read-only zeros, made writable a page at
 * a time). */
#ifndef NIC_COMMIT_MAP_H
#define NIC_COMMIT_MAP_H

#include "page.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nic_commit_map {
  uintptr_t base; /* the control arena, recorded from nic_commit_map_init on */
  size_t size;
  /* Bytes from base the free check trusts the map for: 0 until proven, and 0 under
   * NICMALLOC_FREE_CHECK=0 (no map is kept then). Free's fast path compares with the same span
   * in 16-byte units (fast_spans.h: NIC_FAST_CONTROL), and under NICMALLOC_FREE_CHECK=0 with the
   * arena's (NIC_FAST_UNCHECKED). */
  size_t checked;
  uint8_t *committed; /* one byte per page, 1 or 0; NULL when the table could not be reserved */
  uint64_t *readable; /* one bit per page */
  uint64_t *held;     /* one bit per page */
  /* Bytes from base below which every page mimalloc ever committed lies: the walks over the
   * arena's segments end there, not at its far end (4 TiB of it). */
  size_t high;
};
extern struct nic_commit_map nic_commit_map __attribute__((visibility("hidden")));

enum nic_page_change {
  NIC_PAGES_READABLE, /* mprotect with PROT_READ: committed and readable */
  NIC_PAGES_DROPPED,  /* MADV_DONTNEED: still readable (as zeros), no longer committed */
  NIC_PAGES_GONE,     /* munmap, a fixed mmap, mprotect without PROT_READ: neither */
};

/* Reserves the bits for [base, base + size) before mimalloc is given that memory. */
bool nic_commit_map_init(uintptr_t base, size_t size);
/* NICMALLOC_FREE_CHECK=0, in init's place: no map for [base, base + size), whose blocks free
 * releases unchecked once nic_commit_map_verify has seen mimalloc allocate there. */
void nic_commit_map_skip(uintptr_t base, size_t size);
/* Once mimalloc allocated from the arena: the map is trusted only if it saw that memory being
 * committed, which proves that mimalloc's calls reach nicmalloc's mprotect. Without a map
 * (nic_commit_map_skip), the block in the arena is the proof for free's unchecked path. */
void nic_commit_map_verify(const void *block);
/* Called by the interposed calls after they succeeded, for the pages of [addr, addr + len).
 * Ranges outside the arena are ignored. */
void nic_commit_map_note(const void *addr, size_t len, enum nic_page_change change);

static inline bool nic_commit_map_bit(const uint64_t *bits, uintptr_t offset) {
  const uintptr_t page = offset >> NIC_PAGE_SHIFT;
  return (__atomic_load_n(&bits[page / 64], __ATOMIC_RELAXED) >> (page % 64)) & 1;
}
/* offset: p - base, already known to be below checked. */
static inline bool nic_commit_map_has(uintptr_t offset) {
  return __atomic_load_n(&nic_commit_map.committed[offset >> NIC_PAGE_SHIFT], __ATOMIC_RELAXED);
}
/* units: (p - base) / 16, already known to be below checked / 16. */
static inline bool nic_commit_map_has_16(uintptr_t units) {
  return __atomic_load_n(&nic_commit_map.committed[units >> (NIC_PAGE_SHIFT - 4)],
                         __ATOMIC_RELAXED);
}
static inline bool nic_commit_map_readable(uintptr_t offset) {
  return nic_commit_map_bit(nic_commit_map.readable, offset);
}

/* The pages of [addr, addr + len) (in the arena, page aligned) are to be dropped with free
 * blocks held back over them: held from now on. False, with nothing set, when no map is kept or
 * the kernel refused a page of the table. */
bool nic_commit_map_hold(uintptr_t addr, size_t len);
/* Whether the page at addr (in the arena) is held. */
static inline bool nic_commit_map_held(uintptr_t addr) {
  return nic_commit_map_bit(nic_commit_map.held, addr - nic_commit_map.base);
}
/* The held pages of [addr, addr + len) are no longer: the mimalloc page over them was freed.
 * in_use: a page mimalloc built anew is there, so mimalloc holds that memory committed again
 * (writes fault it back in) and free's fast path may read it. */
void nic_commit_map_unhold(uintptr_t addr, size_t len, bool in_use);

#endif
