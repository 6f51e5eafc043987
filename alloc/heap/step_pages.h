/* Giving back pages inside a step that stays backed and registered. mimalloc decommits the
 * spans it frees (after its decommit delay); a step keeps its pages pinned until every slice of
 * it is free (steps.h), which after a random shrink is never. Here a decommitted range goes back
 * to the OS at once, in units of the step's page size (64 KiB slices on 4 KiB pages, 2 MiB on
 * transparent huge pages; never on hugetlb pages, see step_pages.c), when no registration of
 * the step holds page references.
 *
 * What each backend allows: the sim NIC, and DPDK's ports whose drivers reach memory through the
 * CPU (net_ring, net_null...) in IOVA-as-VA mode, read memory by address when they send, so
 * their registrations stay valid over new pages (backend caps.pages_follow). io_uring fixed
 * buffers, verbs MRs (without on-demand paging) and DPDK registrations otherwise (a physical
 * address per page in IOVA-as-PA mode, a device's DMA mapping) hold or record the pages they were
 * given: a page dropped under them would leave the NIC with the old page. A step registered with
 * one of those keeps all its pages (its dropped units are faulted in again before the registration
 * is made), until that registration is dropped with the step.
 *
 * Everything here runs under the chunk lock, except the lock-free test on the commit path. */
#ifndef NIC_STEP_PAGES_H
#define NIC_STEP_PAGES_H

#include <stdbool.h>
#include <stddef.h>

/* mimalloc decommitted [addr, addr + len) (its slice bits are clear): drops every unit of a
 * backed step that lies in it or overlaps it and holds no committed slice. */
void nic_step_pages_drop(void *addr, size_t len);
/* mimalloc commits [addr, addr + len) again: faults its dropped units in (0 or -ENOMEM). */
int nic_step_pages_refill(void *addr, size_t len);

/* A registration that holds page references is about to be made of the step: faults in its
 * dropped units and keeps any from being dropped until the matching unhold (0 or -ENOMEM). */
int nic_step_pages_hold_locked(unsigned index, unsigned step);
void nic_step_pages_unhold_locked(unsigned index, unsigned step);
/* Whether pages of the step may be given back now: backed, of a kind given back in parts, and no
 * registration holds page references (sub_pages.h asks too). */
bool nic_step_pages_may_drop_locked(unsigned index, unsigned step);
/* The step's memory was given back whole (or is backed anew): nothing is dropped in it, and no
 * block is held back there (sub_pages.h). */
void nic_step_pages_forget_locked(unsigned index, unsigned step);
/* The step was faulted in whole while its memory stayed: its dropped units are in again. The
 * blocks sub_pages.h holds back there stay off mimalloc's lists, faulted in or not, so its map
 * keeps them: a second free of one is still a double free. */
void nic_step_pages_faulted_in_locked(unsigned index, unsigned step);
/* Bytes of the step given back while it stays backed. */
size_t nic_step_pages_dropped_bytes(unsigned index, unsigned step);

#endif
