/* The heap maps and releases chunks, and backs their steps, without knowing the NIC; this file
 * follows it through the chunk events (events.h). A registration is made under the chunks lock,
 * as the heap's release runs under it, so a step is never registered while it is being given
 * back. */
#include "chunk_reg.h"

#include "clock.h"
#include "events.h"
#include "log.h"
#include "rcache.h"
#include "step_pages.h"
#include "steps.h"
#include "thread.h"

#include <errno.h>
#include <string.h>

struct nic_chunk_reg nic_chunk_regs[NIC_CHUNK_SLOTS][NIC_STEPS_MAX][NIC_BACKEND_KINDS];

int nic_chunk_register(unsigned index, unsigned step, struct nic_registration *out) {
  /* The default backend's is the step's entry of the flat table: every dataplane entry takes
   * this load. */
  const struct nic_registration *own = nic_chunk_registration(index, step);
  if (__builtin_expect(own != NULL, 1)) {
    *out = *own;
    return 0;
  }
  return nic_chunk_register_with(index, step, nic_backend_active(), out);
}

/* With the chunk lock held. A backend that keeps the pages it registers gets the step whole:
 * its pages given back inside (step_pages.h) are faulted in first, and no more go while the
 * registration lasts, or the NIC would keep reading the pages that left. */
static int register_step(struct nic_backend *b, unsigned index, unsigned step, void *base,
                         size_t len, struct nic_chunk_reg *r, bool *no_room) {
  const bool holds = !b->caps.pages_follow;
  if (holds && nic_step_pages_hold_locked(index, step)) return -ENOMEM;
  int rc = nic_backend_reg(b, base, len, NIC_ACCESS_LOCAL_WRITE, &r->reg);
  if (rc && holds) nic_step_pages_unhold_locked(index, step);
  r->holds_pages = rc == 0 && holds;
  *no_room = rc == -ENOSPC || rc == -ENOMEM;
  return rc;
}

int nic_chunk_register_with(unsigned index, unsigned step, struct nic_backend *b,
                            struct nic_registration *out) {
  const unsigned kind = nic_backend_kind_of(b);
  if (kind >= NIC_BACKEND_KINDS) return -ENODEV;
  struct nic_chunk_reg *r = &nic_chunk_regs[index][step][kind];
  /* Only the default backend's is the step's entry of the flat table: what nic_translate hands
   * out. A backend started by an endpoint may register steps before it becomes the default
   * (auto: the first started), so the entry is published on its first use as the default too. */
  const void **flat = nic_step_registration(index, step);
  const bool own = b == nic_backend_if_open();
  if (__atomic_load_n(&r->registered, __ATOMIC_ACQUIRE) &&
      (!own || __atomic_load_n(flat, __ATOMIC_ACQUIRE))) {
    *out = r->reg;
    return 0;
  }
  void *base = nic_step_base(index, step);
  const size_t len = (size_t)1 << nic_dp.step_shift;
  bool room_asked = false; /* the cache had no idle region left to give way */
again:
  nic_chunks_lock();
  int rc = 0;
  bool refused = false, no_room = false;
  if (!nic_chunk_readable(index))
    rc = -ENOENT;
  else if (r->registered && own)
    __atomic_store_n(flat, &r->reg, __ATOMIC_RELEASE);
  else if (!r->registered && r->retry_at_ms && nic_now_ms() < r->retry_at_ms)
    rc = r->error;
  /* A step mimalloc wrote to without committing it (a cached segment of a chunk mapped again)
   * is backed before the NIC gets it: a registration of pages nobody locked could outlive
   * them. Every backend's first registration of the step asks, as any may be the first. */
  else if (!r->registered && (rc = nic_step_back_locked(index, step)) != 0)
    refused = true;
  /* Pages locked as they are touched are faulted in whole before any NIC sees the step, the
   * sim's included, so that no backend's model differs from the NIC's: never a missing page. */
  else if (!r->registered && (rc = nic_step_populate_locked(index, step)) != 0)
    refused = true;
  /* Local write: nic_register hands this registration out for NIC_REG_LOCAL_WRITE too (receive
   * buffers), and a verbs MR without it fails every receive into the step. */
  else if (!r->registered && (rc = register_step(b, index, step, base, len, r, &no_room)) == 0) {
    __atomic_store_n(&r->registered, 1, __ATOMIC_RELEASE);
    if (own) __atomic_store_n(flat, &r->reg, __ATOMIC_RELEASE);
  } else if (no_room && !room_asked) {
    /* Idle regions of the registration cache give way to the step, one at a time, without the
     * chunk lock (a deregistration may unmap): the program's data must not be kept from the
     * NIC by control memory cached for later. Once none is left, the step is tried once more
     * under the lock before it is refused: meanwhile another thread may have registered it, or
     * the chunk gone and come back with a fresh step, which a refusal set now would keep from
     * the NIC for a second. */
    nic_chunks_unlock();
    room_asked = !nic_rcache_make_room(b);
    goto again;
  } else if (rc == -EAGAIN) { /* pages of it are protected: wait without the lock, try again */
    nic_chunks_unlock();
    if (nic_backend_reg_wait(base, len)) goto again;
    nic_chunks_lock();
    /* Another thread may have registered the step while this one waited. */
    if (nic_chunk_readable(index) && __atomic_load_n(&r->registered, __ATOMIC_ACQUIRE)) {
      rc = 0;
      if (own) __atomic_store_n(flat, &r->reg, __ATOMIC_RELEASE);
    } else {
      rc = -ENOSPC;
      refused = true;
    }
  } else if (rc) {
    r->error = rc;
    r->retry_at_ms = nic_now_ms() + 1000;
    refused = true;
  }
  if (rc == 0) *out = r->reg;
  nic_chunks_unlock();
  if (refused)
    nic_log_warn_once("cannot register dataplane chunk %u step %u with backend %s (%s); it is "
                      "tried again after a second, and its memory cannot reach the NIC meanwhile",
                      index, step, b->name, strerror(-rc));
  return rc;
}

