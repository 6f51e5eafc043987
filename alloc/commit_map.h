/* Which 4 KiB pages of the control arena mimalloc has committed. mimalloc 2.0.9 (release build)
 * commits arena memory with mprotect(PROT_READ | PROT_WRITE) and decommits it with
 * madvise(MADV_DONTNEED); nicmalloc interposes both (regcache/interpose.c) and keeps one bit
 * per page. The free check then knows in a few instructions, without calling into mimalloc,
 * that the word it reads next to a pointer is readable and that mimalloc holds memory there. */
#ifndef NIC_COMMIT_MAP_H
#define NIC_COMMIT_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NIC_COMMIT_PAGE_SHIFT 12

struct nic_commit_map {
  uintptr_t base; /* the control arena, recorded from nic_commit_map_init on */
  size_t size;
  size_t checked; /* bytes from base the free check trusts the map for: 0 until it is proven */
  uint64_t *bits; /* one bit per page; NULL when it could not be reserved */
};
extern struct nic_commit_map nic_commit_map __attribute__((visibility("hidden")));

/* Reserves the bits for [base, base + size) before mimalloc is given that memory. */
bool nic_commit_map_init(uintptr_t base, size_t size);
/* Once mimalloc allocated from the arena: the map is trusted only if it saw that memory being
 * committed, which proves that mimalloc's calls reach nicmalloc's mprotect. */
void nic_commit_map_verify(const void *block);
/* Called by the interposed mprotect, madvise, munmap and fixed mmap after they succeeded: the
 * pages of [addr, addr + len) are now committed or not. Ranges outside the arena are ignored. */
void nic_commit_map_note(const void *addr, size_t len, bool committed);

/* offset: p - base, already known to be below checked. */
static inline bool nic_commit_map_has(uintptr_t offset) {
  const uintptr_t page = offset >> NIC_COMMIT_PAGE_SHIFT;
  return (__atomic_load_n(&nic_commit_map.bits[page / 64], __ATOMIC_RELAXED) >> (page % 64)) & 1;
}

#endif
