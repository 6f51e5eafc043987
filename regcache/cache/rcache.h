/* The registration cache: registrations for memory outside the dataplane arenas (control heap,
 * stack, static data, mmap), so a serializer can hand any pointer to the NIC. A hit is a lookup
 * in rcache_table plus one reference count; a miss registers the page-aligned range (merged with
 * neighbouring registrations) and caches it. Regions never overlap. Remote access is never
 * cached: each such request gets a registration of exactly its pages and rights, of its own,
 * deregistered when it is released. Nor is memory whose pages may change with no call the cache
 * hears of (range_kind.h: shared or file-backed memory, another thread's stack): a request for
 * it gets a registration of its own in the same way. Regions beyond the cache's limits are
 * evicted, least recently used first (CLOCK). Invalidation is exact for what is cached:
 * free/realloc of a block inside a region, munmap/mremap/madvise of its pages and the exit of
 * the thread whose stack it is remove it at once, from every cache; users in flight keep their
 * reference, and the backend registration goes when the last one lets go.
 *
 * A cache is an instance over one backend (nic_rcache_create), so that it can be used, and
 * tested, over any ops table. The runtime's own is nic_rcache_process(): over the default
 * backend, with the limits NICMALLOC_RCACHE_MAX_REGIONS / _MAX_BYTES, made on first use; every
 * other started backend gets one of its own with the same limits (nic_rcache_of). A cache per
 * backend rather than one keyed by backend: a hit stays one table lookup (the table gives a page
 * to one region only, so regions of two backends over one page could not both be in it), each
 * backend's limits stand for its own device's translation table, and invalidation already
 * reaches every cache. */
#ifndef NIC_RCACHE_H
#define NIC_RCACHE_H

#include "backend.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct nic_rcache;

struct nic_rcache_params {
  /* Registers and deregisters the cache's regions; must outlive the cache. */
  struct nic_backend *backend;
  /* Cached regions and bytes at most; 0 takes NICMALLOC_RCACHE_MAX_REGIONS / _MAX_BYTES. */
  uint32_t max_regions;
  size_t max_bytes;
  const char *name; /* for messages; copied (NULL: "rcache") */
};

/* NULL with errno EINVAL (no backend, or more regions than slots can number) or ENOMEM. Takes
 * no lock of the allocator's and never calls malloc. */
struct nic_rcache *nic_rcache_create(const struct nic_rcache_params *params);
/* Deregisters every cached region and frees the cache. -EBUSY, destroying nothing, while a user
 * still holds a reference or the backend refuses to drop a registration as busy (then the
 * regions it did drop are gone from the cache): call again once they let go. No other call on
 * the cache may run meanwhile or after. -EINVAL for NULL or the process-wide cache. */
int nic_rcache_destroy(struct nic_rcache *c);

/* The runtime's cache, over the process-wide backend (static: the accessor costs nothing). */
extern struct nic_rcache nic_rcache_process_instance __attribute__((visibility("hidden")));
static inline struct nic_rcache *nic_rcache_process(void) {
  return &nic_rcache_process_instance;
}

/* Backend b's cache (b a started backend): the process-wide one for the default backend, else
 * one made for b on first use. NULL when it cannot be made (no memory). */
struct nic_rcache *nic_rcache_of(struct nic_backend *b);
/* nic_register (nicmalloc.h) with backend b, a started one, instead of the default: the chunk's
 * registration with b, or a region of b's cache (release: nic_rcache_release_own_in). */
struct nic_region_ref;
/* nic_register for nicmalloc's own calls (scatter-gather entries, bounce slabs, receive
 * buffers), which say their errors themselves: nothing counted or said here. An arena range's
 * cache_slot is its step's generation (chunks.h), not 0: what an array entry records. */
int nic_register_quiet(const void *p, size_t len, unsigned access, struct nic_region_ref *out);
int nic_register_with(struct nic_backend *b, const void *p, size_t len, unsigned access,
                      struct nic_region_ref *out);

struct nic_rcache_ref {
  uint32_t slot; /* pass to nic_rcache_release with the same cache; names the slot and the low
                  * bits of its generation then */
  uint32_t gen;  /* the slot's whole generation then: nic_rcache_release_checked refuses a
                  * reference whose slot and generation are not the region's now */
  struct nic_registration reg;
};

/* An access bit of nic_rcache_acquire alone, never passed to a backend: the caller gets a
 * registration of exactly its pages, its own, as remote access always does (not cached, not
 * shared, deregistered by its release). For dataplane ranges across a step end, whose pages the
 * steps' registrations already pin: the cache is not told when a dataplane block is freed. */
#define NIC_RCACHE_OWN (1u << 16)

/* Finds or makes a registration covering [p, p+len) with at least the given access (with remote
 * access or NIC_RCACHE_OWN, or over memory the cache does not keep: makes one of exactly its
 * pages and rights, which nic_rcache_region_current calls stale at once; with remote access its
 * pages are held, nic_rcache_page_guard), and holds it until nic_rcache_release. A miss may
 * allocate (the calling thread's set-up, its stack's bounds): call it under no lock of nicmalloc's.
 * Returns 0, -EFAULT (range not mapped), -ENOSPC (over the limits with nothing evictable), -ERANGE
 * (len 0, overflow, larger than the backend's largest registration, or, cached, than the cache's
 * max_bytes: refused before anything is evicted), or the backend's error. */
int nic_rcache_acquire(struct nic_rcache *c, const void *p, size_t len, unsigned access,
                       struct nic_rcache_ref *out);