static void chunk_mapped(unsigned index, void *base, size_t len) {
  (void)base, (void)len;
  for (unsigned s = 0; s < nic_steps_per_chunk(); s++) {
    for (unsigned k = 0; k < NIC_BACKEND_KINDS; k++) {
      nic_chunk_regs[index][s][k].registered = 0;
      nic_chunk_regs[index][s][k].retry_at_ms = 0;
    }
    __atomic_store_n(nic_step_registration(index, s), NULL, __ATOMIC_RELEASE);
  }
}

void nic_chunk_regs_forget_parents(void) {
  const unsigned used = nic_chunk_slots_used();
  for (unsigned i = 0; i < used; i++)
    for (unsigned s = 0; s < nic_steps_per_chunk(); s++)
      for (unsigned k = 0; k < NIC_BACKEND_KINDS; k++) {
        struct nic_chunk_reg *r = &nic_chunk_regs[i][s][k];
        if (!r->registered && !r->retry_at_ms) continue; /* its page stays shared */
        if (r->holds_pages) nic_step_pages_unhold_locked(i, s);
        *r = (struct nic_chunk_reg){0};
      }
}

/* Deregisters the step from every backend that registered it. False when one says -EBUSY (a
 * post still uses its registration until it completes): the step must be kept, and what was
 * deregistered already is registered again on next use. */
static bool drop_step(unsigned index, unsigned step) {
  const void **flat = nic_step_registration(index, step);
  for (unsigned k = 0; k < NIC_BACKEND_KINDS; k++) {
    struct nic_chunk_reg *r = &nic_chunk_regs[index][step][k];
    r->retry_at_ms = 0;
    if (!r->registered) continue;
    struct nic_backend *b = nic_backend_started((enum nic_backend_kind)k);
    if (b && nic_backend_dereg(b, &r->reg) != 0) return false;
    if (__atomic_load_n(flat, __ATOMIC_ACQUIRE) == &r->reg)
      __atomic_store_n(flat, NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&r->registered, 0, __ATOMIC_RELEASE);
    if (r->holds_pages) nic_step_pages_unhold_locked(index, step);
    r->holds_pages = false;
  }
  return true;
}

/* No stale registration may outlive the memory: deregister every step from every backend
 * first, or keep the chunk. */
static bool chunk_releasing(unsigned index, void *base, size_t len) {
  (void)base, (void)len;
  bool all = true;
  for (unsigned s = 0; s < nic_steps_per_chunk(); s++)
    all &= drop_step(index, s);
  return all;
}

/* The same for one step given back inside a live chunk. */
static bool step_releasing(unsigned index, unsigned step, void *base, size_t len) {
  (void)base, (void)len;
  return drop_step(index, step);
}

NIC_MEMORY_WATCHER(chunk_registrations, .chunk_mapped = chunk_mapped,
                   .chunk_releasing = chunk_releasing, .step_releasing = step_releasing);
