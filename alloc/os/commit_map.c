#define _GNU_SOURCE
#include "commit_map.h"

#include "fast_spans.h"
#include "map.h"
#include "pagemap.h"

#include <sys/mman.h>

struct nic_commit_map nic_commit_map;

/* The tables are mapped read-only (zeros, no commit charge even under strict overcommit: about
 * 1.1 GiB for a 4 TiB arena) and each 4 KiB of them is made writable when an entry in it is
 * first set; one flag per such page says whether it is. The committed bytes come first, then
 * the readable bits, then the held bits. */
static uint64_t *writable_flags;
static uintptr_t bits_start;

bool nic_commit_map_init(uintptr_t base, size_t size) {
  const size_t pages = size >> NIC_PAGE_SHIFT;
  const size_t byte_bytes = nic_page_up(pages);
  const size_t bit_bytes = nic_page_up((pages + 63) / 64 * sizeof(uint64_t));
  const size_t table_bytes = byte_bytes + 2 * bit_bytes;
  const size_t flag_bytes = nic_page_up((table_bytes / NIC_PAGE_SIZE + 63) / 64 * sizeof(uint64_t));
  char *region = nic_map_anon(flag_bytes + table_bytes, PROT_READ, true);
  if (!region) return false;
  if (!nic_map_writable(region, flag_bytes)) {
    nic_unmap(region, flag_bytes + table_bytes);
    return false;
  }
  writable_flags = (uint64_t *)region;
  bits_start = (uintptr_t)region + flag_bytes;
  nic_commit_map.committed = (uint8_t *)bits_start;
  nic_commit_map.readable = (uint64_t *)(bits_start + byte_bytes);
  nic_commit_map.held = (uint64_t *)(bits_start + byte_bytes + bit_bytes);
  nic_commit_map.base = base;
  __atomic_store_n(&nic_commit_map.size, size, __ATOMIC_RELEASE);
  return true;
}

static size_t skipped_size; /* nic_commit_map_skip's, until verified */

void nic_commit_map_skip(uintptr_t base, size_t size) {
  nic_commit_map.base = base;
  skipped_size = size;
}

void nic_commit_map_verify(const void *block) {
  const uintptr_t offset = (uintptr_t)block - nic_commit_map.base;
  if (!nic_commit_map.committed) {
    if (skipped_size && offset < skipped_size)
      nic_fast_span_set(NIC_FAST_UNCHECKED, skipped_size / 16);
    return;
  }
  if (offset < nic_commit_map.size && nic_commit_map_has(offset) &&
      nic_commit_map_readable(offset)) {
    nic_fast_span_set(NIC_FAST_CONTROL, nic_commit_map.size / 16);
    __atomic_store_n(&nic_commit_map.checked, nic_commit_map.size, __ATOMIC_RELEASE);
  }
}

/* Whether the table entry at word can be written; with make, makes it so (false only if the
 * kernel refused). */
static bool word_writable(void *word, bool make) {
  const uintptr_t page = ((uintptr_t)word - bits_start) / NIC_PAGE_SIZE;
  const uint64_t flag = (uint64_t)1 << (page % 64);
  if (__atomic_load_n(&writable_flags[page / 64], __ATOMIC_ACQUIRE) & flag) return true;
  if (!make) return false; /* a read-only page of bits holds only zeros */
  if (!nic_map_writable((void *)(bits_start + page * NIC_PAGE_SIZE), NIC_PAGE_SIZE)) return false;
  __atomic_fetch_or(&writable_flags[page / 64], flag, __ATOMIC_RELEASE);
  return true;
}

/* The kernel refused a page of the table: stop trusting the map, frees ask mimalloc again. */
static void distrust(void) {
  nic_fast_span_set(NIC_FAST_CONTROL, 0);
  __atomic_store_n(&nic_commit_map.checked, 0, __ATOMIC_RELEASE);
}

/* Byte stores, one at a time: another thread may note a neighbouring page at the same moment. */
static void set_bytes(uint8_t *bytes, uintptr_t first, uintptr_t last, bool on) {
  for (uintptr_t page = first; page < last;) {
    /* to the end of this page of the table, or of the range */
    const uintptr_t table_end = nic_page_up((uintptr_t)&bytes[page] + 1) - (uintptr_t)bytes;
    const uintptr_t end = table_end < last ? table_end : last;
    if (!word_writable(&bytes[page], on)) {
      if (on) distrust();
      page = end;
      continue;
    }
    for (; page < end; page++)
      __atomic_store_n(&bytes[page], (uint8_t)on, __ATOMIC_RELEASE);
  }
}

