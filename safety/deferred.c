/* Deferred frees: free() of a block with a page still referenced by a posted SG entry or a
 * nic_hold is recorded here instead of being done, and done by whichever thread drops the last
 * reference (mimalloc allows cross-thread free). The record lives in a separate table, never
 * in the block: the NIC may still be reading the block's bytes, so not even its free-list word
 * or its double-free key may be written until then.
 *
 * Race between a free and the completion that clears its pages: the free re-checks the pages
 * under the table lock, and again once its record is counted; a completion drops its page
 * counts before it looks for records. So either the free sees the pages clear (and frees now,
 * or retries) or the completion sees the record. The completion's first look is at the count of
 * records, unlocked: with the record's check under the lock alone, a free counting its record
 * just after that look stayed deferred, its pages clear, until some later completion or release.
 *
 * A record lives from the program's free until the allocator has the block back, and a second
 * free of the block meets it all that time. It goes PENDING (the NIC may still read the block),
 * TAKEN (a retry found its pages clear and writes the free key, unlocked: under
 * NICMALLOC_FENCE=protect that write waits if a post of a neighbour has protected the page since,
 * and nobody may wait for the table lock meanwhile), RELEASING (the key is written; the real free
 * runs unlocked, since it may take the allocator's and the cache's locks, whose holders may
 * themselves free). It leaves the table only after the real free. A RELEASING record may meet a
 * later block at its address once the real free is done and malloc handed the address out
 * again: that block's allocation cleared the key, so a RELEASING record stands for the block only
 * while the key is still there. Records used to leave before the real free, and a second free in
 * that window passed every check (the key's confirmation asks mimalloc, which still held the
 * block live) and freed it twice: a cycle in mimalloc's free list, and a thread spinning at exit.
 *
 * Each record holds an interest in frees (events.h), so that while it exists no free of its
 * block takes a fast path that skips this table: without it, a free between the completion that
 * cleared the block's pages and the retry that takes the record reached mimalloc directly.
 *
 * Under protect, the threads protect never holds (the NIC's, the poller) make no free
 * themselves: they record it here and the free thread makes it (fence_threads.c). */
#include "alloc_inline.h"
#include "fence.h"
#include "forklock.h"
#include "log.h"
#include "pagecount.h"
#include "pool.h"
#include "safety.h"

#include <pthread.h>

#define BUCKETS 256
#define BATCH 64

enum record_state { PENDING, TAKEN, RELEASING };

