/* Pointer to registration, O(1): a range compare, a shift, and the chunk's entry. */
#include "chunks.h"
#include "nicmalloc.h"

#define NIC_EXPORT __attribute__((visibility("default")))

NIC_EXPORT int nic_translate(const void *p, size_t len, struct nic_region_ref *out) {
  uintptr_t start = (uintptr_t)p, last;
  if (len == 0 || __builtin_add_overflow(start, len - 1, &last)) return -NIC_ERANGE;
  if (!nic_in_dp(p)) return -NIC_ENOTDP;
  unsigned index = nic_chunk_index(p);
  const struct nic_chunk *c = nic_chunk_at(index);
  if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != NIC_CHUNK_LIVE) return -NIC_ENOTDP;
  uintptr_t base = (uintptr_t)nic_chunk_base(index);
  size_t size = (size_t)1 << nic_dp.shift;
  if (last - base >= size) return -NIC_ECROSS;
  out->kind = NIC_REGION_ARENA;
  out->chunk_index = index;
  out->region_base = (void *)base;
  out->region_len = size;
  out->offset = start - base;
  out->lkey = c->lkey;
  out->rkey = c->rkey;
  out->backend_handle = c->backend_handle;
  return 0;
}
