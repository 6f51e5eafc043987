#define _GNU_SOURCE
#include "step_pages.h"

#include "chunks.h"
#include "events.h"
#include "log.h"
#include "page_drop.h"
#include "steps.h"
#include "sub_pages.h"

#include <errno.h>
#include <string.h>

/* Which slices are dropped: set and cleared a whole unit at a time, under the chunk lock; read
 * without it by the commit path, which only ever sees its own units change (mimalloc commits
 * and decommits a segment's slices on the thread that owns it). */
static uint64_t dropped[NIC_CHUNK_SLOTS][NIC_COMMIT_WORDS];
static uint32_t dropped_slices[NIC_CHUNK_SLOTS][NIC_STEPS_MAX];
/* Registrations of the step that hold page references (chunk_reg.c). */
static uint32_t holders[NIC_CHUNK_SLOTS][NIC_STEPS_MAX];

/* log2 of the unit: mimalloc's slice, on 4 KiB pages and on transparent huge pages alike. A
 * 2 MiB unit is rarely free whole once blocks of every size have come and gone (after a random
 * 90% shrink of bench/frag, none was), so a huge page part of which is free is split: the kernel
 * splits the mapping on a partial MADV_DONTNEED_LOCKED, the dropped pages leave the process's
 * RSS at once, and the step is mapped with small pages there from then on (refill faults them
 * in one by one). No registration that holds page references can be there meanwhile (holders),
 * so no pinned huge page is split. Never hugetlb pages: one given back must come from the pool
 * again on the next touch, and a touch that finds the pool empty (another process took the
 * page) dies of SIGBUS rather than getting an error; a fork child copying its hugetlb chunks
 * read such pages (chunks.c). */
static unsigned unit_shift(enum nic_page_kind kind) {
  switch (kind) {
  case NIC_PAGE_4K:
  case NIC_PAGE_THP:
    return NIC_SLICE_SHIFT;
  default:
    return 0; /* hugetlb: the step is given back whole by steps.c */
  }
}

static bool bits_any(const uint64_t *words, size_t first, size_t last) {
  for (size_t i = first; i <= last;) {
    const size_t bit = i & 63, n = last - i + 1 < 64 - bit ? last - i + 1 : 64 - bit;
    const uint64_t mask = (n == 64 ? ~0ull : ((1ull << n) - 1)) << bit;
    if (__atomic_load_n(&words[i >> 6], __ATOMIC_SEQ_CST) & mask) return true;
    i += n;
  }
  return false;
}

static void bits_set(uint64_t *words, size_t first, size_t last, bool set) {
  for (size_t i = first; i <= last;) {
    const size_t bit = i & 63, n = last - i + 1 < 64 - bit ? last - i + 1 : 64 - bit;
    const uint64_t mask = (n == 64 ? ~0ull : ((1ull << n) - 1)) << bit;
    if (set)
      __atomic_fetch_or(&words[i >> 6], mask, __ATOMIC_SEQ_CST);
    else
      __atomic_fetch_and(&words[i >> 6], ~mask, __ATOMIC_SEQ_CST);
    i += n;
  }
}

/* Whether a unit (slices first..last of a backed step) is to be acted on. */
typedef bool (*unit_want)(unsigned index, unsigned step, size_t first, size_t last);
/* Acts on a run of such units, contiguous and inside one step: one system call per run (drops
 * also merge runs that follow on across steps: flush_drops), not
 * per unit (a freed 16 MiB block is 256 units; one call each made malloc-large 3x slower). */
typedef bool (*run_fn)(unsigned index, unsigned step, const struct nic_step *st, size_t first,
                       size_t last);
