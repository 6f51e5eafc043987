/* Room left under the process's memory cgroup limits (v1 and v2), for deciding whether a chunk
 * can be prefaulted without waking the OOM killer. */
#ifndef NIC_MEMCG_H
#define NIC_MEMCG_H

#include <stddef.h>

/* Bytes the tightest memory cgroup above this process still allows (its limit less its usage,
 * page cache counted as free); SIZE_MAX when no limit applies or none can be read. */
size_t nic_memcg_headroom(void);

#endif
