#define _GNU_SOURCE
#include "rcache.h"

#include "config.h"
#include "forklock.h"
#include "log.h"
#include "rcache_table.h"
#include "readable.h"

#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE ((uintptr_t)1 << NIC_RT_PAGE_SHIFT)

/* Region structs live in a pool that is never unmapped, so a reader that loaded a slot from the
 * table can always look at it; it takes a reference only while the count is nonzero and then
 * checks the slot still describes the range (a recycled slot fails that check). */
struct region {
  uintptr_t start, end;
  struct nic_registration reg;
  int refs;  /* the table's one while valid, plus one per user */
  int valid; /* in the table */
  int clock; /* referenced since the last eviction sweep */
  uint32_t next_free;
};

int nic_rcache_regions_live;

/* Recursive: a backend may free memory inside reg/dereg, and that free invalidates here. */
static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
/* Held across fork after the allocator's locks (a chunk or huge-cache lock holder may unmap
 * memory, whose interposed call takes this one), so a child that frees or unmaps memory the
 * cache covers, or asks for statistics, does not wait on a lock a parent thread held. */
NIC_FORKLOCK_RECURSIVE(rcache, NIC_FORK_RCACHE, &lock, NULL);
static struct region *pool; /* slot 0 unused: 0 means "no region" in the table */
static uint32_t pool_slots, free_head, clock_hand;
static size_t bytes_live;
static struct nic_backend *backend_override;
static struct nic_rcache_stats stats;

static struct nic_backend *backend(void) {
  return backend_override ? backend_override : nic_backend_active();
}

void nic_rcache_use_backend(struct nic_backend *b) {
  backend_override = b;
}