/* False when a page of the table could not be made writable for bits to be set. */
static bool set_bits(uint64_t *bits, uintptr_t first, uintptr_t last, bool on) {
  bool all = true;
  for (uintptr_t page = first; page < last;) {
    size_t n;
    const uint64_t mask = nic_bits_run(page, last - page, &n);
    uint64_t *word = &bits[page / 64];
    page += n;
    if (!word_writable(word, on)) {
      if (on) all = false;
      continue;
    }
    if (on)
      __atomic_fetch_or(word, mask, __ATOMIC_RELEASE);
    else
      __atomic_fetch_and(word, ~mask, __ATOMIC_RELEASE);
  }
  return all;
}

/* Whether any page was ever held: until then nobody pays for clearing held bits. */
static bool held_ever;

void nic_commit_map_note(const void *addr, size_t len, enum nic_page_change change) {
  const size_t size = __atomic_load_n(&nic_commit_map.size, __ATOMIC_ACQUIRE);
  const uintptr_t start = (uintptr_t)addr, end = start + len;
  if (!size || end <= start || end <= nic_commit_map.base || start >= nic_commit_map.base + size)
    return;
  const uintptr_t lo = start > nic_commit_map.base ? start - nic_commit_map.base : 0;
  const uintptr_t hi = end - nic_commit_map.base < size ? end - nic_commit_map.base : size;
  /* Whole pages, rounded out as the kernel rounds the calls that report here. */
  const uintptr_t first = lo >> NIC_PAGE_SHIFT;
  const uintptr_t last = nic_page_up(hi) >> NIC_PAGE_SHIFT; /* exclusive */
  set_bytes(nic_commit_map.committed, first, last, change == NIC_PAGES_READABLE);
  if (change == NIC_PAGES_READABLE) {
    size_t high = __atomic_load_n(&nic_commit_map.high, __ATOMIC_RELAXED);
    while (high < hi && !__atomic_compare_exchange_n(&nic_commit_map.high, &high, hi, true,
                                                     __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
    }
  }
  if (change != NIC_PAGES_DROPPED) {
    if (!set_bits(nic_commit_map.readable, first, last, change == NIC_PAGES_READABLE)) distrust();
    /* mimalloc commits a span only after it freed the page over it; and an unmapped page holds
     * nothing. A drop changes nothing: nicmalloc's own holds one. */
    if (__atomic_load_n(&held_ever, __ATOMIC_RELAXED))
      set_bits(nic_commit_map.held, first, last, false);
  }
}

bool nic_commit_map_hold(uintptr_t addr, size_t len) {
  if (!nic_commit_map.held || !__atomic_load_n(&nic_commit_map.checked, __ATOMIC_ACQUIRE))
    return false;
  const uintptr_t first = (addr - nic_commit_map.base) >> NIC_PAGE_SHIFT;
  const uintptr_t last = first + (len >> NIC_PAGE_SHIFT);
  __atomic_store_n(&held_ever, true, __ATOMIC_RELAXED);
  if (set_bits(nic_commit_map.held, first, last, true)) return true;
  set_bits(nic_commit_map.held, first, last, false);
  return false;
}

void nic_commit_map_unhold(uintptr_t addr, size_t len, bool in_use) {
  if (!__atomic_load_n(&held_ever, __ATOMIC_RELAXED)) return;
  const uintptr_t first = (addr - nic_commit_map.base) >> NIC_PAGE_SHIFT;
  const uintptr_t last = first + (len >> NIC_PAGE_SHIFT);
  for (uintptr_t page = first; page < last; page++) {
    if (!__atomic_load_n(&nic_commit_map.held[page / 64], __ATOMIC_RELAXED)) {
      page |= 63; /* none of this word's pages */
      continue;
    }
    if (!nic_commit_map_bit(nic_commit_map.held, page << NIC_PAGE_SHIFT)) continue;
    set_bits(nic_commit_map.held, page, page + 1, false);
    if (in_use && nic_commit_map_bit(nic_commit_map.readable, page << NIC_PAGE_SHIFT))
      set_bytes(nic_commit_map.committed, page, page + 1, true);
  }
}
