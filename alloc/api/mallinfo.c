/* glibc's report of its heap, answered with nicmalloc's. Under LD_PRELOAD glibc's own would
 * describe an arena nobody uses, all zeros, to a program that sizes its caches or reports its
 * memory by it (LLVM's -ftime-report reads it, for one). The fields glibc's free lists fill
 * (ordblks, smblks, fsmblks, keepcost) have no counterpart here and read 0, as usmblks does in
 * glibc itself. */
#define _GNU_SOURCE
#include "export.h"
#include "mapped.h"
#include "nicmalloc.h"

#include <limits.h>
#include <malloc.h>

static struct mallinfo2 report(void) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  struct mallinfo2 m = {0};
  /* What the heap holds from the OS, less nicmalloc's own mappings: the control arena's committed
   * bytes and the dataplane's backed steps. */
  m.arena = s.control_committed + s.dataplane_backed;
  m.uordblks = s.control_live + s.dataplane_live;
  if (m.uordblks > m.arena) m.uordblks = m.arena; /* read at different moments */
  m.fordblks = m.arena - m.uordblks;
  nic_mapped_totals(&m.hblks, &m.hblkhd);
  return m;
}

NIC_EXPORT struct mallinfo2 mallinfo2(void) {
  return report();
}

static int clamp(size_t v) {
  return v > INT_MAX ? INT_MAX : (int)v;
}

/* The old interface's int fields: glibc's wrap past 2 GiB; these stop at INT_MAX. */
NIC_EXPORT struct mallinfo mallinfo(void) {
  const struct mallinfo2 m = report();
  return (struct mallinfo){.arena = clamp(m.arena),
                           .ordblks = clamp(m.ordblks),
                           .smblks = clamp(m.smblks),
                           .hblks = clamp(m.hblks),
                           .hblkhd = clamp(m.hblkhd),
                           .usmblks = clamp(m.usmblks),
                           .fsmblks = clamp(m.fsmblks),
                           .uordblks = clamp(m.uordblks),
                           .fordblks = clamp(m.fordblks),
                           .keepcost = clamp(m.keepcost)};
}
