#define _GNU_SOURCE
#include "dp_heap.h"

#include "bounded_lock.h"
#include "clock.h"
#include "config.h"
#include "dp_huge.h"
#include "forklock.h"
#include "late_decommit.h"
#include "log.h"
#include "reaper.h"

#include <errno.h>
#include <mimalloc.h>
#include <pthread.h>

/* The largest request whose segment fits a chunk: a huge object gets a mimalloc segment of its
 * own, a header and the object rounded up to 1 MiB below 32 MiB and to 4 MiB above
 * (nic_dp_huge_segment_bound). The chunk less 1 MiB, as this was, let requests of 1021-1023 MiB
 * through with 1 GiB chunks: each mapped GROW_ATTEMPTS chunks that could not hold it, then went
 * to the control heap, until every chunk was mapped. */
size_t nic_dp_max_request(void) {
  static size_t max; /* the chunk size is fixed from start-up on */
  size_t m = __atomic_load_n(&max, __ATOMIC_RELAXED);
  if (m) return m;
  const size_t chunk = nic_config()->chunk_size, room = chunk - NIC_HUGE_BLOCK_OFFSET;
  m = room & ~((4ul << 20) - 1);
  if (m < (32ul << 20)) m = room & ~((1ul << 20) - 1);
  __atomic_store_n(&max, m, __ATOMIC_RELAXED);
  return m;
}

/* An alignment adds to the segment; only requests near the limit can be refused for it. */
static bool fits_a_chunk(size_t size, size_t alignment) {
  const size_t max = nic_dp_max_request();
  if (size > max) return false;
  return size <= max / 2 || nic_dp_huge_segment_bound(size, alignment) <= nic_config()->chunk_size;
}

void *nic_heap_alloc(mi_heap_t *heap, size_t size, size_t alignment, bool zero) {
  if (__builtin_expect(nic_dp_huge_request(size, alignment), 0))
    return nic_dp_huge_alloc(heap, size, alignment, zero);
  /* mi_heap_*_aligned_at skips the shortcut in mi_malloc_aligned that returns misaligned blocks
   * in mimalloc 2.0.9 (upstream #700). */
  if (alignment <= sizeof(void *) * 2)
    return zero ? mi_heap_zalloc(heap, size) : mi_heap_malloc(heap, size);
  return zero ? mi_heap_zalloc_aligned_at(heap, size, alignment, 0)
              : mi_heap_malloc_aligned_at(heap, size, alignment, 0);
}

/* mimalloc visits the abandoned list on a heap's collect and frees the segments that turned out
 * empty. A forced collect of the main thread's own (backing) heap would also take every
 * non-empty abandoned segment into that heap, dataplane segments included, and ordinary malloc
 * would then hand out chunk memory that no live count knows of: so a heap of its own visits. */
void nic_collect_abandoned(void) {
  nic_abandoned_visits_lock();
  mi_heap_t *visitor = mi_heap_new();
  if (visitor) {
    mi_heap_collect(visitor, true);
    mi_heap_delete(visitor);
  }
  nic_abandoned_visits_unlock();
}

/* A visit takes the blocks other threads freed off each page's thread-free list before it
 * lowers the page's count of blocks in use: a live walk in between counts them live (nic_stats'
 * dataplane_live, read while the reaper visited, was off by a page's blocks in one run of 16).
 * The walk waits for the visits nicmalloc makes (the reaper's, nic_collect's, malloc_trim's), so
 * that a program that allocates and frees nothing meanwhile reads exact counts (one collecting
 * meanwhile included). The visitor heap's making is inside: a heap's first block may need a
 * page, for which mimalloc visits abandoned segments first. Not held across fork: a visit is
 * long, and the thread making it does not exist in the child (forklock.h). */
static pthread_mutex_t visits_lock = PTHREAD_MUTEX_INITIALIZER;
static void visits_lock_reset(void) {
  pthread_mutex_init(&visits_lock, NULL);
}
NIC_FORKLOCK_CUSTOM(abandoned_visits, NIC_FORK_ABANDONED_VISITS, NULL, NULL, visits_lock_reset,
                    NULL);

