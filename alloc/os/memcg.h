/* Room left under the process's memory cgroup limits (v1 and v2), for deciding whether a chunk
 * can be prefaulted without waking the OOM killer. */
#ifndef NIC_MEMCG_H
#define NIC_MEMCG_H

#include <stdbool.h>
#include <stddef.h>

/* Bytes the tightest memory cgroup above this process still allows (its limit less its usage,
 * page cache counted as free); SIZE_MAX when no limit applies or none can be read. */
size_t nic_memcg_headroom(void);
/* The same, always looked up: for memory about to be faulted in whole (a prefault past a limit
 * wakes the OOM killer), where nic_memcg_headroom may answer from a look that found no limit up
 * to a second ago (memcg.c). */
size_t nic_memcg_headroom_now(void);
/* The same for one hierarchy: the smallest room left in mount + cgroup_path and each cgroup
 * above it up to mount (v1: memory.limit_in_bytes, memory.usage_in_bytes and the file LRU lists
 * of memory.stat; v2: memory.max, memory.current, memory.stat). SIZE_MAX when no level has a
 * limit. */
size_t nic_memcg_room_up_from(const char *mount, const char *cgroup_path, bool v1);

#endif
