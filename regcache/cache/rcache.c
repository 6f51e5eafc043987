#define _GNU_SOURCE
#include "rcache.h"

#include "bounded_lock.h"
#include "config.h"
#include "events.h"
#include "forklock.h"
#include "lock_limit.h"
#include "log.h"
#include "map.h"
#include "page.h"
#include "range_kind.h"
#include "rcache_table.h"
#include "readable.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Region structs live in a pool that is unmapped only with its cache, so a reader that loaded a
 * slot from the table can always look at it; it takes a reference only while the count is
 * nonzero and then checks the slot still describes the range (a recycled slot fails that
 * check). */
struct region {
  uintptr_t start, end;
  struct nic_registration reg;
  int refs;  /* the table's one while valid, plus one per user */
  int valid; /* in the table */
  int clock; /* referenced since the last eviction sweep */
  uint32_t next_free;
  uint32_t gen; /* times taken off the free list: the high bits of the references handed out */
  bool foreign; /* the parent's, in a child of fork: dropped, never deregistered, here */
  bool own;     /* a registration of one request's own (UNSHARED), counted in own_regions */
  /* Remote access (see "Remote registrations" below). */
  bool held;    /* its pages hold the frees of their blocks (the page guard's) */
  bool listed;  /* on the cache's remote list, chained through remote_next / remote_prev */
  bool revoked; /* its pages left while a user held it: the key went then, not at the release */
  bool waiting; /* revoked, and the backend has not let the registration go yet */
  bool gone;    /* deregistered already (or never on this process's NIC) */
  uint32_t remote_next, remote_prev;
};

struct nic_rcache {
  /* What a hit reads first. Both are published once, rt last (see ready_locked). */
  struct nic_rt *rt;
  struct region *pool; /* slot 0 unused: 0 means "no region" in the table */
  uint32_t pool_slots, free_head, clock_hand;
  /* Registrations the backend would not drop yet: -EBUSY, a post naming them still in flight
   * (one made with a key from nic_register by a caller that let go before its completion,
   * say). Their slots stay off the free list, chained through next_free, until a retry
   * succeeds: a slot recycled at once would leave the backend's registration, and its pages,
   * held for good. */
  uint32_t busy_head;
  uint32_t busy_count;  /* read without the lock by nic_rcache_retry_busy */
  bool retrying;        /* a backend's dereg may re-enter through a free or an unmap */
  bool retry_again;     /* a slot joined the busy list while retrying: one more pass */
  bool made;            /* by nic_rcache_create (mapped), not the process-wide one */
  uint32_t regions;     /* cached, against max_regions */
  uint32_t own_regions; /* registrations of a request's own, not cached, until released */
  size_t own_bytes;
  size_t bytes_live;
  uint32_t max_regions; /* 0 until the first registration reads the settings */
  size_t max_bytes;
  struct nic_backend *backend; /* NULL: the process-wide one */
  struct nic_rcache_stats stats;
  struct nic_rcache *next, **prev_next; /* the made ones, for invalidation */
  uint32_t remote_head;                 /* registrations with remote access, while they live */
  uint32_t revokes_waiting;             /* of those, revoked and still registered */
  char name[32];
};

int nic_rcache_regions_live;

/* Misses inside insert_locked: from before the backend pins the range until the region is in the
 * table or the attempt failed (pages_left). Raised under the lock, read without it. Each also
 * counts in nic_left_watch (events.h), as each region cached or listed remote does, so that
 * pages_left is published to the cache whenever one of them may be over the pages. */
static unsigned misses_registering;

/* One lock for every cache, recursive: a backend may free or unmap memory inside reg/dereg, and
 * that invalidates every cache. With a lock per cache, two caches deregistering at once on two
 * threads could each wait for the other's lock there. Misses are the only callers that wait for
 * it (a hit takes no lock), and they wait for a registration anyway. */
static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
/* Held across fork after the allocator's locks (a chunk or huge-cache lock holder may unmap
 * memory, whose interposed call takes this one), so a child that frees or unmaps memory a
 * cache covers, or asks for statistics, does not wait on a lock a parent thread held. */
static void after_fork_child(void);
NIC_FORKLOCK_RECURSIVE(rcache, NIC_FORK_RCACHE, &lock, after_fork_child);

struct nic_rcache nic_rcache_process_instance = {.name = "process"};

/* The caches nic_rcache_create made, under the lock. While there are none, invalidation looks
 * at the process-wide cache's table without the lock first, as most frees and unmaps touch no
 * cached page; a made cache may be destroyed, so its table is only read under the lock. */
static struct nic_rcache *made;
static unsigned made_count; /* read without the lock */

static struct nic_backend *backend(const struct nic_rcache *c) {
  return c->backend ? c->backend : nic_backend_active();
}

/* The backend already open, never one opened now: what runs under the lock asks this (see
 * acquire_missed), as backend() would choose again while no default is chosen (a start refused
 * for a shortage) and open one. */
static struct nic_backend *backend_if_open(const struct nic_rcache *c) {
  return c->backend ? c->backend : nic_backend_if_open();
}

/* The caches of started backends other than the default, made on first use (under the lock). */
static struct nic_rcache *of_kind[NIC_BACKEND_KINDS];

void nic_rcache_use_backend(struct nic_backend *b) {
  nic_rcache_process_instance.backend = b;
}

static void count(uint64_t *counter) {
  __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
}

/* Room for every cached region plus as many again held only by users in flight. */
static uint32_t pool_slots_for(uint32_t max_regions) {
  return max_regions * 2 + 64;
}

/* A reference handed out names its slot and the slot's generation then, so that a release
 * from outside (nic_unregister) of a registration long gone is refused rather than taken from
 * whoever holds the slot now: a stale unregister would else deregister another caller's
 * registration, revoking its remote key. NICMALLOC_RCACHE_MAX_REGIONS (at most 2^20) leaves
 * 10 bits of generation in the token, which repeat after 1024 registrations in one slot (and
 * a freed slot is the next one taken): the whole 32-bit generation goes with the token. */
#define SLOT_BITS 22
#define SLOT_MASK ((1u << SLOT_BITS) - 1)
#define MAX_REGIONS ((SLOT_MASK - 64) / 2)

static uint32_t token_of(const struct region *r, uint32_t slot) {
  return slot | __atomic_load_n(&r->gen, __ATOMIC_RELAXED) << SLOT_BITS;
}