void nic_heap_collect_visiting(mi_heap_t *heap, bool force) {
  nic_abandoned_visits_lock();
  mi_heap_collect(heap, force);
  nic_abandoned_visits_unlock();
}

void nic_abandoned_visits_lock(void) {
  pthread_mutex_lock(&visits_lock);
}

bool nic_abandoned_visits_lock_bounded(void) {
  return nic_bounded_lock(&visits_lock, "abandoned segment visits");
}

void nic_abandoned_visits_unlock(void) {
  pthread_mutex_unlock(&visits_lock);
}

static int chunk_state(unsigned index) {
  return __atomic_load_n(&nic_chunk_at(index)->state, __ATOMIC_ACQUIRE);
}

/* Both allocation paths take a seen epoch to mean that the cursor chunk is live, so a refresh
 * that finds it draining or released parks the cursor: allocating there would hand out memory
 * the reaper is about to give back, or has given back. */
void nic_dp_refresh(struct nic_thread *t) {
  __atomic_store_n(&t->seen_epoch, __atomic_load_n(&nic_chunk_epoch, __ATOMIC_ACQUIRE),
                   __ATOMIC_RELAXED);
  if (t->cursor != NIC_CURSOR_PARKED && chunk_state(t->cursor) != NIC_CHUNK_LIVE)
    t->cursor = NIC_CURSOR_PARKED;
  unsigned slots = nic_chunk_slots_used();
  for (unsigned i = 0; i < slots; i++)
    if (t->heaps[i] && chunk_state(i) == NIC_CHUNK_DRAINING) mi_heap_collect(t->heaps[i], true);
  nic_thread_refresh_fast();
}

static void *try_chunk(struct nic_thread *t, unsigned index, size_t size, size_t alignment,
                       bool zero) {
  if (chunk_state(index) != NIC_CHUNK_LIVE) return NULL;
  mi_heap_t *heap = t->heaps[index];
  if (!heap) {
    heap = t->heaps[index] = mi_heap_new_in_arena(nic_chunk_at(index)->arena);
    if (heap) nic_thread_made_heap(t);
  }
  return heap ? nic_heap_alloc(heap, size, alignment, zero) : NULL;
}

static void *try_chunks(struct nic_thread *t, unsigned from, unsigned to, size_t size,
                        size_t alignment, bool zero, unsigned *index_out) {
  for (unsigned i = from; i < to; i++) {
    void *p = try_chunk(t, i, size, alignment, zero);
    if (p) {
      *index_out = i;
      return p;
    }
  }
  return NULL;
}

/* One thread at a time decides to map a chunk. Without it, threads that all found the chunks
 * full at once each mapped and pinned one: 8 threads starting together took 8 chunks where one
 * would do (wl_threads_mixed with NICMALLOC_DP_MIN_SIZE=4096: 2 GiB pinned for nothing).
 * Recursive: a chunk being mapped logs, and nothing must deadlock if that ever allocated. */
static pthread_mutex_t grow_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
NIC_FORKLOCK_RECURSIVE(dp_grow, NIC_FORK_DP_GROW, &grow_lock, NULL);

void (*nic_dp_grow_hook)(unsigned index);

/* How many chunks one request may map. Other threads scan without the growth lock and may take
 * a fresh chunk's segments (a 64 MiB chunk holds two 32 MiB mimalloc segments) before the
 * thread that mapped it allocates there; that thread then maps another rather than losing its
 * request to the control heap. Bounded so that a chunk that cannot hold the request for any
 * other reason (its arena refusing) costs a few chunks, not the whole range. */
#define GROW_ATTEMPTS 4

/* Under the growth lock, the only place chunks are mapped. Any chunk state change since the
 * caller's scan (a chunk mapped, or a released slot mapped again, by the thread that held the
 * lock before, or by this one in an earlier attempt) means a new scan first; only then a new
 * chunk. */
