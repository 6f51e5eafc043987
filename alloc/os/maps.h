/* Reading the process's maps (proc_own.h) without allocating: its mappings and permissions.
 * Not /proc/self/smaps, which says how much of each is resident: the kernel walks every
 * mapping's page tables to write it (tens of milliseconds with a 1 GiB dataplane chunk backed),
 * where mincore over the few ranges wanted walks only theirs. */
#ifndef NIC_MAPS_H
#define NIC_MAPS_H

#include <stdbool.h>
#include <stdint.h>

struct nic_maps_entry {
  uintptr_t start, end;
  bool readable, writable; /* readable false: no access at all (PROT_NONE) */
  bool shared;    /* MAP_SHARED (or a System V segment): writes reach the object, others see them */
  bool anonymous; /* no file, no device: private anonymous memory, the heap, a stack */
};

/* Calls fn for each mapping overlapping [lo, hi), in address order, until fn returns false; stops
 * reading at the first mapping past the range. Returns 0, or -errno when the file could not be
 * read (-EMFILE: no descriptor left to open it): then what fn saw says nothing of the range, which
 * is unknown, neither mapped nor unmapped, writable nor read-only. errno is left as it was. */
int nic_maps_walk(uintptr_t lo, uintptr_t hi, bool (*fn)(const struct nic_maps_entry *e, void *arg),
                  void *arg);

#endif