/* Whether token and gen name the registration slot holds now. A gen of 0, which no region has
 * (gen skips it), is a reference from a program built before cache_gen existed that copied its
 * members one by one: the token alone is asked of it, as then, rather than refusing its every
 * unregister (a remote key's pages would hold their frees for good). */
static bool names_current(const struct region *r, uint32_t slot, uint32_t token, uint32_t gen) {
  return token_of(r, slot) == token && (!gen || __atomic_load_n(&r->gen, __ATOMIC_RELAXED) == gen);
}

static inline __attribute__((always_inline)) void hand_out(const struct region *r, uint32_t slot,
                                                           struct nic_rcache_ref *out) {
  const uint32_t gen = __atomic_load_n(&r->gen, __ATOMIC_RELAXED);
  out->slot = slot | gen << SLOT_BITS;
  out->gen = gen;
  out->reg = r->reg;
}

/* What backend b can hold of the cache's regions: each takes a registration (dpdk: an extmem
 * area, caps.max_separate_regions), and a quarter of them is left to the dataplane steps and to
 * registrations of a request's own, so that regions the program holds can never take them all.
 * 0: b says no limit. */
static uint32_t backend_room(const struct nic_backend *b) {
  const uint32_t n =
      b->caps.max_separate_regions ? b->caps.max_separate_regions : b->caps.max_regions;
  return n - n / 4;
}

static bool ready_locked(struct nic_rcache *c) {
  if (c->rt) return true;
  if (!c->max_regions) c->max_regions = nic_config()->rcache_max_regions;
  const struct nic_backend *b = backend_if_open(c);
  const uint32_t room = b ? backend_room(b) : 0;
  if (room && c->max_regions > room) {
    nic_log_info("registration cache %s: %u regions at most, what backend %s holds beside its "
                 "dataplane steps (not %u)",
                 c->name, room, b->name, c->max_regions);
    c->max_regions = room;
  }
  if (!c->max_bytes) c->max_bytes = nic_config()->rcache_max_bytes;
  const uint32_t slots = pool_slots_for(c->max_regions);
  if (!c->pool) {
    void *p = nic_map_anon((size_t)slots * sizeof *c->pool, PROT_READ | PROT_WRITE, false);
    if (!p) return false;
    c->pool = p;
    for (uint32_t i = 1; i < slots; i++)
      c->pool[i].next_free = i + 1 < slots ? i + 1 : 0;
    c->free_head = 1;
    /* Before rt: a checked release reads it. */
    __atomic_store_n(&c->pool_slots, slots, __ATOMIC_RELEASE);
  }
  struct nic_rt *rt = nic_rt_create();
  if (!rt) return false;
  __atomic_store_n(&c->rt, rt, __ATOMIC_RELEASE); /* last: a lookup that sees it sees the pool */
  return true;
}

/* By system call, as it was mapped: no event for memory of the cache's own, and callable in a
 * child of fork before the allocator's hooks have run. */
static void unmap_cache(struct nic_rcache *c) {
  nic_rt_destroy(c->rt);
  if (c->pool) nic_unmap(c->pool, (size_t)c->pool_slots * sizeof *c->pool);
  nic_unmap(c, sizeof *c);
}

/* Lock held. */
static void unlist_locked(struct nic_rcache *c) {
  *c->prev_next = c->next;
  if (c->next) c->next->prev_next = c->prev_next;
  c->made = false; /* destroyed, or forgotten in a child of fork: nic_rcache_destroy refuses it */
  __atomic_sub_fetch(&made_count, 1, __ATOMIC_RELEASE);
}