static void *grow(struct nic_thread *t, unsigned scanned_epoch, size_t size, size_t alignment,
                  bool zero, unsigned *index_out, enum nic_dp_failure *why) {
  for (int attempt = 0; attempt < GROW_ATTEMPTS; attempt++) {
    const unsigned epoch = __atomic_load_n(&nic_chunk_epoch, __ATOMIC_ACQUIRE);
    if (epoch != scanned_epoch) {
      void *p = try_chunks(t, 0, nic_chunk_slots_used(), size, alignment, zero, index_out);
      if (p) return p;
    }
    unsigned index;
    int rc = nic_chunk_create(&index);
    if (rc) {
      *why = rc == -ENOSPC ? NIC_DP_CAP : NIC_DP_MAP_REFUSED;
      return NULL;
    }
    scanned_epoch = __atomic_load_n(&nic_chunk_epoch, __ATOMIC_ACQUIRE);
    void (*hook)(unsigned) = __atomic_load_n(&nic_dp_grow_hook, __ATOMIC_ACQUIRE);
    if (hook) hook(index);
    void *p = try_chunk(t, index, size, alignment, zero);
    if (p) {
      *index_out = index;
      return p;
    }
  }
  /* alloc.c says nothing of a refused mapping (chunks.c explains those); this one is ours. */
  nic_log_fallback_once(nic_config()->on_pin_fail == NIC_PIN_FAIL_FAIL,
                        "%d dataplane chunks mapped in a row for one request had no room for it "
                        "when it came to allocate there; giving up on the dataplane for it",
                        GROW_ATTEMPTS);
  *why = NIC_DP_MAP_REFUSED;
  return NULL;
}

/* The cursor chunk is full or not live: look for room in the others, lowest first so that high
 * chunks can drain, then map a chunk. */
static void *alloc_slow(struct nic_thread *t, size_t size, size_t alignment, bool zero,
                        unsigned *index_out, enum nic_dp_failure *why) {
  if (!nic_dp_epoch_seen(t)) nic_dp_refresh(t);
  *why = NIC_DP_MAP_REFUSED;
  if (nic_dp_reserve()) return NULL;
  nic_reaper_start();
  unsigned epoch = __atomic_load_n(&nic_chunk_epoch, __ATOMIC_ACQUIRE);
  void *p = try_chunks(t, 0, nic_chunk_slots_used(), size, alignment, zero, index_out);
  if (p) return p;
  pthread_mutex_lock(&grow_lock);
  p = grow(t, epoch, size, alignment, zero, index_out, why);
  pthread_mutex_unlock(&grow_lock);
  return p;
}

/* Threads past their first exit hook: their heaps are made anew, and abandoned at once unless
 * mimalloc is sure to abandon them (thread.c). */
static void *alloc_late(struct nic_thread *t, size_t size, size_t alignment, bool zero,
                        enum nic_dp_failure *why) {
  unsigned index = 0;
  void *p = alloc_slow(t, size, alignment, zero, &index, why);
  nic_thread_after_late_alloc(t);
  return p;
}

/* At the cap with every chunk full, each look costs a failed mimalloc allocation per chunk, and
 * mimalloc answers each failure with a forced collection of that heap before it gives up: tens
 * of microseconds per chunk once the heaps are large (a fragmentation run at the cap took over
 * ten minutes instead of seconds). So a thread that found everything full does not look again
 * for a while, unless a chunk changes state. Once its current chunk has failed it too, its
 * inline path stays off until it frees a block in that chunk, which may make room there: then
 * one request tries it again. */
#define FULL_BACKOFF_NS 1000000ull

/* The inline path off, and the frees into the current chunk sent down the general path, which
 * calls nic_dp_freed_while_paused (free's fast path reads no thread state). */
void nic_dp_pause_fast(struct nic_thread *t) {
  if (t->dp_fast_paused) return;
  t->dp_fast_paused = true;
  t->paused_chunk = t->cursor;
  if (t->paused_chunk != NIC_CURSOR_PARKED) nic_chunk_watch_frees(t->paused_chunk, 1);
  nic_thread_refresh_fast();
}

