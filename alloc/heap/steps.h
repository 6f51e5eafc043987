/* Reserve big, pin small: a chunk is reserved, mapped (readable, writable, backed by nothing)
 * and handed to mimalloc whole, but backed with memory and locked one step
 * (NICMALLOC_PIN_STEP) at a time, when mimalloc first commits in the step (its arena is not
 * committed as a whole: the interposed mprotect routes the commit here, os/dp_commit.h), or
 * when a registration needs the step. Registrations are per step too (chunk_reg.c). */
#ifndef NIC_STEPS_H
#define NIC_STEPS_H

#include "chunks.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The commit function handed down to the interposed mprotect: backs every step of
 * [addr, addr + len). Returns 0, or -ENOMEM when a step could not be backed (or, under
 * NICMALLOC_ON_PIN_FAIL=fail, not pinned); the steps after that one are not tried. */
int nic_steps_commit(void *addr, size_t len);
/* A block over 16 MiB is about to be asked of mimalloc on this thread. mimalloc 2.0.9 gives it
 * a segment of its own, claims whole 32 MiB arena blocks for it and commits the whole claim in
 * one call (mi_arena_alloc_from): a 17 MiB block committed 32 MiB, a 33 MiB one 64 MiB. With
 * segment_bytes (a bound on the segment: header and block) set, that commit backs and marks
 * committed only [claim, claim + segment_bytes), rounded to a slice; the claim's tail stays
 * unbacked. See steps.c for why mimalloc never touches the tail. */
void nic_steps_expect_huge(size_t segment_bytes);
enum nic_huge_claim {
  NIC_HUGE_CLAIM_NONE,    /* no claim was committed: the request failed, or found it committed */
  NIC_HUGE_CLAIM_BACKED,  /* the claim's commit came, was cut and backed every step */
  NIC_HUGE_CLAIM_REFUSED, /* it came and a step could not be backed (or pinned, under fail) */
};
/* The request is over: what became of its claim's commit; clears the bound. mimalloc 2.0.9
 * hands the block out whatever the commit returned, so REFUSED is the caller's to act on. */
enum nic_huge_claim nic_steps_expect_huge_done(void);
/* The decommit function handed down: mimalloc holds [addr, addr + len) no longer. */
void nic_steps_decommit(void *addr, size_t len);
/* The same for one step, with the chunk lock held. */
int nic_step_back_locked(unsigned index, unsigned step);
/* Whether the last nic_step_back_locked that failed was refused the lock (counted in
 * pin_failures, under NICMALLOC_ON_PIN_FAIL=fail) rather than memory. Chunk lock held. */
bool nic_step_back_lock_refused(void);
/* Faults in every page of a backed step that was backed without (NICMALLOC_DP_POPULATE=register:
 * its pages are locked as they are touched), so that the NIC never meets a missing page: every
 * registration of the step asks first (chunk_reg.c). 0, -EFAULT where the program made part of
 * the step read-only (nothing in it is changed), or -ENOMEM (said once). Chunk lock held. */
int nic_step_populate_locked(unsigned index, unsigned step);
/* A step's backing, read with acquire: true once it is mapped with memory and, if it could be,
 * locked (its pages faulted in, or locked as they are touched: nic_step_populate_locked). */
static inline bool nic_step_backed(unsigned index, unsigned step) {
  return __atomic_load_n(&nic_chunk_at(index)->steps[step].backed, __ATOMIC_ACQUIRE);
}
/* Bytes in memory of a backed step locked as it is touched (not populated): the kernel is
 * asked (mincore) until it says the whole step, which a locked step then stays until one of
 * its pages may leave, which forgets it (nic_step_not_whole_locked). Chunk lock held. */
size_t nic_step_resident_locked(unsigned index, unsigned step);
/* Pages of the step may leave, or it is backed anew: the next scan asks the kernel again. */
static inline void nic_step_not_whole_locked(unsigned index, unsigned step) {
  nic_chunk_at(index)->steps[step].whole = false;
}
/* Forgets every step's backing of a chunk whose memory was given back (chunk lock held). */
void nic_steps_forget_locked(unsigned index);

/* Giving back steps inside live chunks (the reaper). Whether mimalloc holds any slice of the
 * step committed: a step with live blocks, a segment header or a cached segment in it does
 * (the free path counts nothing more). */
bool nic_step_committed(unsigned index, unsigned step);
/* With the chunk lock held: gives a backed step back if mimalloc holds nothing committed in it
 * and the layers above let it go (events.h, step_releasing: no post uses its registration).
 * True when it was given back; it is backed again on mimalloc's next commit there. */
bool nic_step_release_locked(unsigned index, unsigned step);

struct nic_step_totals {
  uint64_t backed, released, page_fallbacks, pin_failures;
  enum nic_page_kind last_kind;
};
/* Counters over the process lifetime (chunk lock held). */
void nic_step_totals_locked(struct nic_step_totals *out);

#endif
