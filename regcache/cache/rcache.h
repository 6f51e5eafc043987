/* The registration cache: registrations for memory outside the dataplane arenas (control heap,
 * stack, static data, mmap), so a serializer can hand any pointer to the NIC. A hit is a lookup
 * in rcache_table plus one reference count; a miss registers the page-aligned range (merged with
 * neighbouring registrations) and caches it. Regions never overlap. Remote access is never
 * cached: each such request gets a registration of exactly its pages and rights, of its own,
 * deregistered when it is released. Regions beyond
 * NICMALLOC_RCACHE_MAX_REGIONS / _MAX_BYTES are evicted, least recently used first (CLOCK).
 * Invalidation is exact: free/realloc of a block inside a region and munmap/mremap/madvise of
 * its pages remove it at once; users in flight keep their reference, and the backend
 * registration goes when the last one lets go. */
#ifndef NIC_RCACHE_H
#define NIC_RCACHE_H

#include "backend.h"

#include <stddef.h>
#include <stdint.h>

struct nic_rcache_ref {
  uint32_t slot; /* pass to nic_rcache_release */
  struct nic_registration reg;
};

/* Finds or makes a registration covering [p, p+len) with at least the given access (with remote
 * access: makes one of exactly its pages and rights), and holds it until nic_rcache_release.
 * Returns 0, -EFAULT (range not mapped), -ENOSPC (over the limits with nothing evictable), -ERANGE
 * (len 0, overflow, or larger than a region may be), or the backend's error. */
int nic_rcache_acquire(const void *p, size_t len, unsigned access, struct nic_rcache_ref *out);
void nic_rcache_release(uint32_t slot);
/* For references that come from outside (nic_unregister): -EINVAL, releasing nothing, when the
 * slot holds no reference of a user (released already, never handed out, out of range). */
int nic_rcache_release_checked(uint32_t slot);
/* For nicmalloc's own references (scatter-gather entries), which are right by construction:
 * nic_rcache_release inside the internal scope, as nic_unregister runs it. */
void nic_rcache_release_own(uint32_t slot);
/* Like nic_rcache_acquire, but never registers: -ENOENT when no cached region covers the range
 * (always for remote access). Used under NIC translation-cache pressure, where a new
 * registration would cost more than a copy. */
int nic_rcache_find(const void *p, size_t len, unsigned access, struct nic_rcache_ref *out);

/* Drops every cached region overlapping [start, start+len). */
void nic_rcache_invalidate(uintptr_t start, size_t len);
/* Deregisters the regions the backend refused as busy (a post naming them was in flight) when
 * their posts are done. Also done by every call above that takes the cache's lock; the reaper
 * and nic_poll call this so that none waits for the next miss. One load when there are none. */
void nic_rcache_retry_busy(void);

/* Nonzero while any region is cached: free's one-load filter. */
extern int nic_rcache_regions_live __attribute__((visibility("hidden")));

struct nic_rcache_stats {
  uint64_t hits, misses, evictions, invalidations, registrations, failures;
  uint64_t busy_deregs; /* regions whose deregistration the backend refused as busy at first */
  uint32_t busy;        /* of those, not deregistered yet (retried later) */
  uint32_t regions;
  size_t bytes;
};
void nic_rcache_get_stats(struct nic_rcache_stats *out);

/* Tests use their own backend; otherwise the process-wide one is used. */
void nic_rcache_use_backend(struct nic_backend *b);

#endif
