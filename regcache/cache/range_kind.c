/* See range_kind.h. One read of the process's maps (/proc/thread-self/maps) per miss outside the
 * control arena: a miss costs a registration, a system call, anyway. */
#include "range_kind.h"

#include "commit_map.h"
#include "maps.h"
#include "own_stack.h"
#include "thread.h"

#include <stdbool.h>

void nic_range_kind_prepare(uintptr_t start, uintptr_t end) {
  uintptr_t lo, hi;
  nic_own_stack_learn();
  if (nic_own_stack_overlaps(start, end, &lo, &hi)) (void)nic_thread_ready();
}

/* The mappings over [start, end) in order, then those that continue them upwards without a gap
 * or a no-access page (a stack's guard lies below it): where a thread block above the range
 * would be, were the range in a thread's stack. */
struct walk {
  uintptr_t next, end;
  uintptr_t span_lo, span_hi;
  unsigned kind;
  bool covered;
};

static bool look(const struct nic_maps_entry *e, void *arg) {
  struct walk *w = arg;
  if (e->start > w->next) return false; /* a gap */
  if (!w->covered) {
    if (!w->span_lo) w->span_lo = e->start;
    if (e->shared || !e->anonymous) w->kind &= ~NIC_RANGE_CACHEABLE;
    if (!e->writable) w->kind &= ~NIC_RANGE_WRITABLE;
    w->covered = e->end >= w->end;
  } else if (!e->anonymous || e->shared || !e->readable) {
    return false;
  }
  w->next = w->span_hi = e->end;
  return true;
}

unsigned nic_range_kind(uintptr_t start, uintptr_t end) {
  /* mimalloc's memory, which nicmalloc maps private and anonymous and mimalloc commits writable. */
  const uintptr_t off = start - nic_commit_map.base, checked = nic_commit_map.checked;
  if (off < checked && end - start <= checked - off)
    return NIC_RANGE_CACHEABLE | NIC_RANGE_WRITABLE;
  uintptr_t lo, hi;
  if (nic_own_stack_overlaps(start, end, &lo, &hi) && !nic_thread_stack_watched(lo, hi)) return 0;
  struct walk w = {.next = start, .end = end, .kind = NIC_RANGE_CACHEABLE | NIC_RANGE_WRITABLE};
  /* Unknown (the maps could not be read: no descriptor left) is not cached: a registration of
   * the request's own, which the backend checks for itself. */
  if (nic_maps_walk(start, UINTPTR_MAX, look, &w) || !w.covered) return 0;
  if ((w.kind & NIC_RANGE_CACHEABLE) && nic_thread_block_in(w.span_lo, w.span_hi))
    w.kind &= ~NIC_RANGE_CACHEABLE;
  return w.kind;
}
