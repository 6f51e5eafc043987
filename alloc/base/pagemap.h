/* One page map for every per-page table of the runtime (SPDK mem_map style: one map type, many
 * instances). A map holds one entry of 1 to 64 bits (a power of two) per 4 KiB page of the 47-bit
 * user space, in a radix tree whose root (one pointer per GiB, 1 MiB of zero pages in .bss until
 * used) belongs to the instance:
 *   levels 2: root -> leaf per GiB (a bitmap's leaf is 32 KiB);
 *   levels 3: root -> middle table per GiB (512 pointers) -> leaf per 2 MiB (512 entries).
 * Tables are mapped on first use with compare-and-swap, so any thread may create them, and are
 * never freed, so a lookup is a few dependent acquire loads, takes no lock and is
 * async-signal-safe (a SIGSEGV handler may ask). Entries are the user's to read and write with
 * the atomics it needs; the map only finds them.
 *
 * An instance is a static const struct, so the accessors below fold its shape into constants:
 *   static void *root[NIC_PAGEMAP_ROOT_ENTRIES];
 *   static const struct nic_pagemap map = NIC_PAGEMAP(root, 3, 32);
 * Tables come from alloc/base/map.h, as those of maps that cannot be a radix do
 * (alloc/os/commit_map.c). Also here: the word runs of a bit range. */
#ifndef NIC_PAGEMAP_H
#define NIC_PAGEMAP_H

#include "page.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NIC_PAGEMAP_ROOT_SHIFT 30
#define NIC_PAGEMAP_MID_SHIFT 21
#define NIC_PAGEMAP_ROOT_ENTRIES ((size_t)1 << (NIC_USER_BITS - NIC_PAGEMAP_ROOT_SHIFT))
#define NIC_PAGEMAP_MID_ENTRIES ((size_t)1 << (NIC_PAGEMAP_ROOT_SHIFT - NIC_PAGEMAP_MID_SHIFT))

struct nic_pagemap {
  void **root; /* NIC_PAGEMAP_ROOT_ENTRIES pointers, zero until their GiB is used */
  unsigned char levels;
  unsigned char entry_bits;
};
#define NIC_PAGEMAP(root_, levels_, entry_bits_)                                                   \
  { .root = (root_), .levels = (levels_), .entry_bits = (entry_bits_) }

/* Address bits one leaf covers. */
static inline unsigned nic_pagemap_leaf_shift(const struct nic_pagemap *m) {
  return m->levels == 3 ? NIC_PAGEMAP_MID_SHIFT : NIC_PAGEMAP_ROOT_SHIFT;
}
static inline size_t nic_pagemap_leaf_bytes(const struct nic_pagemap *m) {
  return ((size_t)m->entry_bits << (nic_pagemap_leaf_shift(m) - NIC_PAGE_SHIFT)) / 8;
}
/* The entry number of a's page in its leaf. */
static inline size_t nic_pagemap_index(const struct nic_pagemap *m, uintptr_t a) {
  return (a >> NIC_PAGE_SHIFT) & (((size_t)1 << (nic_pagemap_leaf_shift(m) - NIC_PAGE_SHIFT)) - 1);
}

/* The leaf holding a's entry, or NULL when none was made (every entry there reads as zero).
 * *next is where this answer ends: the end of the leaf, or of the absent table that has no leaf,
 * so that a walk over a range skips what is absent in one step. */
static inline void *nic_pagemap_span(const struct nic_pagemap *m, uintptr_t a, uintptr_t *next) {
  if (a >> NIC_USER_BITS) {
    *next = UINTPTR_MAX;
    return NULL;
  }
  void *t = __atomic_load_n(&m->root[a >> NIC_PAGEMAP_ROOT_SHIFT], __ATOMIC_ACQUIRE);
  if (m->levels == 3 && t) {
    *next = ((a >> NIC_PAGEMAP_MID_SHIFT) + 1) << NIC_PAGEMAP_MID_SHIFT;
    return __atomic_load_n(
        &((void **)t)[(a >> NIC_PAGEMAP_MID_SHIFT) & (NIC_PAGEMAP_MID_ENTRIES - 1)],
        __ATOMIC_ACQUIRE);
  }
  *next = ((a >> NIC_PAGEMAP_ROOT_SHIFT) + 1) << NIC_PAGEMAP_ROOT_SHIFT;
  return t;
}

