/* Giving back the pages of a range inside a pinned step, and taking them again, without
 * changing the mapping: the step stays one locked VMA (no munlock, which would split it into a
 * VMA per hole), so a page touched again is faulted in locked, and the address range keeps
 * whatever registration refers to it by address. Only for backends that hold no page
 * references (heap/step_pages.h says which). */
#ifndef NIC_PAGE_DROP_H
#define NIC_PAGE_DROP_H

#include <stdbool.h>
#include <stddef.h>

/* Drops the pages of [addr, addr + len) (page aligned). locked: the range is mlock'ed, which
 * plain MADV_DONTNEED refuses (EINVAL), so MADV_DONTNEED_LOCKED (Linux 5.18) is used. Returns 0
 * or -errno; on error nothing was dropped that is not faulted in again on the next touch. */
int nic_drop_pages(void *addr, size_t len, bool locked);
/* Faults [addr, addr + len) in again, writable, so no access faults later (0 or -errno). */
int nic_refill_pages(void *addr, size_t len);

#endif