static void count(uint64_t *counter) {
  __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

/* Room for every cached region plus as many again held only by users in flight. */
static bool pool_ready_locked(void) {
  if (pool) return true;
  uint32_t slots = nic_config()->rcache_max_regions * 2 + 64;
  void *p = mmap(NULL, (size_t)slots * sizeof *pool, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  pool = p;
  for (uint32_t i = 1; i < slots; i++)
    pool[i].next_free = i + 1 < slots ? i + 1 : 0;
  free_head = 1;
  __atomic_store_n(&pool_slots, slots, __ATOMIC_RELEASE); /* last: a checked release reads it */
  return true;
}

#define REMOTE (NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE)

/* A remote key reaches every page of its region, so a remote request takes only a region of
 * exactly its own pages: a wider one would let the peer into pages nobody asked it to see. */
static bool covers(const struct region *r, uintptr_t start, uintptr_t last, unsigned access) {
  if (access & REMOTE)
    return r->start == (start & ~(PAGE - 1)) && r->end == (last & ~(PAGE - 1)) + PAGE &&
           (r->reg.access & access) == access;
  return r->start <= start && last < r->end && (r->reg.access & access) == access;
}

/* Takes a reference unless the region is being torn down (count already zero). */
static bool try_ref(struct region *r) {
  int refs = __atomic_load_n(&r->refs, __ATOMIC_ACQUIRE);
  while (refs > 0)
    if (__atomic_compare_exchange_n(&r->refs, &refs, refs + 1, true, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return true;
  return false;
}

static void drop_ref_locked(uint32_t slot) {
  struct region *r = &pool[slot];
  if (__atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  struct nic_backend *b = backend();
  if (b) b->dereg(b, &r->reg); /* none in a child of fork: the registration is the parent's */
  r->next_free = free_head;
  free_head = slot;
}

static void invalidate_locked(uint32_t slot) {
  struct region *r = &pool[slot];
  if (!r->valid) return;
  __atomic_store_n(&r->valid, 0, __ATOMIC_RELEASE);
  nic_rt_clear(r->start, r->end, slot);
  bytes_live -= r->end - r->start;
  __atomic_sub_fetch(&nic_rcache_regions_live, 1, __ATOMIC_RELAXED);
  drop_ref_locked(slot);
}

/* CLOCK: the first valid region nobody uses and nobody touched since the last sweep. */
static bool evict_one_locked(void) {
  for (uint32_t n = 0; n < 2 * pool_slots; n++) {
    uint32_t slot = clock_hand = clock_hand + 1 < pool_slots ? clock_hand + 1 : 1;
    struct region *r = &pool[slot];
    if (!r->valid || __atomic_load_n(&r->refs, __ATOMIC_ACQUIRE) != 1) continue;
    if (__atomic_exchange_n(&r->clock, 0, __ATOMIC_RELAXED)) continue;
    invalidate_locked(slot);
    count(&stats.evictions);
    return true;
  }
  return false;
}

static bool make_room_locked(size_t size) {
  const struct nic_config *cfg = nic_config();
  while ((uint32_t)nic_rcache_regions_live >= cfg->rcache_max_regions ||
         bytes_live + size > cfg->rcache_max_bytes)
    if (!evict_one_locked()) return false;
  return free_head != 0;
}

/* Widens [*start, *end) over the valid regions of the same access that overlap or touch it,
 * as long as the union stays registrable. */
static void merge_neighbours_locked(uintptr_t *start, uintptr_t *end, unsigned access,
                                    size_t max_bytes) {
  uintptr_t lo = *start > PAGE ? *start - PAGE : *start, hi = *end + PAGE;
  for (uintptr_t a = lo; a < hi;) {
    uint32_t slot = nic_rt_next(&a, hi);
    if (!slot) break;
    struct region *r = &pool[slot];
    uintptr_t s = r->start < *start ? r->start : *start, e = r->end > *end ? r->end : *end;
    if (r->valid && r->reg.access == access && e - s <= max_bytes) {
      *start = s;
      *end = e;
    }
    a = r->end > a ? r->end : a + PAGE;
  }
}

static int insert_locked(uintptr_t start, uintptr_t end, unsigned access,
                         struct nic_rcache_ref *out) {
  struct nic_backend *b = backend();
  if (!b) return -ENODEV;
  if (!pool_ready_locked()) return -ENOMEM;
  if (end - start > b->caps.max_region_bytes) return -ERANGE;
  /* Else the NIC refuses it, or worse the sim takes it and faults reading it. */
  if (!nic_range_readable((const void *)start, end - start)) return -EFAULT;
  if (!(access & REMOTE)) /* see covers */
    merge_neighbours_locked(&start, &end, access, b->caps.max_region_bytes);
  if (!make_room_locked(end - start)) return -ENOSPC;
  /* Taken off the free list before the backend runs, which may re-enter (see lock). */
  uint32_t slot = free_head;
  struct region *r = &pool[slot];
  free_head = r->next_free;
  int rc = b->reg(b, (void *)start, end - start, access, &r->reg);
  if (rc == 0 && !nic_rt_set(start, end, slot)) {
    b->dereg(b, &r->reg);
    rc = -ENOMEM;
  }
  if (rc) {
    r->next_free = free_head;
    free_head = slot;
    return rc;
  }
  r->start = start;
  r->end = end;
  r->clock = 1;
  __atomic_store_n(&r->refs, 2, __ATOMIC_RELEASE); /* the table's and the caller's */
  __atomic_store_n(&r->valid, 1, __ATOMIC_RELEASE);
  /* Regions the new one swallowed no longer own any page: retire them. */
  for (uint32_t i = 1; i < pool_slots; i++)
    if (i != slot && pool[i].valid && pool[i].start >= start && pool[i].end <= end)
      invalidate_locked(i);
  bytes_live += end - start;
  __atomic_add_fetch(&nic_rcache_regions_live, 1, __ATOMIC_RELAXED);
  count(&stats.registrations);
  out->slot = slot;
  out->reg = r->reg;
  return 0;
}

static bool lookup(uintptr_t start, uintptr_t last, unsigned access, struct nic_rcache_ref *out) {
  uint32_t slot = nic_rt_get(start);
  if (!slot || !pool) return false;
  struct region *r = &pool[slot];
  if (!try_ref(r)) return false;
  if (__atomic_load_n(&r->valid, __ATOMIC_ACQUIRE) && covers(r, start, last, access) &&
      nic_rt_get(start) == slot) {
    if (!r->clock) __atomic_store_n(&r->clock, 1, __ATOMIC_RELAXED);
    out->slot = slot;
    out->reg = r->reg;
    return true;
  }
  nic_rcache_release(slot);
  return false;
}

int nic_rcache_acquire(const void *p, size_t len, unsigned access, struct nic_rcache_ref *out) {
  uintptr_t start = (uintptr_t)p, last;
  if (len == 0 || __builtin_add_overflow(start, len - 1, &last) || last >= UINTPTR_MAX - PAGE)
    return -ERANGE;
  if (lookup(start, last, access, out)) {
    count(&stats.hits);
    return 0;
  }
  pthread_mutex_lock(&lock);
  int rc = 0;
  if (lookup(start, last, access, out)) {
    count(&stats.hits); /* another thread registered it meanwhile */
  } else {
    count(&stats.misses);
    rc = insert_locked(start & ~(PAGE - 1), (last + PAGE) & ~(PAGE - 1), access, out);
    if (rc) count(&stats.failures);
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

int nic_rcache_find(const void *p, size_t len, unsigned access, struct nic_rcache_ref *out) {
  uintptr_t start = (uintptr_t)p, last;
  if (len == 0 || __builtin_add_overflow(start, len - 1, &last)) return -ERANGE;
  if (!lookup(start, last, access, out)) return -ENOENT;
  count(&stats.hits);
  return 0;
}

void nic_rcache_release(uint32_t slot) {
  struct region *r = &pool[slot];
  /* Only the last reference needs the lock (it deregisters and recycles the slot). */
  int refs = __atomic_load_n(&r->refs, __ATOMIC_ACQUIRE);
  while (refs > 1)
    if (__atomic_compare_exchange_n(&r->refs, &refs, refs - 1, true, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return;
  pthread_mutex_lock(&lock);
  drop_ref_locked(slot);
  pthread_mutex_unlock(&lock);
}

/* The table holds one reference while the region is valid, so a user's release that would
 * take the last one away (or one from a dead or unknown slot) releases nothing it owns. With
 * more than two references some user holds one whatever this caller does: no lock needed. */
int nic_rcache_release_checked(uint32_t slot) {
  if (!slot || slot >= __atomic_load_n(&pool_slots, __ATOMIC_ACQUIRE)) return -EINVAL;
  struct region *r = &pool[slot];
  int refs = __atomic_load_n(&r->refs, __ATOMIC_ACQUIRE);
  while (refs > 2)
    if (__atomic_compare_exchange_n(&r->refs, &refs, refs - 1, true, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return 0;
  pthread_mutex_lock(&lock);
  int rc = __atomic_load_n(&r->refs, __ATOMIC_ACQUIRE) > r->valid ? 0 : -EINVAL;
  if (rc == 0) drop_ref_locked(slot);
  pthread_mutex_unlock(&lock);
  return rc;
}

void nic_rcache_invalidate(uintptr_t start, size_t len) {
  if (!__atomic_load_n(&nic_rcache_regions_live, __ATOMIC_ACQUIRE) || len == 0) return;
  uintptr_t end = start + len < start ? UINTPTR_MAX : start + len;
  /* Lock-free first look: most frees and unmaps touch no cached page. */
  uintptr_t probe = start;
  if (!nic_rt_next(&probe, end)) return;
  pthread_mutex_lock(&lock);
  for (uintptr_t a = start; a < end;) {
    uint32_t slot = nic_rt_next(&a, end);
    if (!slot) break;
    a = pool[slot].end > a ? pool[slot].end : a + PAGE;
    if (pool[slot].valid) {
      invalidate_locked(slot);
      count(&stats.invalidations);
    }
  }
  pthread_mutex_unlock(&lock);
}

void nic_rcache_get_stats(struct nic_rcache_stats *out) {
  pthread_mutex_lock(&lock);
  *out = stats;
  out->regions = (uint32_t)nic_rcache_regions_live;
  out->bytes = bytes_live;
  pthread_mutex_unlock(&lock);
}
