/* Reading /proc/self/smaps without allocating: the only place the kernel says how much of a
 * range is resident, and whether THP really backs it. */
#ifndef NIC_SMAPS_H
#define NIC_SMAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nic_smaps_entry {
  uintptr_t start, end;
  bool writable;
  size_t rss_kb, anon_huge_kb;
};

/* Calls fn for each mapping overlapping [lo, hi), in address order, until fn returns false.
 * Returns false when smaps could not be read. */
bool nic_smaps_walk(uintptr_t lo, uintptr_t hi,
                    bool (*fn)(const struct nic_smaps_entry *e, void *arg), void *arg);

#endif
