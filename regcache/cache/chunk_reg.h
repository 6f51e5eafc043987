/* Dataplane chunks' registrations: each step of a chunk (NICMALLOC_PIN_STEP, alloc/heap/steps.h)
 * has its own local-access registration with each started backend (a fixed-buffer slot, a sim
 * region, an extmem area, an MR), made on the step's first use with that backend (a step backed
 * before a backend started is registered with it when an entry on it first needs it) and
 * dropped from every backend before the heap gives the step or the chunk back. */
#ifndef NIC_CHUNK_REG_H
#define NIC_CHUNK_REG_H

#include "backend.h"
#include "chunks.h"

struct nic_chunk_reg {
  int registered;   /* read with acquire */
  bool holds_pages; /* the backend keeps the step's pages (step_pages.h: no page is dropped) */
  struct nic_registration reg;
  /* A refused registration (no CAP_IPC_LOCK, a small RLIMIT_MEMLOCK) is given back as error
   * until retry_at_ms rather than asked of the backend on every entry. */
  uint64_t retry_at_ms;
  int error;
};
/* By chunk, step, then backend kind (backend.h): a chunk's entries lie together, so mapping and
 * releasing it touch no page of the others'. The default backend's registration of a step is
 * also the step's entry of the flat table (nic_step_registration), which nic_translate reads on
 * every call. */
extern struct nic_chunk_reg nic_chunk_regs[NIC_CHUNK_SLOTS][NIC_STEPS_MAX][NIC_BACKEND_KINDS]
    __attribute__((visibility("hidden")));

/* The step's registration with the default backend if it has one already; never makes one. */
static inline const struct nic_registration *nic_chunk_registration(unsigned index, unsigned step) {
  return (const struct nic_registration *)__atomic_load_n(nic_step_registration(index, step),
                                                          __ATOMIC_ACQUIRE);
}

/* The step's registration with backend b (a started one: backend.h), made now if it has none
 * yet (never from inside malloc); a step not backed yet is backed (prefaulted and pinned) first.
 * Returns 0, -ENOENT for a chunk that is not mapped, -ENOMEM for a step that cannot be backed,
 * -ENODEV when b is NULL or not a started backend, or b's error (given back for a second
 * without asking the backend again). */
int nic_chunk_register_with(unsigned index, unsigned step, struct nic_backend *b,
                            struct nic_registration *out);
/* The same with the default backend (-ENODEV when none could be opened). */
int nic_chunk_register(unsigned index, unsigned step, struct nic_registration *out);
/* Fork child, single-threaded: every registration is the parent's, made with backends the child
 * does not have. Forgotten without a deregistration, and the pages they kept may go. */
void nic_chunk_regs_forget_parents(void);

#endif
