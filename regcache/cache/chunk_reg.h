/* Dataplane chunks' registrations: each chunk has one local-access registration with the
 * process backend, made on first use and dropped before the heap gives the chunk back. */
#ifndef NIC_CHUNK_REG_H
#define NIC_CHUNK_REG_H

#include "backend.h"
#include "chunks.h"

struct nic_chunk_reg {
  int registered; /* read with acquire */
  struct nic_registration reg;
  /* A refused registration (no CAP_IPC_LOCK, a small RLIMIT_MEMLOCK) is given back as error
   * until retry_at_ms rather than asked of the backend on every entry. */
  uint64_t retry_at_ms;
  int error;
};
/* Inline: nic_translate reads it on every call. */
extern struct nic_chunk_reg nic_chunk_regs[NIC_CHUNK_SLOTS] __attribute__((visibility("hidden")));

/* The chunk's registration if it has one already; never makes one. */
static inline const struct nic_registration *nic_chunk_registration(unsigned index) {
  const struct nic_chunk_reg *r = &nic_chunk_regs[index];
  return __atomic_load_n(&r->registered, __ATOMIC_ACQUIRE) ? &r->reg : NULL;
}

/* The chunk's registration, made now if it has none yet (never from inside malloc). Returns 0,
 * -ENOENT for a chunk that is not mapped, -ENODEV when no backend could be opened, or the
 * backend's error (given back for a second without asking the backend again). */
int nic_chunk_register(unsigned index, struct nic_registration *out);

#endif