void nic_dp_unpause(struct nic_thread *t) {
  if (!t->dp_fast_paused) return;
  t->dp_fast_paused = false;
  if (t->paused_chunk != NIC_CURSOR_PARKED) nic_chunk_watch_frees(t->paused_chunk, -1);
  t->paused_chunk = NIC_CURSOR_PARKED;
  nic_thread_refresh_fast();
}

/* Only room in the chunk it paused on helps the inline path. */
void nic_dp_freed_while_paused(struct nic_thread *t, unsigned chunk) {
  if (chunk == t->paused_chunk) nic_dp_unpause(t);
}

/* True while the thread found every chunk full a moment ago. */
static bool backing_off(struct nic_thread *t) {
  if (!t->full_until_ns) return false;
  if (__atomic_load_n(&nic_chunk_epoch, __ATOMIC_ACQUIRE) == t->full_epoch &&
      nic_now_ns() < t->full_until_ns)
    return true;
  t->full_until_ns = 0;
  nic_dp_unpause(t);
  return false;
}

static void back_off(struct nic_thread *t, unsigned scanned_epoch) {
  t->full_epoch = scanned_epoch;
  t->full_until_ns = nic_now_ns() + FULL_BACKOFF_NS;
  nic_dp_pause_fast(t); /* the look included its current chunk */
}

static void *dp_alloc(size_t size, size_t alignment, bool zero, enum nic_dp_failure *why);

void *nic_dp_alloc(size_t size, size_t alignment, bool zero, enum nic_dp_failure *why) {
  /* Decommits of abandoned control segments visited here may wait (late_decommit.h). */
  nic_late_decommit_arm();
  void *p = dp_alloc(size, alignment, zero, why);
  nic_late_decommit_disarm();
  if (__builtin_expect(nic_self.exit_mark_due, 0)) nic_thread_mark_exit(&nic_self);
  return p;
}

static void *dp_alloc(size_t size, size_t alignment, bool zero, enum nic_dp_failure *why) {
  *why = NIC_DP_OK;
  if (!fits_a_chunk(size, alignment)) {
    *why = NIC_DP_TOO_LARGE;
    return NULL;
  }
  if (nic_self.state == NIC_THREAD_EXITING)
    return alloc_late(&nic_self, size, alignment, zero, why);
  if (!nic_thread_ready()) {
    *why = NIC_DP_NO_THREAD;
    return NULL;
  }
  struct nic_thread *t = &nic_self;
  if (__builtin_expect(backing_off(t), 0)) {
    nic_dp_pause_fast(t); /* a request that did not come through the inline path */
    *why = NIC_DP_CAP;
    return NULL;
  }
  const unsigned epoch = __atomic_load_n(&nic_chunk_epoch, __ATOMIC_ACQUIRE);
  unsigned index = t->cursor;
  mi_heap_t *heap = t->heaps[index];
  void *p = NULL;
  /* The epoch has not moved since this thread saw its cursor chunk live, so it still is. */
  if (__builtin_expect(heap && nic_dp_epoch_seen(t), 1))
    p = nic_heap_alloc(heap, size, alignment, zero);
  if (__builtin_expect(p == NULL, 0)) {
    p = alloc_slow(t, size, alignment, zero, &index, why);
    if (p) t->cursor = index;
  }
  if (!p) {
    if (*why == NIC_DP_CAP) back_off(t, epoch);
    return p;
  }
  /* The inline path follows the cursor, once the thread is up to date with the chunk states;
   * it opens again here after the reaper closed it (nic_threads_nudge). */
  if (!nic_dp_epoch_seen(t))
    nic_dp_refresh(t);
  else if (t->dp_heap != t->heaps[t->cursor] ||
           __atomic_load_n(&t->dp_fast_below, __ATOMIC_RELAXED) == 0)
    nic_thread_refresh_fast();
  return p;
}
