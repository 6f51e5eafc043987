/* What every block nicmalloc hands out carries: word 1 is cleared on allocation and set to a
 * per-process random key on free (word 0 is mimalloc's free-list link). Finding the key again on
 * free makes the block a suspect, as glibc's tcache key does: user data can hold the key too (a
 * peer's bytes in a received buffer), so a match is confirmed before a free is refused
 * (alloc.c, mi_free_lists.h). The key keeps that confirmation off every other free. */
#ifndef NIC_BLOCK_H
#define NIC_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NIC_MIN_BLOCK 16 /* room for the key in word 1 */

/* Set once, at set-up, before the first block is allocated (free_key.c). */
extern uintptr_t nic_free_key_value __attribute__((visibility("hidden")));
static inline uintptr_t nic_free_key(void) {
  return __atomic_load_n(&nic_free_key_value, __ATOMIC_RELAXED);
}
/* With the key passed in: free's fast path loads it once for the test and the mark (an atomic
 * load is not merged with another). */
static inline void nic_block_set_word(void *p, uintptr_t value) {
  ((uintptr_t *)p)[1] = value;
}
static inline bool nic_block_holds(const void *p, uintptr_t key) {
  return ((const uintptr_t *)p)[1] == key;
}
static inline void nic_block_mark_live(void *p) {
  nic_block_set_word(p, 0);
}
static inline void nic_block_mark_free(void *p) {
  nic_block_set_word(p, nic_free_key());
}
static inline bool nic_block_is_free(const void *p) {
  return nic_block_holds(p, nic_free_key());
}
/* Every block starts 16-byte aligned (mimalloc's minimum; larger alignments are multiples), so a
 * pointer that is not cannot be one: free(p + 8) is caught here, on every path. An interior
 * pointer at a multiple of 16 is told only from mimalloc's page header, which the general path
 * reads (mi_free_lists.h, nic_mi_inside_block) and free's fast path does not. */
#define NIC_BLOCK_ALIGN 16
static inline bool nic_block_aligned(const void *p) {
  return ((uintptr_t)p & (NIC_BLOCK_ALIGN - 1)) == 0;
}
static inline size_t nic_block_request(size_t size) {
  return size < NIC_MIN_BLOCK ? NIC_MIN_BLOCK : size;
}

#endif
