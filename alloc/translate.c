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
  /* O(1) and side-effect free: a chunk not registered yet reports key 0 (nic_register makes
   * the registration). Arena memory never carries a remote key. */
  bool registered = __atomic_load_n(&c->registered, __ATOMIC_ACQUIRE);
  out->lkey = registered ? c->reg.lkey : 0;
  out->rkey = 0;
  out->backend_handle = registered ? c->reg.handle : 0;
  out->cache_slot = 0;
  return 0;
}