void nic_rcache_release(struct nic_rcache *c, uint32_t slot);
/* For the message of nic_rcache_acquire's -ERANGE for [p, p+len): 0 when the length is 0 or the
 * range wraps, else the limit its pages are over, the backend's largest registration
 * (*of_cache false) or the cache's max_bytes (true). */
size_t nic_rcache_limit_passed(struct nic_rcache *c, const void *p, size_t len, bool *of_cache);
/* For references that come from outside (nic_unregister), slot and gen as handed out:
 * -EINVAL, releasing nothing, when the slot holds no reference of a user (released already,
 * never handed out, out of range) or now holds another registration than the one this reference
 * was handed out for; -ESTALE, the reference let go, when its registration (remote access) was
 * revoked as its pages left. */
int nic_rcache_release_checked(struct nic_rcache *c, uint32_t slot, uint32_t gen);
/* For nicmalloc's own references to the process-wide cache (scatter-gather entries), which are
 * right by construction: nic_rcache_release inside the internal scope, as nic_unregister runs
 * it. */
void nic_rcache_release_own(uint32_t slot);
/* The same for a reference to cache c (nic_rcache_of). */
void nic_rcache_release_own_in(struct nic_rcache *c, uint32_t slot);
/* Like nic_rcache_acquire, but never registers: -ENOENT when no cached region covers the range
 * (always for remote access). Used under NIC translation-cache pressure, where a new
 * registration would cost more than a copy. */
int nic_rcache_find(struct nic_rcache *c, const void *p, size_t len, unsigned access,
                    struct nic_rcache_ref *out);

/* Whether the region at slot, which the caller holds a reference to, still describes the memory
 * it was registered over: false once pages it covers were unmapped, remapped or dropped (the
 * registration then holds pages the process no longer has there), and always for a registration
 * of a request's own, which nothing follows (a post registers such an entry anew: sga_post.c). */
bool nic_rcache_region_current(const struct nic_rcache *c, uint32_t slot);

/* Evicts one idle cached region (least recently used, never one a user holds) of a cache over
 * backend b, for a registration b refused for want of room (-ENOSPC, -ENOMEM): a dataplane
 * step's (chunk_reg.c), which the cache's regions must never keep out. Whether one went; the
 * caller asks b again, and again here while b still refuses. A cache's own misses do the same. */
bool nic_rcache_make_room(struct nic_backend *b);
/* Drops the cached regions overlapping [start, start+len) from every cache: the pages left. */
void nic_rcache_invalidate(uintptr_t start, size_t len);
/* Deregisters the regions the backend refused as busy (a post naming them was in flight) when
 * their posts are done. Also done by every call above that takes the cache's lock; the reaper
 * and nic_poll call this so that none waits for the next miss. One load when there are none. */
void nic_rcache_retry_busy(struct nic_rcache *c);
/* The same for every runtime cache (nic_rcache_process and nic_rcache_of's). */
void nic_rcache_retry_busy_all(void);
/* Makes the deregistrations this thread deferred while inside a backend's call (a region of
 * that backend invalidated by a free or an unmap the backend made: backend_calls.c); called as
 * the thread's outermost backend call returns. */
void nic_rcache_retry_deferred(void);

/* A registration with remote access holds its pages through the guard the layer that defers
 * frees installs (safety): hold(start, end) makes every free of a block touching the pages wait
 * (false: it cannot, and the registration is refused with -ENOMEM); unhold lets them go once the
 * registration is off the NIC, deregistered by its release or revoked when the pages left (an
 * unmap, a mapping over them: nic_rcache_invalidate), lock-free under the cache's lock; unheld
 * runs the frees that waited, called without the cache's lock by nic_rcache_frees_may_go. */
struct nic_rcache_page_guard {
  bool (*hold)(uintptr_t start, uintptr_t end);
  void (*unhold)(uintptr_t start, uintptr_t end);
  void (*unheld)(void);
};
void nic_rcache_page_guard_set(const struct nic_rcache_page_guard *g);
/* Runs the guard's unheld if pages were let go since: after a release (nic_unregister), and on
 * the reaper's passes. One load when none were. */
void nic_rcache_frees_may_go(void);

/* Nonzero while any cache holds a region: free's one-load filter. */
extern int nic_rcache_regions_live __attribute__((visibility("hidden")));

struct nic_rcache_stats {
  uint64_t hits, misses, evictions, invalidations, registrations, failures;
  uint64_t busy_deregs; /* regions whose deregistration the backend refused as busy at first */
  uint32_t busy;        /* of those, not deregistered yet (retried later) */
  uint32_t regions;     /* cached */
  size_t bytes;
  uint32_t own_regions; /* a request's own (remote access, a range across dataplane steps,
                         * memory the cache does not keep) */
  size_t own_bytes;
};
void nic_rcache_get_stats(struct nic_rcache *c, struct nic_rcache_stats *out);
/* Sums the statistics of every runtime cache (the process-wide one and nic_rcache_of's). */
void nic_rcache_get_stats_all(struct nic_rcache_stats *out);

/* The caches nic_rcache_create made (nic_rcache_of's among them) that invalidation walks: while
 * there are none, a free or an unmap that touches no cached page takes no lock. For tests. */
unsigned nic_rcache_made_count(void);
/* Tests of the runtime give the process-wide cache their own backend (NULL: the process's). */
void nic_rcache_use_backend(struct nic_backend *b);

#ifdef __cplusplus
}
#endif
#endif