static bool each_run(uintptr_t a, uintptr_t end, unit_want want, run_fn fn) {
  const uintptr_t step_size = (uintptr_t)1 << nic_dp.step_shift;
  while (a < end && nic_in_dp((const void *)a)) {
    const unsigned index = nic_chunk_index((const void *)a), step = nic_step_index((const void *)a);
    const uintptr_t step_end = (a & ~(step_size - 1)) + step_size;
    const uintptr_t stop = end < step_end ? end : step_end;
    const struct nic_step *st = &nic_chunk_at(index)->steps[step];
    const unsigned shift = unit_shift(st->mapping.kind);
    if (st->backed && shift && shift < nic_dp.step_shift) {
      const uintptr_t base = (uintptr_t)nic_chunk_base(index), unit = (uintptr_t)1 << shift;
      const size_t per_unit = unit >> NIC_SLICE_SHIFT;
      bool open = false;
      size_t run_first = 0, run_last = 0;
      for (uintptr_t u = a & ~(unit - 1); u < stop; u += unit) {
        const size_t first = (u - base) >> NIC_SLICE_SHIFT, last = first + per_unit - 1;
        if (want(index, step, first, last)) {
          if (!open) run_first = first;
          open = true;
          run_last = last;
        } else if (open) {
          open = false;
          if (!fn(index, step, st, run_first, run_last)) return false;
        }
      }
      if (open && !fn(index, step, st, run_first, run_last)) return false;
    }
    a = stop;
  }
  return true;
}

static void *slice_addr(unsigned index, size_t slice) {
  return (char *)nic_chunk_base(index) + (slice << NIC_SLICE_SHIFT);
}

static bool drop_wanted(unsigned index, unsigned step, size_t first, size_t last) {
  /* Slices of the unit outside the decommitted range may still be mimalloc's. */
  return !holders[index][step] && !bits_any(dropped[index], first, first) &&
         !nic_slices_committed(index, first, last);
}

/* Drops waiting for their system call: runs of one chunk that follow on across steps go in one
 * call (a freed 20 MiB block spans five 4 MiB steps; a call per step made 2.6 calls per free in
 * malloc-large). Under the chunk lock. */
static struct {
  bool open, pinned;
  unsigned index;
  size_t first, last;
} pending;

/* The bookkeeping of a drop the kernel refused, taken back step by step. */
static void undo_drop(unsigned index, size_t first, size_t last) {
  const unsigned per_step_shift = nic_dp.step_shift - NIC_SLICE_SHIFT;
  bits_set(dropped[index], first, last, false);
  for (size_t i = first; i <= last;) {
    const unsigned step = (unsigned)(i >> per_step_shift);
    const size_t step_last = (((size_t)step + 1) << per_step_shift) - 1;
    const size_t stop = last < step_last ? last : step_last;
    dropped_slices[index][step] -= (uint32_t)(stop - i + 1);
    i = stop + 1;
  }
}

static bool flush_drops(void) {
  if (!pending.open) return true;
  pending.open = false;
  const size_t len = (pending.last - pending.first + 1) << NIC_SLICE_SHIFT;
  const int rc = nic_drop_pages(slice_addr(pending.index, pending.first), len, pending.pinned);
  if (!rc) return true;
  undo_drop(pending.index, pending.first, pending.last);
  nic_log_warn_once("cannot give back free pages inside dataplane steps (madvise: %s); they "
                    "stay pinned until their whole step is free",
                    strerror(-rc));
  return false;
}

static bool drop_run(unsigned index, unsigned step, const struct nic_step *st, size_t first,
                     size_t last) {
  nic_step_not_whole_locked(index, step);
  const bool pinned = st->mapping.pinned;
  const bool follows = pending.open && pending.index == index && pending.pinned == pinned &&
                       pending.last + 1 == first;
  if (!follows) {
    if (!flush_drops()) return false;
    pending.open = true;
    pending.pinned = pinned;
    pending.index = index;
    pending.first = first;
  }
  pending.last = last;
  bits_set(dropped[index], first, last, true);
  dropped_slices[index][step] += (uint32_t)(last - first + 1);
  return true;
}

