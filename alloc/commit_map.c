#define _GNU_SOURCE
#include "commit_map.h"

#include <sys/mman.h>

struct nic_commit_map nic_commit_map;

bool nic_commit_map_init(uintptr_t base, size_t size) {
  const size_t words = ((size >> NIC_COMMIT_PAGE_SHIFT) + 63) / 64;
  /* 64 KiB of bits per GiB of arena; untouched parts read as zero and cost no memory. */
  uint64_t *bits = mmap(NULL, 2 * words * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (bits == MAP_FAILED) return false;
  nic_commit_map.committed = bits;
  nic_commit_map.readable = bits + words;
  nic_commit_map.base = base;
  __atomic_store_n(&nic_commit_map.size, size, __ATOMIC_RELEASE);
  return true;
}

void nic_commit_map_verify(const void *block) {
  const uintptr_t offset = (uintptr_t)block - nic_commit_map.base;
  if (nic_commit_map.committed && offset < nic_commit_map.size && nic_commit_map_has(offset) &&
      nic_commit_map_readable(offset))
    __atomic_store_n(&nic_commit_map.checked, nic_commit_map.size, __ATOMIC_RELEASE);
}

static void set_bits(uint64_t *bits, uintptr_t first, uintptr_t last, bool on) {
  for (uintptr_t page = first; page < last;) {
    const unsigned bit = page % 64;
    const uintptr_t n = last - page < 64 - bit ? last - page : 64 - bit;
    const uint64_t mask = (n == 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1)) << bit;
    if (on)
      __atomic_fetch_or(&bits[page / 64], mask, __ATOMIC_RELEASE);
    else
      __atomic_fetch_and(&bits[page / 64], ~mask, __ATOMIC_RELEASE);
    page += n;
  }
}

void nic_commit_map_note(const void *addr, size_t len, enum nic_page_change change) {
  const size_t size = __atomic_load_n(&nic_commit_map.size, __ATOMIC_ACQUIRE);
  const uintptr_t start = (uintptr_t)addr, end = start + len;
  if (!size || end <= start || end <= nic_commit_map.base || start >= nic_commit_map.base + size)
    return;
  const uintptr_t lo = start > nic_commit_map.base ? start - nic_commit_map.base : 0;
  const uintptr_t hi = end - nic_commit_map.base < size ? end - nic_commit_map.base : size;
  const uintptr_t page_mask = ((uintptr_t)1 << NIC_COMMIT_PAGE_SHIFT) - 1;
  /* Whole pages, rounded out as the kernel rounds the calls that report here. */
  const uintptr_t first = lo >> NIC_COMMIT_PAGE_SHIFT;
  const uintptr_t last = (hi + page_mask) >> NIC_COMMIT_PAGE_SHIFT; /* exclusive */
  set_bits(nic_commit_map.committed, first, last, change == NIC_PAGES_READABLE);
  if (change != NIC_PAGES_DROPPED)
    set_bits(nic_commit_map.readable, first, last, change == NIC_PAGES_READABLE);
}
