/* What the interposed calls that take pages out of an address range (munmap, mremap, madvise
 * dropping pages, a fixed mmap or shmat over them, shmdt, dlclose) do first: the registration
 * cache forgets the range, and the sim NIC keeps what its pending posts still have to read
 * there, as a NIC holding the pinned pages would. */
#ifndef NIC_LEAVING_H
#define NIC_LEAVING_H

#include "rcache.h"
#include "sim_nic.h"

static inline void nic_pages_leaving(uintptr_t start, size_t len) {
  nic_rcache_invalidate(start, len);
  nic_sim_pages_leaving(start, len);
}

#endif