static inline void *nic_pagemap_leaf(const struct nic_pagemap *m, uintptr_t a) {
  if (a >> NIC_USER_BITS) return NULL;
  void *t = __atomic_load_n(&m->root[a >> NIC_PAGEMAP_ROOT_SHIFT], __ATOMIC_ACQUIRE);
  if (m->levels == 3 && t)
    t = __atomic_load_n(&((void **)t)[(a >> NIC_PAGEMAP_MID_SHIFT) & (NIC_PAGEMAP_MID_ENTRIES - 1)],
                        __ATOMIC_ACQUIRE);
  return t;
}

/* The entry of a's page, or NULL when its leaf does not exist (for 8 to 64-bit entries). */
static inline uint32_t *nic_pagemap_u32(const struct nic_pagemap *m, uintptr_t a) {
  uint32_t *leaf = (uint32_t *)nic_pagemap_leaf(m, a);
  return leaf ? &leaf[nic_pagemap_index(m, a)] : NULL;
}
static inline uint64_t *nic_pagemap_u64(const struct nic_pagemap *m, uintptr_t a) {
  uint64_t *leaf = (uint64_t *)nic_pagemap_leaf(m, a);
  return leaf ? &leaf[nic_pagemap_index(m, a)] : NULL;
}
/* A bitmap's bit for a's page (acquire). */
static inline bool nic_pagemap_bit(const struct nic_pagemap *m, uintptr_t a) {
  const uint64_t *leaf = (const uint64_t *)nic_pagemap_leaf(m, a);
  if (!leaf) return false;
  const size_t i = nic_pagemap_index(m, a);
  return (__atomic_load_n(&leaf[i / 64], __ATOMIC_ACQUIRE) >> (i % 64)) & 1;
}

/* The leaf for a, made (with its middle table) when missing; NULL when a is outside the user
 * space or no memory could be mapped. Two threads may race: both get the winner's table. */
void *nic_pagemap_make(const struct nic_pagemap *m, uintptr_t a);
/* Makes every leaf [start, end) needs, so that the entries can then be written without a
 * failure half way. False (entries unchanged) when the range is empty, outside the user space,
 * or a table could not be mapped. Inline: in-flight counts reserve on every post, and their
 * leaves are there already. */
static inline bool nic_pagemap_reserve(const struct nic_pagemap *m, uintptr_t start,
                                       uintptr_t end) {
  if (end <= start || end > NIC_USER_END) return false;
  const uintptr_t leaf = (uintptr_t)1 << nic_pagemap_leaf_shift(m);
  for (uintptr_t a = start & ~(leaf - 1); a < end; a += leaf)
    if (!nic_pagemap_leaf(m, a) && !nic_pagemap_make(m, a)) return false;
  return true;
}
/* A bitmap: sets or clears the bits of the pages touching [start, end) in the leaves that exist
 * (absent leaves read as clear already; reserve first to set). One atomic per word. */
void nic_pagemap_bits(const struct nic_pagemap *m, uintptr_t start, uintptr_t end, bool on);

/* Bit i of a plain bitmap (one the caller alone writes). */
static inline bool nic_bit_test(const uint64_t *bits, size_t i) {
  return bits[i >> 6] >> (i & 63) & 1;
}

/* The run of bits [bit, bit + left) falls in the word of bit: its mask there, and how many of
 * them it holds. */
static inline uint64_t nic_bits_run(size_t bit, size_t left, size_t *n) {
  const unsigned first = bit % 64;
  *n = left < 64 - first ? left : 64 - first;
  return (*n == 64 ? ~(uint64_t)0 : (((uint64_t)1 << *n) - 1)) << first;
}

#endif
