/* See rcache_refused.h. A few slots, written under the registration cache's lock and forgotten
 * lock-free: a slot's live word is cleared by whoever forgets it, and set last by the note, so a
 * forget that reads a slot being rewritten at worst forgets it once more (asked again), never
 * keeps a range it was told about. */
#include "rcache_refused.h"

#include "chunks.h"
#include "commit_map.h"

#define SLOTS 32u /* refused mappings remembered at once: more are forgotten oldest first */

struct refused {
  const void *owner; /* read and written under the lock only */
  uintptr_t start, end;
  unsigned access;
  int live; /* 0: free or forgotten */
};

static struct refused slots[SLOTS];
static unsigned hand;                            /* the slot taken next when none is free (lock) */
static unsigned remembered;                      /* live slots: forgets pass with one load at 0 */
static uintptr_t hull_lo = UINTPTR_MAX, hull_hi; /* of the slots noted since none was live */

/* nicmalloc's own heaps (the control arena, the dataplane range): mimalloc commits there by
 * mprotect, often, and the program's frees publish their ranges. Nothing is remembered there
 * (note), so none of those needs a look at the slots. */
static bool in_own_heaps(uintptr_t start, uintptr_t end) {
  const uintptr_t base = nic_commit_map.base;
  if (start >= base && end - base <= nic_commit_map.size) return true;
  return nic_in_dp((const void *)start) && nic_in_dp((const void *)(end - 1));
}

static void forget_slot(struct refused *r) {
  if (__atomic_exchange_n(&r->live, 0, __ATOMIC_ACQ_REL))
    __atomic_sub_fetch(&remembered, 1, __ATOMIC_RELEASE);
}

void nic_rcache_refused_forget(uintptr_t start, uintptr_t end) {
  if (!__atomic_load_n(&remembered, __ATOMIC_ACQUIRE) || end <= start || in_own_heaps(start, end))
    return;
  if (end <= __atomic_load_n(&hull_lo, __ATOMIC_RELAXED) ||
      __atomic_load_n(&hull_hi, __ATOMIC_RELAXED) <= start)
    return;
  for (unsigned i = 0; i < SLOTS; i++) {
    struct refused *r = &slots[i];
    if (__atomic_load_n(&r->live, __ATOMIC_ACQUIRE) &&
        __atomic_load_n(&r->start, __ATOMIC_RELAXED) < end &&
        start < __atomic_load_n(&r->end, __ATOMIC_RELAXED))
      forget_slot(r);
  }
}

bool nic_rcache_refused_covers_locked(const void *owner, uintptr_t start, uintptr_t end,
                                      unsigned access) {
  if (!__atomic_load_n(&remembered, __ATOMIC_ACQUIRE)) return false;
  for (unsigned i = 0; i < SLOTS; i++) {
    const struct refused *r = &slots[i];
    if (__atomic_load_n(&r->live, __ATOMIC_ACQUIRE) && r->owner == owner &&
        __atomic_load_n(&r->start, __ATOMIC_RELAXED) <= start &&
        end <= __atomic_load_n(&r->end, __ATOMIC_RELAXED) && (access & r->access) == r->access)
      return true;
  }
  return false;
}

void nic_rcache_refused_note_locked(const void *owner, uintptr_t start, uintptr_t end,
                                    unsigned access) {
  if (end <= start || in_own_heaps(start, end) ||
      nic_rcache_refused_covers_locked(owner, start, end, access))
    return;
  struct refused *r = NULL;
  for (unsigned i = 0; i < SLOTS && !r; i++)
    if (!__atomic_load_n(&slots[i].live, __ATOMIC_ACQUIRE)) r = &slots[i];
  if (!r) {
    r = &slots[hand];
    hand = (hand + 1) % SLOTS;
    forget_slot(r);
  }
  /* Only notes grow the hull, under the lock: with nothing live it starts afresh. */
  if (!__atomic_load_n(&remembered, __ATOMIC_ACQUIRE)) {
    __atomic_store_n(&hull_lo, start, __ATOMIC_RELAXED);
    __atomic_store_n(&hull_hi, end, __ATOMIC_RELAXED);
  } else {
    if (start < hull_lo) __atomic_store_n(&hull_lo, start, __ATOMIC_RELAXED);
    if (end > hull_hi) __atomic_store_n(&hull_hi, end, __ATOMIC_RELAXED);
  }
  r->owner = owner;
  r->access = access;
  __atomic_store_n(&r->start, start, __ATOMIC_RELAXED);
  __atomic_store_n(&r->end, end, __ATOMIC_RELAXED);
  /* Counted before it is live, so that a forget of it never takes the count below zero. */
  __atomic_add_fetch(&remembered, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&r->live, 1, __ATOMIC_RELEASE);
}

void nic_rcache_refused_drop_locked(const void *owner) {
  for (unsigned i = 0; i < SLOTS; i++)
    if (!owner || slots[i].owner == owner) forget_slot(&slots[i]);
}
