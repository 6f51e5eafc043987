#define _GNU_SOURCE
#include "rcache.h"

#include "config.h"
#include "forklock.h"
#include "log.h"
#include "rcache_table.h"
#include "readable.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
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

/* Only local regions are cached (see insert_locked). */
static bool covers(const struct region *r, uintptr_t start, uintptr_t last, unsigned access) {
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

/* Registrations the backend would not drop yet: -EBUSY, a post naming them still in flight (one
 * made with a key from nic_register by a caller that let go before its completion, say). Their
 * slots stay off the free list, chained through next_free, until a retry succeeds: a slot
 * recycled at once would leave the backend's registration, and its pages, held for good. */
static uint32_t busy_head;
static uint32_t busy_count; /* read without the lock by nic_rcache_retry_busy */
static bool retrying;       /* a backend's dereg may re-enter through a free or an unmap */

/* Lock held. 0 when slot's registration is gone (or the backend forgot it), -EBUSY else. */
static int dereg_locked(uint32_t slot) {
  struct region *r = &pool[slot];
  struct nic_backend *b = backend();
  int rc = b ? b->dereg(b, &r->reg) : 0; /* none in a child of fork: the parent's registration */
  if (rc && rc != -EBUSY)
    nic_log_warn_once("registration cache: backend %s refused to deregister [%p, +%zu) (%s); the "
                      "region is dropped",
                      b->name, r->reg.base, r->reg.len, strerror(-rc));
  return rc == -EBUSY ? rc : 0;
}

static void free_slot_locked(uint32_t slot) {
  pool[slot].next_free = free_head;
  free_head = slot;
}

static void retry_busy_locked(void) {
  if (!busy_head || retrying) return;
  retrying = true;
  for (uint32_t *p = &busy_head; *p;) {
    uint32_t slot = *p;
    if (dereg_locked(slot)) {
      p = &pool[slot].next_free;
      continue;
    }
    *p = pool[slot].next_free;
    __atomic_sub_fetch(&busy_count, 1, __ATOMIC_RELAXED);
    free_slot_locked(slot);
  }
  retrying = false;
}

static void drop_ref_locked(uint32_t slot) {
  struct region *r = &pool[slot];
  if (__atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (dereg_locked(slot) == 0) {
    free_slot_locked(slot);
    return;
  }
  r->next_free = busy_head;
  busy_head = slot;
  __atomic_add_fetch(&busy_count, 1, __ATOMIC_RELAXED);
  count(&stats.busy_deregs);
}

void nic_rcache_retry_busy(void) {
  if (!__atomic_load_n(&busy_count, __ATOMIC_RELAXED)) return;
  pthread_mutex_lock(&lock);
  retry_busy_locked();
  pthread_mutex_unlock(&lock);
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
  retry_busy_locked(); /* their slots, if their posts are done */
  while ((uint32_t)nic_rcache_regions_live >= cfg->rcache_max_regions ||
         bytes_live + size > cfg->rcache_max_bytes)
    if (!evict_one_locked()) return false;
  return free_head != 0;
}

/* Widens [*start, *end) over the valid regions that overlap it (taking their access too,
 * so that a region that must give way to the new one leaves no page less usable than before)
 * and over those of the same access that touch it, as long as the union stays registrable. */
static void merge_neighbours_locked(uintptr_t *start, uintptr_t *end, unsigned *access,
                                    size_t max_bytes) {
  const uintptr_t lo = *start > PAGE ? *start - PAGE : *start, hi = *end + PAGE;
  const uintptr_t asked_start = *start, asked_end = *end;
  const unsigned asked = *access;
  for (uintptr_t a = lo; a < hi;) {
    uint32_t slot = nic_rt_next(&a, hi);
    if (!slot) break;
    struct region *r = &pool[slot];
    uintptr_t s = r->start < *start ? r->start : *start, e = r->end > *end ? r->end : *end;
    bool overlaps = r->start < asked_end && asked_start < r->end;
    if (r->valid && (overlaps || r->reg.access == asked) && e - s <= max_bytes) {
      *start = s;
      *end = e;
      *access |= r->reg.access;
    }
    a = r->end > a ? r->end : a + PAGE;
  }
}

/* Takes every valid region with a page in [start, end) out of the cache. Regions never overlap
 * and each is in the table for all its pages, so walking the table finds them all. */
static unsigned invalidate_range_locked(uintptr_t start, uintptr_t end) {
  unsigned n = 0;
  for (uintptr_t a = start; a < end;) {
    uint32_t slot = nic_rt_next(&a, end);
    if (!slot) break;
    a = pool[slot].end > a ? pool[slot].end : a + PAGE;
    if (pool[slot].valid) {
      invalidate_locked(slot);
      n++;
    }
  }
  return n;
}

/* -EAGAIN: pages of [busy[0], busy[1]) are write-protected now (nic_backend_reg). */
static int insert_locked(uintptr_t start, uintptr_t end, unsigned access,
                         struct nic_rcache_ref *out, uintptr_t busy[2]) {
  struct nic_backend *b = backend();
  if (!b) return -ENODEV;
  if (!pool_ready_locked()) return -ENOMEM;
  if (end - start > b->caps.max_region_bytes) return -ERANGE;
  /* Else the NIC refuses it, or worse the sim takes it and faults reading it. */
  if (!nic_range_readable((const void *)start, end - start)) return -EFAULT;
  /* A remote key reaches every page of its registration with every right it carries, for as
   * long as the registration lives. So a request with remote access gets a registration of
   * exactly its pages and rights that nobody else is given and that its release deregisters:
   * cached, it would outlive the last nic_unregister (until evicted) and be handed to later
   * requests, each keeping the peer's access alive, or giving a peer more than was asked. */
  const bool cached = !(access & REMOTE);
  if (cached) {
    merge_neighbours_locked(&start, &end, &access, b->caps.max_region_bytes);
    /* Every page belongs to one region at most: a page the table gave to the new region would
     * hide an older one from the invalidations of that page, and the older one, still valid
     * through its other pages, would go on handing out a registration of pages since
     * replaced. So whatever overlaps the new region leaves the cache first (merged into it, or
     * too large to merge); users in flight keep theirs. */
    invalidate_range_locked(start, end);
    if (!make_room_locked(end - start)) return -ENOSPC;
  } else if (!free_head) {
    return -ENOSPC;
  }
  /* Taken off the free list before the backend runs, which may re-enter (see lock). */
  uint32_t slot = free_head;
  struct region *r = &pool[slot];
  free_head = r->next_free;
  int rc = nic_backend_reg(b, (void *)start, end - start, access, &r->reg);
  if (rc == -EAGAIN) busy[0] = start, busy[1] = end;
  if (rc == 0 && cached && !nic_rt_set(start, end, slot)) {
    __atomic_store_n(&r->refs, 1, __ATOMIC_RELEASE); /* nobody posted with it: goes at once */
    drop_ref_locked(slot);
    return -ENOMEM;
  }
  if (rc) {
    free_slot_locked(slot);
    return rc;
  }
  r->start = start;
  r->end = end;
  r->clock = 1;
  count(&stats.registrations);
  if (cached) {
    __atomic_store_n(&r->refs, 2, __ATOMIC_RELEASE); /* the table's and the caller's */
    __atomic_store_n(&r->valid, 1, __ATOMIC_RELEASE);
    bytes_live += end - start;
    __atomic_add_fetch(&nic_rcache_regions_live, 1, __ATOMIC_RELAXED);
  } else {
    __atomic_store_n(&r->refs, 1, __ATOMIC_RELEASE); /* the caller's alone */
    __atomic_store_n(&r->valid, 0, __ATOMIC_RELEASE);
  }
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
  const bool cached = !(access & REMOTE); /* see insert_locked */
  if (cached && lookup(start, last, access, out)) {
    count(&stats.hits);
    return 0;
  }
  for (;;) {
    pthread_mutex_lock(&lock);
    int rc = 0;
    uintptr_t busy[2];
    if (cached && lookup(start, last, access, out)) {
      count(&stats.hits); /* another thread registered it meanwhile */
    } else {
      count(&stats.misses);
      rc = insert_locked(start & ~(PAGE - 1), (last + PAGE) & ~(PAGE - 1), access, out, busy);
      if (rc && rc != -EAGAIN) count(&stats.failures);
    }
    pthread_mutex_unlock(&lock);
    if (rc != -EAGAIN) return rc;
    /* Outside the lock: the completions that make the pages writable may take it. */
    if (!nic_backend_reg_wait((void *)busy[0], busy[1] - busy[0])) {
      count(&stats.failures);
      return -ENOSPC; /* refused now: the caller copies what it can */
    }
  }
}

int nic_rcache_find(const void *p, size_t len, unsigned access, struct nic_rcache_ref *out) {
  uintptr_t start = (uintptr_t)p, last;
  if (len == 0 || __builtin_add_overflow(start, len - 1, &last)) return -ERANGE;
  if ((access & REMOTE) || !lookup(start, last, access, out)) return -ENOENT;
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
  retry_busy_locked();
  unsigned n = invalidate_range_locked(start, end);
  __atomic_add_fetch(&stats.invalidations, n, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&lock);
}

void nic_rcache_get_stats(struct nic_rcache_stats *out) {
  pthread_mutex_lock(&lock);
  *out = stats;
  out->busy = busy_count;
  out->regions = (uint32_t)nic_rcache_regions_live;
  out->bytes = bytes_live;
  pthread_mutex_unlock(&lock);
}
