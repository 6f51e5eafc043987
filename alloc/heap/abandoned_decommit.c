/* Which control decommits may wait for the purge delay (alloc/os/late_decommit.h): those of a
 * segment on mimalloc's abandoned list, which is what a dataplane heap's visit decommits (and a
 * forced collect's visit). Its owner's decommits (thread id set) keep mimalloc's own delay.
 * Turned on with the reaper, which runs the late drops: a process that never allocates dataplane
 * memory has no dataplane heap to visit anything, and keeps mimalloc's behaviour exactly. */
#include "abandoned_decommit.h"

#include "late_decommit.h"
#include "mi_layout.h"

#include <mimalloc.h>
#include <stdint.h>

static bool in_abandoned_segment(void *addr, size_t len) {
  const uintptr_t base = (uintptr_t)addr & ~NIC_MI_SEGMENT_MASK;
  if ((uintptr_t)addr - base + len > NIC_MI_SEGMENT_SIZE) return false;
  if (!nic_mi_segment_at(base)) return false;
  /* A misread (inside a huge segment, whose header is elsewhere) only delays a decommit. */
  return __atomic_load_n((const uintptr_t *)(base + NIC_MI_SEG_THREAD_ID), __ATOMIC_RELAXED) == 0;
}

void nic_abandoned_decommits_wait(void) {
  nic_late_decommit_enable(in_abandoned_segment, (unsigned)mi_option_get(mi_option_decommit_delay));
}
