/* Backing one chunk of the reserved range with real memory: the largest page kind available,
 * locked in memory. */
#ifndef NIC_PIN_H
#define NIC_PIN_H

#include "nicmalloc.h"

#include <stdbool.h>
#include <stddef.h>

struct nic_mapping {
  enum nic_page_kind kind; /* what the chunk really got */
  bool pinned;             /* mlock succeeded */
  int pin_errno;           /* why not, when !pinned */
  bool populated;          /* every page faulted in (else each is locked as it is touched) */
};

/* "4k", "thp", "2m", "1g" or "none": nic_page_kind_name's answer, for the runtime's own lines. */
const char *nic_page_kind_str(enum nic_page_kind kind);

/* A chunk mapped whole but backed by nothing yet: readable, writable, MAP_NORESERVE over its
 * part of the reservation. Steps of it are backed later (nic_back_step). Returns 0 or -errno
 * with the reservation restored. */
int nic_map_lazy(void *addr, size_t len);
/* Backs one step of a lazily mapped chunk: hugetlb (`want` and smaller) when no page of it was
 * written yet, faulted in whole; else ordinary pages in place (their bytes kept), locked as they
 * are touched, or with populate (or where the kernel cannot lock on fault) faulted in whole and
 * locked now (a step locked as touched needs room under the memory cgroup's limit for itself and
 * lazy_bytes, the part of earlier such steps not yet in memory). Returns 0 (out says the kind,
 * whether it is pinned and whether it is populated),
 * or -errno with the step as it was: -EDQUOT when faulting it in would not fit under the memory
 * cgroup's limit. With pin_or_nothing (NICMALLOC_ON_PIN_FAIL=fail) a step that cannot be locked
 * is left as it was, nothing faulted in for it (out->pinned false); only where the kernel cannot
 * lock on fault (before Linux 4.4, or under Valgrind) are its pages faulted in before the lock is
 * asked for, and kept. */
int nic_back_step(void *addr, size_t len, enum nic_page_kind want, bool populate, size_t lazy_bytes,
                  bool pin_or_nothing, struct nic_mapping *out);
/* Faults in every page of a step backed without populate (the lock covers them as they come),
 * in transparent huge pages where want allows and none of a 2 MiB range was touched yet: before
 * the NIC is given it. Never changes a byte of it: blocks may live there already. 0 (m's kind
 * and populated updated), or -errno (-EDQUOT as nic_back_step; -EFAULT where a page of it is not
 * writable, as the program may have made it). */
int nic_populate_step(void *addr, size_t len, enum nic_page_kind want, struct nic_mapping *m);
/* Locks a range in memory without faulting in or writing any page (MLOCK_ONFAULT): the pages
 * present now and every later fault. mlock faults a private writable range in for write, which
 * waits on a page write-protected by userfaultfd until it is released. 0, -errno for a refusal
 * (RLIMIT_MEMLOCK: ENOMEM, EPERM, EAGAIN), or -ENOTSUP where the kernel cannot lock on fault
 * (before Linux 4.4, or under Valgrind). */
int nic_lock_step_in_place(void *addr, size_t len);
/* Bytes of the range in memory now (mincore): what a step locked as touched holds. Where the
 * kernel cannot say, all of it, and *known (if given) is false. */
size_t nic_resident_bytes(void *addr, size_t len, bool *known);
/* Gives a step's memory back to the OS: unlocked, readable, writable, backed by nothing. */
void nic_release_step_memory(void *addr, size_t len);
/* Gives a released chunk's memory back to the OS. The range stays readable and writable (empty,
 * unpopulated) so that a late write by mimalloc to a segment it just freed can never fault. */
void nic_release_chunk_memory(void *addr, size_t len);
/* Gives the memory back to the OS and restores the PROT_NONE reservation. */
void nic_unmap_chunk(void *addr, size_t len);
/* Free pages in the hugetlb pool of that page size. */
size_t free_hugepages_of(size_t page_size);
/* Puts PROT_NONE, MAP_NORESERVE address space at addr (MAP_FIXED). Returns 0 or -errno. */
int nic_reserve_fixed(void *addr, size_t len);

#endif
