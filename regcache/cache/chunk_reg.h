/* Dataplane chunks' registrations: each step of a chunk (NICMALLOC_PIN_STEP, alloc/heap/steps.h)
 * has its own local-access registration with the process backend (a fixed-buffer slot, a sim
 * region, an extmem area, an MR), made on first use and dropped before the heap gives the
 * chunk back. */
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
extern struct nic_chunk_reg nic_chunk_regs[NIC_CHUNK_SLOTS][NIC_STEPS_MAX]
    __attribute__((visibility("hidden")));

/* The step's registration if it has one already; never makes one. */
static inline const struct nic_registration *nic_chunk_registration(unsigned index, unsigned step) {
  const struct nic_chunk_reg *r = &nic_chunk_regs[index][step];
  return __atomic_load_n(&r->registered, __ATOMIC_ACQUIRE) ? &r->reg : NULL;
}

/* The step's registration, made now if it has none yet (never from inside malloc); a step not
 * backed yet is backed (prefaulted and pinned) first. Returns 0, -ENOENT for a chunk that is
 * not mapped, -ENOMEM for a step that cannot be backed, -ENODEV when no backend could be
 * opened, or the backend's error (given back for a second without asking the backend
 * again). */
int nic_chunk_register(unsigned index, unsigned step, struct nic_registration *out);

#endif