struct record {
  struct record *next;
  void *p;
  uintptr_t start, end;
  enum record_state state;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct record *buckets[BUCKETS];
static struct nic_pool pool = NIC_POOL_INIT(sizeof(struct record));

static void unlink_locked(struct record **link) {
  struct record *r = *link;
  __atomic_store_n(link, r->next, __ATOMIC_RELEASE); /* read unlocked by nic_safety_defer_free */
  nic_pool_put(&pool, r);
  __atomic_sub_fetch(&nic_safety_ctr.deferred_pending, 1, __ATOMIC_RELEASE);
  nic_watch_blocks(-1); /* after the record: events.h */
}

/* In the child, no thread is working on a record a parent thread took. A TAKEN one is the
 * child's to take again, or it would stay deferred for good. A RELEASING one had its key written
 * and its real free about to run or done: it leaves the table (at worst the block stays
 * allocated in the child, never freed twice). */
static void after_fork_child(void) {
  for (unsigned b = 0; b < BUCKETS; b++)
    for (struct record **link = &buckets[b]; *link;) {
      if ((*link)->state == RELEASING) {
        unlink_locked(link);
        continue;
      }
      (*link)->state = PENDING;
      link = &(*link)->next;
    }
}
NIC_FORKLOCK_MUTEX(deferred, NIC_FORK_DEFERRED, &lock, after_fork_child);

/* Whether a free of [start, end) must wait: a page is referenced, or still write-protected by a
 * completion that has dropped its references and not yet made the page writable (fence.h). The
 * free's writes there would be held until the release: a retry that found the counts clear in
 * that window (the free thread's), or the program's free of a neighbour on the page. The
 * completion retries deferred frees after the release. */
static bool busy(uintptr_t start, uintptr_t end) {
  return nic_pc_any(start, end, NIC_PC_ANY) || nic_fence_any_protected(start, end);
}

static struct record **bucket(const void *p) {
  return &buckets[((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ull >> 56];
}

/* The record of a free of the block now at p, if the program freed it. A RELEASING record whose
 * key is gone belongs to an earlier block at the address (see above). */
static struct record *find_locked(const void *p) {
  for (struct record *r = *bucket(p); r; r = r->next)
    if (r->p == p && (r->state != RELEASING || (nic_may_be_block(p) && nic_block_is_free(p))))
      return r;
  return NULL;
}

bool nic_safety_is_deferred(const void *p) {
  if (!__atomic_load_n(&nic_safety_ctr.deferred_pending, __ATOMIC_ACQUIRE)) return false;
  pthread_mutex_lock(&lock);
  bool found = find_locked(p) != NULL;
  pthread_mutex_unlock(&lock);
  return found;
}

/* The key is read only where a block of ours may be and its page is committed (the free check's
 * own test): mimalloc's region map also answers yes for reserved pages never committed. */
bool nic_safety_was_freed(const void *p) {
  return (nic_block_aligned(p) && nic_may_be_block(p) && nic_block_was_freed(p)) ||
         nic_safety_is_deferred(p);
}

bool nic_safety_defer_free(void *p) {
  uintptr_t start = (uintptr_t)p, end = start + nic_block_usable(p);
  /* Lock-free answer for the common case: nothing of p referenced, and p not deferred (nothing
   * is, or p's bucket is empty). Only a free racing with another free of the same block could
   * miss its record, and that double free would race the same way under the lock. Without the
   * bucket look, every free took the lock while any other free was deferred: with 2 threads a
   * malloc/free pair took 46 ns of wall time against 26 ns on 1 (sga_bench
   * BM_FreeFilter/other_free_deferred; now 10 and 17 ns). */
  const bool hand_off = nic_fence_frees_handed_off();
  if (!hand_off && !busy(start, end) &&
      (!__atomic_load_n(&nic_safety_ctr.deferred_pending, __ATOMIC_ACQUIRE) ||
       !__atomic_load_n(bucket(p), __ATOMIC_ACQUIRE)))
    return false;
  pthread_mutex_lock(&lock);
  if (find_locked(p)) {
    pthread_mutex_unlock(&lock);
    nic_report_bad_block(p, "free", NIC_USE_FREE, true); /* its first free is still deferred */
    return true;
  }
  const bool in_flight = busy(start, end);
  if (!hand_off && !in_flight) {
    pthread_mutex_unlock(&lock);
    return false;
  }
  void (*hook)(const void *) = __atomic_load_n(&nic_safety_defer_hook, __ATOMIC_ACQUIRE);
  if (hook) hook(p);
  struct record *r = nic_pool_get(&pool);
  if (!r) {
    pthread_mutex_unlock(&lock);
    nic_log_error("free(%p): the block is in flight and no memory is left to defer its free; "
                  "it is leaked rather than reused under the NIC",
                  p);
    return true;
  }
  nic_watch_blocks(1); /* before the record: events.h */
  *r = (struct record){.next = *bucket(p), .p = p, .start = start, .end = end, .state = PENDING};
  __atomic_store_n(bucket(p), r, __ATOMIC_RELEASE); /* read unlocked above */
  /* Under protect every free goes through the free thread (fence.h); only one of a page in
   * flight or held is deferred in the statistic's sense. */
  if (in_flight) NIC_SAFETY_COUNT(deferred_frees, 1);
  NIC_SAFETY_COUNT(deferred_pending, 1);
  pthread_mutex_unlock(&lock);
  if (hand_off) {
    nic_fence_free_kick();
    return true;
  }
  /* The references or the protection may have gone since the look above, and the completion
   * that let them go may have looked for records before this one was counted (its retry reads
   * deferred_pending unlocked first): it would not come back for it, and the free would wait
   * for some later retry. Each side fences between its own change and its look at the other's,
   * so one of them sees the other. */
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (!busy(start, end)) nic_safety_retry_deferred();
  return true;
}

/* Takes up to BATCH records whose pages are clear and writable; returns how many. */
static unsigned collect_locked(struct record **out) {
  unsigned n = 0;
  for (unsigned b = 0; b < BUCKETS && n < BATCH; b++)
    for (struct record *r = buckets[b]; r && n < BATCH; r = r->next)
      if (r->state == PENDING && !busy(r->start, r->end)) {
        r->state = TAKEN;
        out[n++] = r;
      }
  return n;
}

/* By identity: a later record for the same address may sit beside it. */
static void forget_locked(const struct record *r) {
  for (struct record **link = bucket(r->p); *link; link = &(*link)->next)
    if (*link == r) {
      unlink_locked(link);
      return;
    }
}

void (*nic_safety_retry_hook)(enum nic_retry_phase phase, void *const *blocks, unsigned n);

static void call_hook(enum nic_retry_phase phase, void *const *blocks, unsigned n) {
  void (*hook)(enum nic_retry_phase, void *const *, unsigned) =
      __atomic_load_n(&nic_safety_retry_hook, __ATOMIC_ACQUIRE);
  if (n && hook) hook(phase, blocks, n);
}

void (*nic_safety_defer_hook)(const void *p);

void nic_safety_retry_deferred(void) {
  struct record *taken[BATCH];
  void *ready[BATCH];
  /* After the caller's release of references or protection, before the look at the count: a
   * free recording a record meanwhile looks at the pages again (nic_safety_defer_free). */
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  for (;;) {
    if (!__atomic_load_n(&nic_safety_ctr.deferred_pending, __ATOMIC_ACQUIRE)) return;
    if (nic_fence_frees_handed_off()) {
      nic_fence_free_kick();
      return;
    }
    pthread_mutex_lock(&lock);
    const unsigned n = collect_locked(taken);
    for (unsigned i = 0; i < n; i++)
      ready[i] = taken[i]->p;
    pthread_mutex_unlock(&lock);
    call_hook(NIC_RETRY_TAKEN, ready, n);
    for (unsigned i = 0; i < n; i++)
      nic_block_mark_free(ready[i]);
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < n; i++)
      taken[i]->state = RELEASING;
    pthread_mutex_unlock(&lock);
    call_hook(NIC_RETRY_KEYED, ready, n);
    for (unsigned i = 0; i < n; i++)
      nic_release_deferred(ready[i]);
    call_hook(NIC_RETRY_RELEASED, ready, n);
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < n; i++)
      forget_locked(taken[i]);
    pthread_mutex_unlock(&lock);
    if (n < BATCH) return;
  }
}

enum nic_resize_answer nic_safety_realloc_check(void *p, size_t usable) {
  if (nic_safety_is_deferred(p)) {
    nic_report_bad_block(p, "realloc", NIC_USE_REALLOC, true);
    return NIC_RESIZE_REFUSE;
  }
  uintptr_t start = (uintptr_t)p;
  if (!nic_pc_any(start, start + usable, NIC_PC_DMA_MASK)) return NIC_RESIZE_AS_USUAL;
  const struct nic_safety_config *c = nic_safety_config();
  if (c->fence == NIC_FENCE_OFF) return NIC_RESIZE_AS_USUAL; /* the user chose no fencing */
  if (c->realloc_inflight == NIC_REALLOC_WAIT &&
      nic_fence_wait(start, start + usable, "realloc",
                     /* realloc does not fail on a timeout: it falls back to move */
                     "moving the block instead, as NICMALLOC_REALLOC_INFLIGHT=move does") == 0)
    return NIC_RESIZE_AS_USUAL;
  NIC_SAFETY_COUNT(realloc_moves, 1);
  return NIC_RESIZE_MOVE;
}

/* The allocator's frees and reallocs of blocks whose pages may be in flight or held. */
NIC_MEMORY_WATCHER(inflight_blocks, .block_freeing = nic_safety_defer_free,
                   .block_resizing = nic_safety_realloc_check);
