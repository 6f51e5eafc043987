/* Pointer to registration, O(1): a range compare, a shift to the chunk, a shift to its step, and
 * the step's entry. */
#include "api_errors.h"
#include "chunk_reg.h"
#include "chunks.h"
#include "export.h"
#include "log.h"
#include "nicmalloc.h"

#include <errno.h>

static inline bool bad_range(uintptr_t start, size_t len) {
  uintptr_t last;
  return len == 0 || __builtin_add_overflow(start, len - 1, &last);
}

/* Sorts out why a range in the dataplane failed the combined check below, in the order callers
 * rely on: a bad range, then memory outside mapped chunks, then a range crossing a step end
 * (each step is its own registration: a range across two would need two keys). */
__attribute__((noinline, cold)) static int translate_error(uintptr_t start, size_t len) {
  if (bad_range(start, len)) return -NIC_ERANGE;
  if (!nic_chunk_readable(nic_chunk_index((const void *)start))) return -NIC_ENOTDP;
  return -NIC_ECROSS;
}

/* A NULL result pointer is the caller's bug: reported, not followed. */
__attribute__((noinline, cold)) static int no_output(const void *p) {
  nic_api_error(registration, "nic_translate(%p): the result pointer is NULL; nothing done", p);
  return -EINVAL;
}

NIC_EXPORT int nic_translate(const void *p, size_t len, struct nic_region_ref *out) {
  const size_t span = nic_dp_reserved_span(); /* first: nic_in_dp says why */
  const uintptr_t start = (uintptr_t)p, off = start - nic_dp.base;
  const size_t size = (size_t)1 << nic_dp.step_shift, in_step = off & (size - 1);
  if (__builtin_expect(!out, 0)) return no_output(p);
  /* One test for the common case: inside the range, and len - 1 (huge when len is 0) within
   * what is left of the step. Steps are aligned to their size, so no base is looked up. */
  if (off >= span) return bad_range(start, len) ? -NIC_ERANGE : -NIC_ENOTDP;
  if (__builtin_expect(len - 1 >= size - in_step, 0)) return translate_error(start, len);
  const unsigned index = (unsigned)(off >> nic_dp.shift);
  /* A draining chunk is still mapped, pinned and registered, and can hold a live block: an
   * allocation that began before the reaper marked it draining lands there (the reaper then
   * makes it live again). Only released and unmapped chunks translate to nothing. */
  /* One register for the table's address: otherwise the compiler makes it twice, one for each
   * field read below, an instruction more on every call (callgrind, bench/run_all.sh). */
  const struct nic_chunk *chunks = nic_chunk_at(0);
  __asm__("" : "+r"(chunks));
  const struct nic_chunk *c = &chunks[index];
  /* O(1) and side-effect free: a step not registered yet reports key 0 (nic_register makes
   * the registration). Arena memory never carries a remote key. */
  const struct nic_registration *reg =
      __atomic_load_n(&nic_step_registrations[off >> nic_dp.step_shift], __ATOMIC_ACQUIRE);
  const int state = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
  if (state != NIC_CHUNK_LIVE && state != NIC_CHUNK_DRAINING) return -NIC_ENOTDP;
  out->kind = NIC_REGION_ARENA;
  out->chunk_index = index;
  out->region_base = (void *)(start - in_step);
  out->region_len = size;
  out->offset = in_step;
  out->lkey = reg ? reg->lkey : 0;
  out->rkey = 0;
  out->backend_handle = reg ? reg->handle : 0;
  out->cache_slot = 0;
  out->cache_gen = 0;
  return 0;
}