struct nic_rcache *nic_rcache_create(const struct nic_rcache_params *params) {
  if (!params || !params->backend || !params->backend->reg || !params->backend->dereg ||
      params->max_regions > MAX_REGIONS) {
    errno = EINVAL;
    return NULL;
  }
  struct nic_rcache *c = nic_map_anon(sizeof *c, PROT_READ | PROT_WRITE, false);
  if (!c) {
    errno = ENOMEM;
    return NULL;
  }
  c->made = true;
  c->backend = params->backend;
  c->max_regions = params->max_regions;
  c->max_bytes = params->max_bytes;
  snprintf(c->name, sizeof c->name, "%s", params->name ? params->name : "rcache");
  pthread_mutex_lock(&lock);
  bool ok = ready_locked(c);
  if (ok) {
    c->next = made;
    c->prev_next = &made;
    if (made) made->prev_next = &c->next;
    made = c;
    __atomic_add_fetch(&made_count, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&lock);
  if (!ok) {
    unmap_cache(c);
    errno = ENOMEM;
    return NULL;
  }
  return c;
}

#define REMOTE (NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE)
#define UNSHARED (REMOTE | NIC_RCACHE_OWN) /* a registration of the request's own */

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

/* Deregistrations this thread deferred: made once its outermost backend call returns. */
static __thread bool deregs_deferred __attribute__((tls_model("initial-exec")));

/* Remote registrations. A remote key lets a peer read or write the pages of its registration
 * with no post of the program's to wait for, as long as it lives. So the pages hold the frees of
 * the blocks on them, as a nic_hold does, through the guard of the layer that defers frees
 * (safety): a block freed under a live key is not handed out again until the key is gone. And
 * the key never outlives the pages: when they leave the address space or are replaced (an unmap,
 * a fixed mapping over them...), the registration is revoked at once, its holder's release only
 * letting go of the slot. Each cache keeps them on a list for that, and the hull of all their
 * ranges lets unmaps elsewhere pass without the lock. */
static const struct nic_rcache_page_guard *page_guard;
static bool frees_waiting;   /* pages let go whose frees may have waited for them */
static unsigned remote_live; /* listed registrations, every cache */
static uintptr_t remote_lo = UINTPTR_MAX, remote_hi; /* their hull: grows until none is left */

void nic_rcache_page_guard_set(const struct nic_rcache_page_guard *g) {
  __atomic_store_n(&page_guard, g, __ATOMIC_RELEASE);
}

void nic_rcache_frees_may_go(void) {
  const struct nic_rcache_page_guard *g = __atomic_load_n(&page_guard, __ATOMIC_ACQUIRE);
  if (g && __atomic_load_n(&frees_waiting, __ATOMIC_ACQUIRE) &&
      __atomic_exchange_n(&frees_waiting, false, __ATOMIC_ACQ_REL))
    g->unheld();
}

/* Lock held. false: the pages cannot be held, and the registration must not be made. */
static bool hold_locked(struct region *r, uintptr_t start, uintptr_t end) {
  const struct nic_rcache_page_guard *g = __atomic_load_n(&page_guard, __ATOMIC_ACQUIRE);
  r->start = start;
  r->end = end;
  r->held = g && g->hold(start, end);
  return r->held || !g;
}

static void unhold_locked(struct region *r) {
  if (!r->held) return;
  r->held = false;
  page_guard->unhold(r->start, r->end);
  __atomic_store_n(&frees_waiting, true, __ATOMIC_RELEASE); /* nic_rcache_frees_may_go */
}

static void list_remote_locked(struct nic_rcache *c, uint32_t slot) {
  struct region *r = &c->pool[slot];
  r->listed = true;
  r->remote_prev = 0;
  r->remote_next = c->remote_head;
  if (c->remote_head) c->pool[c->remote_head].remote_prev = slot;
  c->remote_head = slot;
  if (r->start < remote_lo) __atomic_store_n(&remote_lo, r->start, __ATOMIC_RELAXED);
  if (r->end > remote_hi) __atomic_store_n(&remote_hi, r->end, __ATOMIC_RELAXED);
  nic_watch_left(1);
  __atomic_add_fetch(&remote_live, 1, __ATOMIC_RELEASE); /* after the hull: remote_touched */
}

static void unlist_remote_locked(struct nic_rcache *c, struct region *r) {
  r->listed = false;
  if (r->remote_prev)
    c->pool[r->remote_prev].remote_next = r->remote_next;
  else
    c->remote_head = r->remote_next;
  if (r->remote_next) c->pool[r->remote_next].remote_prev = r->remote_prev;
  nic_watch_left(-1);
  if (__atomic_sub_fetch(&remote_live, 1, __ATOMIC_RELEASE)) return;
  __atomic_store_n(&remote_lo, UINTPTR_MAX, __ATOMIC_RELAXED);
  __atomic_store_n(&remote_hi, 0, __ATOMIC_RELAXED);
}

/* Lock-free: whether [start, end) may touch a remote registration's pages. */
static bool remote_touched(uintptr_t start, uintptr_t end) {
  return __atomic_load_n(&remote_live, __ATOMIC_ACQUIRE) &&
         start < __atomic_load_n(&remote_hi, __ATOMIC_RELAXED) &&
         __atomic_load_n(&remote_lo, __ATOMIC_RELAXED) < end;
}

static void forget_own_locked(struct nic_rcache *c, struct region *r) {
  if (!r->own) return;
  r->own = false;
  c->own_regions--;
  c->own_bytes -= r->end - r->start;
}

/* Lock held. r's registration is off the NIC (or was never on this process's): no longer
 * counted, and its pages need hold nothing more. Returns 0, dereg_locked's "gone". */
static int gone_locked(struct nic_rcache *c, struct region *r) {
  r->gone = true;
  forget_own_locked(c, r);
  if (r->waiting) {
    r->waiting = false;
    c->revokes_waiting--;
    __atomic_sub_fetch(&c->busy_count, 1, __ATOMIC_RELAXED);
  }
  if (r->listed) unlist_remote_locked(c, r);
  unhold_locked(r);
  return 0;
}

/* Lock held. 0 when slot's registration is gone (or the backend forgot it), -EBUSY while a post
 * uses it, -EINPROGRESS when it must wait for this thread to leave the backend (backend_calls.c);
 * either way the slot waits on the busy list. */
static int dereg_locked(struct nic_rcache *c, uint32_t slot) {
  struct region *r = &c->pool[slot];
  if (r->foreign || r->gone) return gone_locked(c, r);
  struct nic_backend *b = backend_if_open(c);
  if (b && nic_backend_in_call(b)) {
    deregs_deferred = true;
    return -EINPROGRESS;
  }
  int rc = b ? nic_backend_dereg(b, &r->reg) : 0; /* none: a fork child made as one opened */
  if (rc && rc != -EBUSY)
    nic_log_warn_once("registration cache %s: backend %s refused to deregister [%p, +%zu) (%s); "
                      "the region is dropped",
                      c->name, b->name, r->reg.base, r->reg.len, strerror(-rc));
  return rc == -EBUSY ? rc : gone_locked(c, r);
}

static void free_slot_locked(struct nic_rcache *c, uint32_t slot) {
  c->pool[slot].next_free = c->free_head;
  c->free_head = slot;
}

static void push_busy_locked(struct nic_rcache *c, uint32_t slot) {
  c->pool[slot].next_free = c->busy_head;
  c->busy_head = slot;
}

/* Remote registrations a user holds with pages in [start, end), which are leaving or replaced:
 * a key left on them would reach whatever is mapped there next (a registration with on-demand
 * paging follows the address) or keep the old pages pinned for the peer. Those the backend
 * will not drop yet wait, counted as busy, for the next retry. The walk starts again after
 * each: a deregistration may unmap, and change the list. */
static void revoke_range_locked(struct nic_rcache *c, uintptr_t start, uintptr_t end) {
  for (uint32_t slot = c->remote_head; slot;) {
    struct region *r = &c->pool[slot];
    if (r->revoked || !__atomic_load_n(&r->refs, __ATOMIC_ACQUIRE) || r->end <= start ||
        end <= r->start) {
      slot = r->remote_next;
      continue;
    }
    r->revoked = true;
    const int rc = dereg_locked(c, slot);
    if (rc) {
      r->waiting = true;
      c->revokes_waiting++;
      __atomic_add_fetch(&c->busy_count, 1, __ATOMIC_RELAXED);
      if (rc == -EBUSY) count(&c->stats.busy_deregs);
    }
    slot = c->remote_head;
  }
}

static void retry_revokes_locked(struct nic_rcache *c) {
  for (uint32_t slot = c->remote_head; slot && c->revokes_waiting;)
    slot = c->pool[slot].waiting && !dereg_locked(c, slot) ? c->remote_head
                                                           : c->pool[slot].remote_next;
}

/* A pass takes the whole list off the cache first: a dereg that frees or unmaps drops other
 * regions, whose slots are pushed on the cache's list meanwhile, and a walk of that list would
 * lose them when it unlinks the slot before them (the head). The slots the backend still holds
 * go back; another pass takes the new ones. */
static void retry_busy_locked(struct nic_rcache *c) {
  if (c->revokes_waiting) retry_revokes_locked(c);
  if (!c->busy_head || c->retrying) return;
  c->retrying = true;
  do {
    c->retry_again = false;
    uint32_t slot = c->busy_head;
    c->busy_head = 0;
    while (slot) {
      const uint32_t next = c->pool[slot].next_free;
      if (dereg_locked(c, slot)) {
        push_busy_locked(c, slot);
      } else {
        __atomic_sub_fetch(&c->busy_count, 1, __ATOMIC_RELAXED);
        free_slot_locked(c, slot);
      }
      slot = next;
    }
  } while (c->retry_again);
  c->retrying = false;
}

static void drop_ref_locked(struct nic_rcache *c, uint32_t slot) {
  struct region *r = &c->pool[slot];
  if (__atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  forget_own_locked(c, r);
  const int rc = dereg_locked(c, slot);
  if (rc == 0) {
    free_slot_locked(c, slot);
    return;
  }
  push_busy_locked(c, slot);
  if (c->retrying) c->retry_again = true;
  __atomic_add_fetch(&c->busy_count, 1, __ATOMIC_RELAXED);
  if (rc == -EBUSY) count(&c->stats.busy_deregs);
}

void nic_rcache_retry_busy(struct nic_rcache *c) {
  if (!__atomic_load_n(&c->busy_count, __ATOMIC_RELAXED)) return;
  pthread_mutex_lock(&lock);
  retry_busy_locked(c);
  pthread_mutex_unlock(&lock);
}

static void invalidate_locked(struct nic_rcache *c, uint32_t slot) {
  struct region *r = &c->pool[slot];
  if (!r->valid) return;
  __atomic_store_n(&r->valid, 0, __ATOMIC_RELEASE);
  nic_rt_clear(c->rt, r->start, r->end, slot);
  c->bytes_live -= r->end - r->start;
  c->regions--;
  __atomic_sub_fetch(&nic_rcache_regions_live, 1, __ATOMIC_RELAXED);
  nic_watch_left(-1);
  nic_watch_ranges(-1); /* after the count: events.h */
  drop_ref_locked(c, slot);
}

/* CLOCK: the first valid region nobody uses and nobody touched since the last sweep, but for
 * those with a page in [keep_start, keep_end). */
static size_t evict_one_locked(struct nic_rcache *c, uintptr_t keep_start, uintptr_t keep_end) {
  for (uint32_t n = 0; n < 2 * c->pool_slots; n++) {
    uint32_t slot = c->clock_hand = c->clock_hand + 1 < c->pool_slots ? c->clock_hand + 1 : 1;
    struct region *r = &c->pool[slot];
    if (!r->valid || __atomic_load_n(&r->refs, __ATOMIC_ACQUIRE) != 1) continue;
    if (r->start < keep_end && keep_start < r->end) continue;
    if (__atomic_exchange_n(&r->clock, 0, __ATOMIC_RELAXED)) continue;
    const size_t bytes = r->end - r->start;
    invalidate_locked(c, slot);
    count(&c->stats.evictions);
    return bytes;
  }
  return 0;
}

/* The next valid region with a page in [*a, end), *a moved past it; 0 when there is none.
 * Regions never overlap and each is in the table for all its pages, so walking the table finds
 * them all. */
static uint32_t next_valid_locked(const struct nic_rcache *c, uintptr_t *a, uintptr_t end) {
  while (*a < end) {
    const uint32_t slot = nic_rt_next(c->rt, a, end);
    if (!slot) return 0;
    const struct region *r = &c->pool[slot];
    *a = r->end > *a ? r->end : *a + NIC_PAGE_SIZE;
    if (r->valid) return slot;
  }
  return 0;
}

/* The valid regions with a page in a range: what leaves the cache when a region over the range
 * goes in. */
struct leaving {
  uint32_t regions;
  size_t bytes;
  unsigned access;
};

static struct leaving leaving_locked(const struct nic_rcache *c, uintptr_t start, uintptr_t end) {
  struct leaving l = {0, 0, 0};
  for (uintptr_t a = start, slot; (slot = next_valid_locked(c, &a, end));) {
    const struct region *r = &c->pool[slot];
    l.regions++;
    l.bytes += r->end - r->start;
    l.access |= r->reg.access;
  }
  return l;
}

/* Room for a region over [start, end) once the regions with a page there (counted in *l) have
 * left: evicts others until the limits allow it and a slot is free (the slots not cached may all
 * be held, by registrations of a request's own or busy ones). false when nothing more can be
 * evicted; the
 * regions in the range stay either way, for the caller to take out once there is room. An
 * eviction's deregistration may free or unmap memory under other regions, those in the range
 * too, so they are counted again after each. */
static bool make_room_locked(struct nic_rcache *c, uintptr_t start, uintptr_t end,
                             struct leaving *l) {
  for (;;) {
    *l = leaving_locked(c, start, end);
    if (c->regions - l->regions < c->max_regions &&
        c->bytes_live - l->bytes + (end - start) <= c->max_bytes && c->free_head)
      return true;
    if (!evict_one_locked(c, start, end)) return false;
  }
}

/* Widens [*start, *end) over the valid regions that overlap it (taking their access too,
 * so that a region that must give way to the new one leaves no page less usable than before)
 * and over those of the same access that touch it, as long as the union stays within
 * max_bytes. */
static void merge_neighbours_locked(struct nic_rcache *c, uintptr_t *start, uintptr_t *end,
                                    unsigned *access, size_t max_bytes) {
  const uintptr_t lo = *start > NIC_PAGE_SIZE ? *start - NIC_PAGE_SIZE : *start,
                  hi = *end + NIC_PAGE_SIZE;
  const uintptr_t asked_start = *start, asked_end = *end;
  const unsigned asked = *access;
  for (uintptr_t a = lo, slot; (slot = next_valid_locked(c, &a, hi));) {
    const struct region *r = &c->pool[slot];
    uintptr_t s = r->start < *start ? r->start : *start, e = r->end > *end ? r->end : *end;
    bool overlaps = r->start < asked_end && asked_start < r->end;
    if ((overlaps || r->reg.access == asked) && e - s <= max_bytes) {
      *start = s;
      *end = e;
      *access |= r->reg.access;
    }
  }
}

/* Takes every valid region with a page in [start, end) out of the cache. */
static unsigned invalidate_range_locked(struct nic_rcache *c, uintptr_t start, uintptr_t end) {
  unsigned n = 0;
  if (!c->rt) return 0;
  for (uintptr_t a = start, slot; (slot = next_valid_locked(c, &a, end));) {
    invalidate_locked(c, (uint32_t)slot);
    n++;
  }
  return n;
}

/* A cached region for [*start, *end): merged with its neighbours when there is room for the
 * union, else alone when there is room for that (a merge takes in the pages of a region that
 * overlaps the request beyond it). Whatever overlaps the region that goes in leaves the cache,
 * but only once there is room: a request refused takes nothing out. */
static bool place_locked(struct nic_rcache *c, uintptr_t *start, uintptr_t *end, unsigned *access,
                         size_t max_region_bytes) {
  uintptr_t s = *start, e = *end;
  unsigned merged = *access;
  struct leaving l;
  merge_neighbours_locked(c, &s, &e, &merged,
                          max_region_bytes < c->max_bytes ? max_region_bytes : c->max_bytes);
  if (make_room_locked(c, s, e, &l)) {
    *start = s;
    *end = e;
    *access = merged;
  } else if ((s == *start && e == *end) || !make_room_locked(c, *start, *end, &l)) {
    return false;
  } else {
    *access |= l.access;
  }
  /* Every page belongs to one region at most: a page the table gave to the new region would
   * hide an older one from the invalidations of that page, and the older one, still valid
   * through its other pages, would go on handing out a registration of pages since
   * replaced. Users in flight keep theirs. */
  invalidate_range_locked(c, *start, *end);
  return c->free_head != 0;
}

/* Whether b's registration of [start, end) may be kept for later requests: its pages change only
 * in ways the cache hears of (range_kind.h). A backend that pins pages pins them for writing
 * then (*access gains local write), so that each is the process's own page from then on: pinned
 * for reading only (verbs without local write, on a kernel that does not break the sharing
 * itself at the pin), a page still shared copy-on-write (the zero page of memory never written, a
 * page shared with a child of fork or merged by KSM) would stay pinned while the process's next
 * write moved to a copy. Read-only memory is not kept there. */
static bool may_keep(const struct nic_backend *b, uintptr_t start, uintptr_t end,
                     unsigned *access) {
  const unsigned kind = nic_range_kind(start, end);
  if (!(kind & NIC_RANGE_CACHEABLE)) return false;
  if (b->caps.pages_follow) return true;
  if (!(kind & NIC_RANGE_WRITABLE)) return false;
  *access |= NIC_ACCESS_LOCAL_WRITE;
  return true;
}

/* Whether evicting more can let a registration of len bytes that the backend refused with -ENOMEM
 * in, let_go bytes of idle regions evicted for it so far. A full table (verbs says -ENOMEM) takes
 * it once one region went; a pin limit once as many bytes as it asks went, or never where it
 * asks for more than the limit itself: evicting then only emptied the cache, and each later miss
 * of the regions it held paid for a registration again (measured: 8 regions of 256 KiB, all
 * evicted by one request of 32 MiB under 8 MiB of RLIMIT_MEMLOCK, every one a miss after). */
static bool room_may_come(const struct nic_backend *b, size_t len, size_t let_go) {
  if (let_go >= len) return false;
  return b->caps.pages_follow || len <= nic_lock_limit();
}

/* A backend out of room (-ENOSPC: its table is full; -ENOMEM: so says a full MR table, and a
 * pin limit, which an idle region's deregistration also lets go) gets it from the idle regions,
 * least recently used first, one at a time until it takes the new registration or none is left.
 * Inside one of b's own calls a deregistration only waits (backend_calls.c): nothing to gain. */
static int register_making_room_locked(struct nic_rcache *c, struct nic_backend *b, uintptr_t start,
                                       uintptr_t end, unsigned access,
                                       struct nic_registration *out) {
  for (size_t let_go = 0;;) {
    const int rc = nic_backend_reg(b, (void *)start, end - start, access, out);
    if ((rc != -ENOSPC && rc != -ENOMEM) || nic_backend_in_call(b)) return rc;
    if (rc == -ENOMEM && !room_may_come(b, end - start, let_go)) return rc;
    retry_busy_locked(c);
    const size_t bytes = evict_one_locked(c, start, end);
    if (!bytes) return rc;
    let_go += bytes;
  }
}

bool nic_rcache_make_room(struct nic_backend *b) {
  if (!b || nic_backend_in_call(b)) return false;
  bool evicted = false;
  pthread_mutex_lock(&lock);
  struct nic_rcache *c = &nic_rcache_process_instance;
  if (c->rt && backend_if_open(c) == b) {
    retry_busy_locked(c);
    evicted = evict_one_locked(c, 0, 0);
  }
  for (c = made; c && !evicted; c = c->next)
    if (c->backend == b) {
      retry_busy_locked(c);
      evicted = evict_one_locked(c, 0, 0);
    }
  pthread_mutex_unlock(&lock);
  return evicted;
}

/* -EAGAIN: pages of [busy[0], busy[1]) are write-protected now (nic_backend_reg). */
static int insert_locked(struct nic_rcache *c, uintptr_t start, uintptr_t end, unsigned access,
                         struct nic_rcache_ref *out, uintptr_t busy[2]) {
  struct nic_backend *b = backend_if_open(c);
  if (!b) return -ENODEV; /* acquire_missed's open, before the lock, found none */
  if (!ready_locked(c)) return -ENOMEM;
  /* A remote key reaches every page of its registration with every right it carries, for as
   * long as the registration lives. So a request with remote access gets a registration of
   * exactly its pages and rights that nobody else is given and that its release deregisters:
   * cached, it would outlive the last nic_unregister (until evicted) and be handed to later
   * requests, each keeping the peer's access alive, or giving a peer more than was asked. */
  bool cached = !(access & UNSHARED);
  access &= ~(unsigned)NIC_RCACHE_OWN;
  /* Larger than the backend registers at once, or than the cache holds: refused before
   * anything is evicted for it. */
  if (end - start > b->caps.max_region_bytes || (cached && end - start > c->max_bytes))
    return -ERANGE;
  /* Else the NIC refuses it, or worse the sim takes it and faults reading it. */
  if (!nic_range_readable((const void *)start, end - start)) return -EFAULT;
  /* Memory the cache cannot follow gets a registration of the request's own. */
  if (cached) cached = may_keep(b, start, end, &access);
  retry_busy_locked(c); /* their slots, if their posts are done */
  if (cached) {
    if (!place_locked(c, &start, &end, &access, b->caps.max_region_bytes)) return -ENOSPC;
  } else {
    /* Not held against the limits, but a slot it needs all the same. */
    while (!c->free_head)
      if (!evict_one_locked(c, 0, 0)) return -ENOSPC;
  }
  /* Taken off the free list before the backend runs, which may re-enter (see lock). */
  uint32_t slot = c->free_head;
  struct region *r = &c->pool[slot];
  c->free_head = r->next_free;
  /* Read unlocked (release_checked); never 0, which names_current takes for "not given". */
  __atomic_store_n(&r->gen, r->gen + 1 ? r->gen + 1 : 1, __ATOMIC_RELAXED);
  r->revoked = r->gone = false;
  const bool remote = !cached && (access & REMOTE);
  if (remote && !hold_locked(r, start, end)) {
    free_slot_locked(c, slot);
    return -ENOMEM;
  }
  int rc = register_making_room_locked(c, b, start, end, access, &r->reg);
  if (rc == -EAGAIN) busy[0] = start, busy[1] = end;
  if (rc == 0 && cached && !nic_rt_set(c->rt, start, end, slot)) {
    __atomic_store_n(&r->refs, 1, __ATOMIC_RELEASE); /* nobody posted with it: goes at once */
    drop_ref_locked(c, slot);
    return -ENOMEM;
  }
  if (rc) {
    unhold_locked(r);
    free_slot_locked(c, slot);
    return rc;
  }
  r->start = start;
  r->end = end;
  r->clock = 1;
  r->foreign = false;
  r->own = !cached;
  count(&c->stats.registrations);
  if (cached) {
    __atomic_store_n(&r->refs, 2, __ATOMIC_RELEASE); /* the table's and the caller's */
    __atomic_store_n(&r->valid, 1, __ATOMIC_RELEASE);
    c->bytes_live += end - start;
    c->regions++;
    nic_watch_ranges(1); /* before the count: events.h */
    nic_watch_left(1);
    __atomic_add_fetch(&nic_rcache_regions_live, 1, __ATOMIC_RELAXED);
  } else {
    __atomic_store_n(&r->refs, 1, __ATOMIC_RELEASE); /* the caller's alone */
    __atomic_store_n(&r->valid, 0, __ATOMIC_RELEASE);
    c->own_regions++;
    c->own_bytes += end - start;
    if (remote) list_remote_locked(c, slot);
  }
  hand_out(r, slot, out);
  return 0;
}

static inline __attribute__((always_inline)) bool lookup(struct nic_rcache *c, uintptr_t start,
                                                         uintptr_t last, unsigned access,
                                                         struct nic_rcache_ref *out) {
  const struct nic_rt *rt = __atomic_load_n(&c->rt, __ATOMIC_ACQUIRE);
  if (!rt) return false;
  uint32_t slot = nic_rt_get(rt, start);
  if (!slot) return false;
  struct region *r = &c->pool[slot];
  if (!try_ref(r)) return false;
  if (__atomic_load_n(&r->valid, __ATOMIC_ACQUIRE) && covers(r, start, last, access) &&
      nic_rt_get(rt, start) == slot) {
    if (!r->clock) __atomic_store_n(&r->clock, 1, __ATOMIC_RELAXED);
    hand_out(r, slot, out);
    return true;
  }
  nic_rcache_release(c, slot);
  return false;
}

/* Length 0, or a range that wraps or has no page end below the top. Else *last is its last byte. */
static inline bool bad_range(uintptr_t start, size_t len, uintptr_t *last) {
  return len == 0 || __builtin_add_overflow(start, len - 1, last) ||
         *last >= UINTPTR_MAX - NIC_PAGE_SIZE;
}

size_t nic_rcache_limit_passed(struct nic_rcache *c, const void *p, size_t len, bool *of_cache) {
  const uintptr_t start = (uintptr_t)p;
  uintptr_t last;
  *of_cache = false;
  if (bad_range(start, len, &last)) return 0;
  const size_t pages =
      ((last + NIC_PAGE_SIZE) & ~(NIC_PAGE_SIZE - 1)) - (start & ~(NIC_PAGE_SIZE - 1));
  const struct nic_backend *b = backend(c);
  if (b && pages > b->caps.max_region_bytes) return b->caps.max_region_bytes;
  *of_cache = true;
  const size_t max = __atomic_load_n(&c->max_bytes, __ATOMIC_RELAXED);
  return max ? max : nic_config()->rcache_max_bytes; /* 0 until the first miss reads it */
}

/* A miss: out of line, so that the hit path saves no registers for it. */
static __attribute__((noinline)) int acquire_missed(struct nic_rcache *c, uintptr_t start,
                                                    uintptr_t last, unsigned access, bool cached,
                                                    struct nic_rcache_ref *out) {
  /* The default backend opens (a plugin's start-up: DPDK's EAL, on a thread of ours) before the
   * lock: under it, the open would wait for whatever its allocations and threads take, which a
   * fork's handler may hold while it waits for this lock (alloc/base/forklock.h). */
  (void)backend(c);
  if (cached) nic_range_kind_prepare(start, last + 1);
  for (;;) {
    pthread_mutex_lock(&lock);
    int rc = 0;
    uintptr_t busy[2] = {0, 0}; /* set with -EAGAIN */
    if (cached && lookup(c, start, last, access, out)) {
      count(&c->stats.hits); /* another thread registered it meanwhile */
    } else {
      /* Before the pin, and down again only once the region is in the table (or not to be):
       * every path out of insert_locked, each pass of the loop. */
      nic_watch_left(1);
      __atomic_add_fetch(&misses_registering, 1, __ATOMIC_SEQ_CST);
      rc = insert_locked(c, start & ~(NIC_PAGE_SIZE - 1),
                         (last + NIC_PAGE_SIZE) & ~(NIC_PAGE_SIZE - 1), access, out, busy);
      __atomic_sub_fetch(&misses_registering, 1, __ATOMIC_RELEASE);
      nic_watch_left(-1); /* after: the region's own count, if it went in, came before */
      if (rc == 0)
        count(&c->stats.misses); /* a lookup that registered a region: refusals are failures */
      else if (rc != -EAGAIN)
        count(&c->stats.failures);
    }
    pthread_mutex_unlock(&lock);
    if (rc != -EAGAIN) return rc;
    /* Outside the lock: the completions that make the pages writable may take it. */
    if (!nic_backend_reg_wait((void *)busy[0], busy[1] - busy[0])) {
      count(&c->stats.failures);
      return -ENOSPC; /* refused now: the caller copies what it can */
    }
  }
}

int nic_rcache_acquire(struct nic_rcache *c, const void *p, size_t len, unsigned access,
                       struct nic_rcache_ref *out) {
  uintptr_t start = (uintptr_t)p, last;
  if (bad_range(start, len, &last)) return -ERANGE;
  const bool cached = !(access & UNSHARED); /* see insert_locked */
  if (cached && lookup(c, start, last, access, out)) {
    count(&c->stats.hits);
    return 0;
  }
  return acquire_missed(c, start, last, access, cached, out);
}

int nic_rcache_find(struct nic_rcache *c, const void *p, size_t len, unsigned access,
                    struct nic_rcache_ref *out) {
  uintptr_t start = (uintptr_t)p, last;
  if (len == 0 || __builtin_add_overflow(start, len - 1, &last)) return -ERANGE;
  if ((access & UNSHARED) || !lookup(c, start, last, access, out)) return -ENOENT;
  count(&c->stats.hits);
  return 0;
}

void nic_rcache_release(struct nic_rcache *c, uint32_t token) {
  const uint32_t slot = token & SLOT_MASK;
  struct region *r = &c->pool[slot];
  /* Only the last reference needs the lock (it deregisters and recycles the slot). */
  int refs = __atomic_load_n(&r->refs, __ATOMIC_ACQUIRE);
  while (refs > 1)
    if (__atomic_compare_exchange_n(&r->refs, &refs, refs - 1, true, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return;
  pthread_mutex_lock(&lock);
  drop_ref_locked(c, slot);
  pthread_mutex_unlock(&lock);
}

/* The table holds one reference while the region is valid, so a user's release that would
 * take the last one away (or one from a dead or unknown slot, or one of a registration the slot
 * held before) releases nothing it owns. With more than two references some user holds one
 * whatever this caller does: no lock needed. */
int nic_rcache_release_checked(struct nic_rcache *c, uint32_t token, uint32_t gen) {
  const uint32_t slot = token & SLOT_MASK;
  if (!slot || slot >= __atomic_load_n(&c->pool_slots, __ATOMIC_ACQUIRE)) return -EINVAL;
  struct region *r = &c->pool[slot];
  const bool same = names_current(r, slot, token, gen); /* gen changes only while refs is 0 */
  int refs = __atomic_load_n(&r->refs, __ATOMIC_ACQUIRE);
  while (same && refs > 2)
    if (__atomic_compare_exchange_n(&r->refs, &refs, refs - 1, true, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return 0;
  pthread_mutex_lock(&lock);
  int rc =
      names_current(r, slot, token, gen) && __atomic_load_n(&r->refs, __ATOMIC_ACQUIRE) > r->valid
          ? 0
          : -EINVAL;
  if (rc == 0 && r->revoked) rc = -ESTALE; /* let go of all the same */
  if (rc != -EINVAL) drop_ref_locked(c, slot);
  pthread_mutex_unlock(&lock);
  return rc;
}

bool nic_rcache_region_current(const struct nic_rcache *c, uint32_t token) {
  return __atomic_load_n(&c->pool[token & SLOT_MASK].valid, __ATOMIC_ACQUIRE) != 0;
}

static void invalidate_one_locked(struct nic_rcache *c, uintptr_t start, uintptr_t end) {
  retry_busy_locked(c);
  if (c->remote_head) revoke_range_locked(c, start, end);
  unsigned n = invalidate_range_locked(c, start, end);
  __atomic_add_fetch(&c->stats.invalidations, n, __ATOMIC_RELAXED);
}

static uintptr_t end_of(uintptr_t start, size_t len) {
  return start + len < start ? UINTPTR_MAX : start + len;
}

static void invalidate_every_cache(uintptr_t start, uintptr_t end) {
  pthread_mutex_lock(&lock);
  invalidate_one_locked(&nic_rcache_process_instance, start, end);
  for (struct nic_rcache *c = made; c; c = c->next)
    invalidate_one_locked(c, start, end);
  pthread_mutex_unlock(&lock);
}

void nic_rcache_invalidate(uintptr_t start, size_t len) {
  if ((!__atomic_load_n(&nic_rcache_regions_live, __ATOMIC_ACQUIRE) &&
       !__atomic_load_n(&remote_live, __ATOMIC_ACQUIRE)) ||
      len == 0)
    return;
  const uintptr_t end = end_of(start, len);
  if (!__atomic_load_n(&made_count, __ATOMIC_ACQUIRE) && !remote_touched(start, end)) {
    /* Lock-free first look: most frees and unmaps touch no cached page. */
    const struct nic_rt *rt = __atomic_load_n(&nic_rcache_process_instance.rt, __ATOMIC_ACQUIRE);
    uintptr_t probe = start;
    if (!rt || !nic_rt_next(rt, &probe, end)) return;
  }
  invalidate_every_cache(start, end);
}

/* The call that took [start, start+len) away has returned (events.h: pages_left). Its
 * pages_leaving looked at the table before the call, without the lock, and a miss may have
 * registered the range since: found nothing, pinned the old pages under the lock, and put the
 * region in the table while the call replaced or dropped them; cached for good, the region then
 * handed every later post the old pages. So again now:
 * - a miss registering: the lock waits for it to be done, and whatever it put in the table over
 *   the range goes (a miss that pinned the new pages loses a region it could have kept); an
 *   unmap anywhere meanwhile waits for the miss, as one over a cached region always did;
 * - none: the same look as nic_rcache_invalidate's, and the lock only if a region is there.
 * Why the counts read after the call are enough. A miss raises them before it pins (seq_cst),
 * and lowers them only once its region is in the table (release). The kernel orders a pin and a
 * change of the same page tables (the page-table lock; a lock-free pin against the TLB shootdown
 * of a change that waits for it), and the loads come after the change: a pin that took an old
 * page came before the change, so its raise is seen (the publisher's nic_left_watch, then
 * misses_registering here), or its lowering is, and with it the table entry made before
 * (acquire). A pin after the change took the new pages, and a region over them may stay. */
static void pages_left(uintptr_t start, size_t len) {
  if (!len) return;
  if (__atomic_load_n(&misses_registering, __ATOMIC_ACQUIRE))
    invalidate_every_cache(start, end_of(start, len));
  else
    nic_rcache_invalidate(start, len);
}

/* Lock held. Whether a user still holds a reference to a region of c. */
static bool held_locked(const struct nic_rcache *c) {
  for (uint32_t slot = 1; slot < c->pool_slots; slot++)
    if (__atomic_load_n(&c->pool[slot].refs, __ATOMIC_ACQUIRE) > c->pool[slot].valid) return true;
  return false;
}

int nic_rcache_destroy(struct nic_rcache *c) {
  if (!c || !c->made) return -EINVAL;
  pthread_mutex_lock(&lock);
  retry_busy_locked(c);
  if (c->busy_head || held_locked(c)) {
    pthread_mutex_unlock(&lock);
    return -EBUSY;
  }
  invalidate_range_locked(c, 0, UINTPTR_MAX);
  if (c->busy_head) { /* emptied, but the backend refused some just now */
    pthread_mutex_unlock(&lock);
    return -EBUSY;
  }
  unlist_locked(c);
  pthread_mutex_unlock(&lock);
  unmap_cache(c);
  return 0;
}

/* Fork child: every registration of a runtime cache is the parent's, made with a backend the
 * child does not have (backend.c). Out of the table and never deregistered: the release of a
 * reference the program kept only frees its slot, and an array entry holding one finds it
 * stale and is registered anew (sga_post.c). The busy ones go at once. Returns whether the
 * program still holds a reference to one. */
static bool forget_parents_locked(struct nic_rcache *c) {
  bool held = false;
  if (!c->pool) return held;
  for (uint32_t slot = c->busy_head, next; slot; slot = next) {
    next = c->pool[slot].next_free;
    gone_locked(c, &c->pool[slot]);
    free_slot_locked(c, slot);
  }
  c->busy_head = 0;
  /* Slot by slot, not through the table: a walk of the table's whole range read every page of
   * its leaves, a tenth of a fork's time. */
  for (uint32_t slot = 1; slot < c->pool_slots; slot++) {
    struct region *r = &c->pool[slot];
    if (!r->refs) continue; /* free */
    r->foreign = true;
    gone_locked(c, r);          /* not on the child's NIC: its pages hold nothing here */
    invalidate_locked(c, slot); /* when in the table: its reference, and the slot if it was last */
    held |= r->refs != 0;
  }
  c->busy_count = 0; /* the revoked ones that waited too */
  return held;
}

/* A cache of another kind's backend is made again for the child's own, on its first use. The
 * parent's goes off the list invalidation walks, so that frees and unmaps in the child take the
 * lock-free first look again (and the list does not grow with each generation of forks). Its
 * memory goes too, unless a reference the program kept (a posted message's) names a slot of it:
 * that reference's release reads the slot. */
static void after_fork_child(void) {
  forget_parents_locked(&nic_rcache_process_instance);
  for (unsigned k = 0; k < NIC_BACKEND_KINDS; k++) {
    struct nic_rcache *c = of_kind[k];
    if (!c) continue;
    of_kind[k] = NULL;
    const bool held = forget_parents_locked(c);
    unlist_locked(c);
    if (!held) unmap_cache(c);
  }
}

unsigned nic_rcache_made_count(void) {
  return __atomic_load_n(&made_count, __ATOMIC_ACQUIRE);
}

struct nic_rcache *nic_rcache_of(struct nic_backend *b) {
  if (!b || b == backend(&nic_rcache_process_instance)) return nic_rcache_process();
  const unsigned kind = nic_backend_kind_of(b);
  if (kind >= NIC_BACKEND_KINDS) return NULL;
  struct nic_rcache *c = __atomic_load_n(&of_kind[kind], __ATOMIC_ACQUIRE);
  if (c) return c;
  pthread_mutex_lock(&lock);
  if (!(c = of_kind[kind])) {
    /* The process-wide cache's limits (0: the settings); the cache lives as long as b. */
    c = nic_rcache_create(&(struct nic_rcache_params){.backend = b, .name = b->name});
    __atomic_store_n(&of_kind[kind], c, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&lock);
  return c;
}

void nic_rcache_get_stats_all(struct nic_rcache_stats *out) {
  nic_rcache_get_stats(nic_rcache_process(), out);
  for (unsigned k = 0; k < NIC_BACKEND_KINDS; k++) {
    struct nic_rcache *c = __atomic_load_n(&of_kind[k], __ATOMIC_ACQUIRE);
    if (!c) continue;
    struct nic_rcache_stats one;
    nic_rcache_get_stats(c, &one);
    out->hits += one.hits;
    out->misses += one.misses;
    out->evictions += one.evictions;
    out->invalidations += one.invalidations;
    out->registrations += one.registrations;
    out->failures += one.failures;
    out->busy_deregs += one.busy_deregs;
    out->busy += one.busy;
    out->regions += one.regions;
    out->bytes += one.bytes;
    out->own_regions += one.own_regions;
    out->own_bytes += one.own_bytes;
  }
}

void nic_rcache_get_stats(struct nic_rcache *c, struct nic_rcache_stats *out) {
  *out = (struct nic_rcache_stats){0};
  if (!nic_bounded_lock(&lock, "registration cache")) return;
  *out = c->stats;
  out->busy = c->busy_count;
  out->regions = c->regions;
  out->bytes = c->bytes_live;
  out->own_regions = c->own_regions;
  out->own_bytes = c->own_bytes;
  pthread_mutex_unlock(&lock);
}

/* A cached region must never outlive what it registered: a block freed inside it, pages that
 * leave or are replaced under it. Busy deregistrations are retried on the reaper's passes. */
void nic_rcache_retry_busy_all(void) {
  nic_rcache_retry_busy(nic_rcache_process());
  for (unsigned k = 0; k < NIC_BACKEND_KINDS; k++) {
    struct nic_rcache *c = __atomic_load_n(&of_kind[k], __ATOMIC_ACQUIRE);
    if (c) nic_rcache_retry_busy(c);
  }
}

/* Every cache: a backend call's free may drop regions of any cache over that backend. */
void nic_rcache_retry_deferred(void) {
  if (!deregs_deferred) return;
  pthread_mutex_lock(&lock);
  while (deregs_deferred) { /* a deferred one may defer others: its backend frees too */
    deregs_deferred = false;
    retry_busy_locked(&nic_rcache_process_instance);
    for (unsigned k = 0; k < NIC_BACKEND_KINDS; k++)
      if (of_kind[k]) retry_busy_locked(of_kind[k]);
    for (struct nic_rcache *c = made; c; c = c->next)
      retry_busy_locked(c);
  }
  pthread_mutex_unlock(&lock);
}

static void retry_busy_tick(void) {
  nic_rcache_retry_busy_all();
  nic_rcache_frees_may_go();
}
NIC_MEMORY_WATCHER(registration_cache, .range_stale = nic_rcache_invalidate,
                   .pages_leaving = nic_rcache_invalidate, .pages_left = pages_left,
                   .tick = retry_busy_tick);