void nic_step_pages_drop(void *addr, size_t len) {
  if (!len) return;
  nic_sub_pages_forget(addr, len);
  /* Posts cannot cover free memory (frees wait for them), but the sim's kept pages and the
   * registration cache hear of every page that leaves. Outside the chunk lock: their locks come
   * before it. The part of a 2 MiB unit outside the range was told at its own decommit. */
  nic_publish_pages_leaving((uintptr_t)addr, len);
  nic_chunks_lock();
  if (each_run((uintptr_t)addr, (uintptr_t)addr + len, drop_wanted, drop_run)) flush_drops();
  nic_chunks_unlock();
}

static bool refill_wanted(unsigned index, unsigned step, size_t first, size_t last) {
  (void)step, (void)last;
  return bits_any(dropped[index], first, first);
}

static bool refill_run(unsigned index, unsigned step, const struct nic_step *st, size_t first,
                       size_t last) {
  /* A step locked as it is touched gets its pages back the same way; one faulted in whole
   * (registered, or NICMALLOC_DP_POPULATE=commit) is whole again. */
  if (st->mapping.populated &&
      nic_refill_pages(slice_addr(index, first), (last - first + 1) << NIC_SLICE_SHIFT))
    return false;
  bits_set(dropped[index], first, last, false);
  dropped_slices[index][step] -= (uint32_t)(last - first + 1);
  return true;
}

int nic_step_pages_refill(void *addr, size_t len) {
  if (!len || !nic_in_dp(addr)) return 0;
  const uintptr_t base = (uintptr_t)nic_chunk_base(nic_chunk_index(addr));
  const uintptr_t last = (uintptr_t)addr + len - 1;
  /* Most commits find nothing dropped: one look at the bits, no lock. A range that reaches into
   * the next chunk is rare enough to take the lock. */
  if (nic_chunk_index((const void *)last) == nic_chunk_index(addr)) {
    const unsigned index = nic_chunk_index(addr);
    const uintptr_t big = (uintptr_t)2 << 20;
    const uintptr_t lo = (uintptr_t)addr & ~(big - 1), hi = last | (big - 1);
    const uintptr_t top = base + ((uintptr_t)1 << nic_dp.shift) - 1;
    if (!bits_any(dropped[index], (lo - base) >> NIC_SLICE_SHIFT,
                  ((hi < top ? hi : top) - base) >> NIC_SLICE_SHIFT))
      return 0;
  }
  nic_chunks_lock();
  bool ok = each_run((uintptr_t)addr, last + 1, refill_wanted, refill_run);
  nic_chunks_unlock();
  return ok ? 0 : -ENOMEM;
}

int nic_step_pages_hold_locked(unsigned index, unsigned step) {
  holders[index][step]++;
  if (nic_sub_pages_refill_locked(index, step)) {
    holders[index][step]--;
    return -ENOMEM;
  }
  if (!dropped_slices[index][step]) return 0;
  void *base = nic_step_base(index, step);
  if (each_run((uintptr_t)base, (uintptr_t)base + ((uintptr_t)1 << nic_dp.step_shift),
               refill_wanted, refill_run))
    return 0;
  holders[index][step]--;
  return -ENOMEM;
}

void nic_step_pages_unhold_locked(unsigned index, unsigned step) {
  if (holders[index][step]) holders[index][step]--;
}

bool nic_step_pages_may_drop_locked(unsigned index, unsigned step) {
  const struct nic_step *st = &nic_chunk_at(index)->steps[step];
  return st->backed && unit_shift(st->mapping.kind) && !holders[index][step];
}

void nic_step_pages_forget_locked(unsigned index, unsigned step) {
  nic_sub_pages_forget_step_locked(index, step);
  nic_step_pages_faulted_in_locked(index, step);
}

void nic_step_pages_faulted_in_locked(unsigned index, unsigned step) {
  if (!dropped_slices[index][step]) return;
  const size_t per_step = (size_t)1 << (nic_dp.step_shift - NIC_SLICE_SHIFT);
  bits_set(dropped[index], step * per_step, (step + 1) * per_step - 1, false);
  dropped_slices[index][step] = 0;
}

size_t nic_step_pages_dropped_bytes(unsigned index, unsigned step) {
  return (size_t)dropped_slices[index][step] << NIC_SLICE_SHIFT;
}
