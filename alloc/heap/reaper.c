/* Why releasing a chunk is safe. A chunk is released only when
 *  1. its live blocks have been zero for the release delay (it is then DRAINING: the slow
 *     path allocates nothing there, and threads whose inline path still points there are
 *     closed on every pass until they catch up: nic_threads_nudge);
 *  2. mimalloc holds no segment in it: owner threads collect their heaps for draining chunks on
 *     their next dataplane allocation, and segments abandoned by exited threads are freed when
 *     another heap visits them, which the reaper makes happen while a draining chunk still has
 *     segments (nic_collect_abandoned). The probe is mimalloc's segment map, one lookup per
 *     segment (NIC_MI_SEGMENT_SIZE);
 *  3. mimalloc holds no slice of it committed, looked at after every step was marked unbacked
 *     (nic_chunk_release_locked). mimalloc touches no byte it has not committed, and commits
 *     through nicmalloc (steps.h), so an allocation that was under way in the chunk, on a
 *     thread that read its heap before the chunk stopped being live, either committed before
 *     the look (and keeps the chunk) or commits after it, behind the chunk lock, and maps the
 *     chunk again (nic_chunk_revive_locked): its block lands in a live chunk. Segments in
 * mimalloc's segment cache stay committed, so they keep the chunk too, until nic_collect_abandoned
 * empties the cache. This is the step release's protocol (steps.h), for every step at once. So no
 * allocation or free pays for a busy window, and no thread is waited for. A free takes no part
 * either: a block being freed is live, so its chunk is not even DRAINING; the last free of a chunk
 * may still be inside mi_free when its count drops to zero, but its slices stay committed until
 * mimalloc decommits them, after that free. A chunk whose threads never come back to dataplane
 * allocation stays DRAINING, pinned and counted in the stats. */
#define _GNU_SOURCE
#include "reaper.h"

#include "abandoned_decommit.h"
#include "chunks.h"
#include "clock.h"
#include "config.h"
#include "dp_heap.h"
#include "dp_live.h"
#include "events.h"
#include "forklock.h"
#include "huge_cache.h"
#include "last_thread.h"
#include "late_decommit.h"
#include "log.h"
#include "mi_layout.h"
#include "nudge.h"
#include "peaks.h"
#include "steps.h"
#include "thread.h"

#include <linux/futex.h>
#include <mimalloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int started;
static pthread_t thread;
static bool joinable; /* thread is ours to join: not in a fork child */
static int stop_word; /* 1 asks the thread to end; it sleeps on it (a futex) between passes */
static pthread_mutex_t pass_lock = PTHREAD_MUTEX_INITIALIZER;
/* Not held across fork (forklock.h): fork would wait for a whole pass. */
static void pass_lock_reset(void) {
  pthread_mutex_init(&pass_lock, NULL);
}
NIC_FORKLOCK_CUSTOM(reaper_pass, NIC_FORK_REAPER_PASS, NULL, NULL, pass_lock_reset, NULL);

/* One probe per 32 MiB block (mi_layout.h); a block inside a huge segment is found by mimalloc's
 * downward search. */
static bool has_segments(unsigned index) {
  char *base = nic_chunk_base(index);
  size_t size = (size_t)1 << nic_dp.shift;
  for (size_t off = 0; off < size; off += NIC_MI_SEGMENT_SIZE)
    if (nic_mi_segment_at((uintptr_t)base + off)) return true;
  return false;
}

static bool is_mapped(int state) {
  return state == NIC_CHUNK_LIVE || state == NIC_CHUNK_DRAINING;
}

/* Moves LIVE chunks that stayed empty to DRAINING and back; returns the draining chunks that
 * look releasable as a bit mask. The lowest NICMALLOC_KEEP_CHUNKS mapped chunks never drain, so
 * a bursty program does not map and pin a chunk for every burst. *draining says whether any
 * chunk is DRAINING. */
static uint64_t advance_states(const int64_t *live, uint64_t now, unsigned delay_ms,
                               bool *segments_left, bool *draining) {
  uint64_t candidates = 0;
  *segments_left = false;
  *draining = false;
  unsigned keep = nic_config()->keep_chunks, kept = 0;
  nic_chunks_lock();
  unsigned slots = nic_chunk_slots_used();
  for (unsigned i = 0; i < slots; i++) {
    struct nic_chunk *c = nic_chunk_at(i);
    if (!is_mapped(c->state)) continue;
    if (live[i] != 0 || kept < keep) {
      if (live[i] == 0) kept++;
      c->empty_since_ms = 0;
      if (c->state == NIC_CHUNK_DRAINING) nic_chunk_set_state(i, NIC_CHUNK_LIVE);
    } else if (c->state == NIC_CHUNK_LIVE) {
      if (!c->empty_since_ms)
        c->empty_since_ms = now;
      else if (now - c->empty_since_ms >= delay_ms)
        nic_chunk_set_state(i, NIC_CHUNK_DRAINING);
    } else if (!has_segments(i)) {
      *draining = true;
      candidates |= 1ull << i;
    } else {
      *draining = true;
      *segments_left = true;
    }
  }
  nic_chunks_unlock();
  return candidates;
}

/* Whether mimalloc holds no segment over the step. A step it still holds committed then lies in
 * a segment it freed into its segment cache, which stays committed until an allocation purges
 * the cache, or a forced collect does (nic_collect_abandoned). *block and *in_block carry the
 * last 32 MiB block looked at: a step is usually a part of one. */
static bool in_no_segment(unsigned index, unsigned step, uintptr_t *block, bool *in_block) {
  const uintptr_t base = (uintptr_t)nic_step_base(index, step);
  const uintptr_t end = base + ((uintptr_t)1 << nic_dp.step_shift);
  for (uintptr_t a = base & ~NIC_MI_SEGMENT_MASK; a < end; a += NIC_MI_SEGMENT_SIZE) {
    if (a != *block) {
      *block = a;
      *in_block = nic_mi_segment_at(a);
    }
    if (*in_block) return false;
  }
  return true;
}

/* Steps of live chunks that mimalloc held nothing committed in for the release delay are given
 * back (steps.h says why that is safe without a barrier); a draining chunk goes whole. Returns
 * whether a step stayed that long committed in no segment: in mimalloc's segment cache, which
 * only a forced collect empties when no thread allocates (a kept chunk never drains). */
static bool release_steps(uint64_t now, unsigned delay_ms) {
  bool cached = false;
  nic_chunks_lock();
  unsigned slots = nic_chunk_slots_used();
  for (unsigned i = 0; i < slots; i++) {
    struct nic_chunk *c = nic_chunk_at(i);
    if (c->state != NIC_CHUNK_LIVE) continue;
    uintptr_t block = 0;
    bool in_block = false;
    for (unsigned s = 0; s < nic_steps_per_chunk(); s++) {
      struct nic_step *st = &c->steps[s];
      const bool committed = st->backed && nic_step_committed(i, s);
      if (!st->backed || (committed && !in_no_segment(i, s, &block, &in_block))) {
        st->empty_since_ms = 0;
      } else if (!st->empty_since_ms) {
        st->empty_since_ms = now;
      } else if (now - st->empty_since_ms >= delay_ms) {
        if (committed)
          cached = true;
        else
          nic_step_release_locked(i, s);
      }
    }
  }
  nic_chunks_unlock();
  return cached;
}

/* Releases the candidates still draining and empty; true when mimalloc still held committed
 * slices (or a watcher a registration) in any of them. */
static bool release_candidates(uint64_t candidates, const int64_t *live) {
  bool held = false;
  nic_chunks_lock();
  for (unsigned i = 0; i < NIC_CHUNK_SLOTS; i++)
    if ((candidates >> i & 1) && nic_chunk_at(i)->state == NIC_CHUNK_DRAINING && live[i] == 0 &&
        !has_segments(i) && !nic_chunk_release_locked(i))
      held = true;
  nic_chunks_unlock();
  return held;
}

void nic_reaper_pass(void) {
  nic_publish_tick(); /* the layers' periodic work: busy deregistrations, the profile */
  nic_huge_cache_purge(nic_config()->purge_delay_ms ? nic_config()->purge_delay_ms : 1);
  nic_late_decommit_run(false);
  pthread_mutex_lock(&pass_lock);
  int64_t live[NIC_CHUNK_SLOTS];
  uint64_t idle_abandoned;
  nic_dp_live_sum(live, &idle_abandoned);
  nic_peaks_sample(live); /* before this pass releases steps and chunks (peaks.h) */
  const uint64_t now = nic_now_ms();
  const unsigned delay_ms = nic_config()->release_delay_ms;
  bool segments_left, draining;
  uint64_t candidates = advance_states(live, now, delay_ms, &segments_left, &draining);
  /* Threads behind on the chunk states catch up on their next allocation: there they hand back
   * their pages in draining chunks and stop allocating in them, and look for room from the
   * lowest chunk up, which lets the high ones empty. At once, and again at the end of the pass
   * for those that reopened their inline path meanwhile (thread.c). */
  static unsigned nudged_epoch;
  const unsigned epoch = __atomic_load_n(&nic_chunk_epoch, __ATOMIC_ACQUIRE);
  if (draining || epoch != nudged_epoch) nic_threads_nudge(epoch);
  nudged_epoch = epoch;
  const bool cached = release_steps(now, delay_ms);
  /* Segments of exited threads that hold nothing any more (their blocks freed by other threads)
   * are freed only when a heap visits them: after the release delay, the visit below. */
  static uint64_t idle_abandoned_since_ms;
  if (!idle_abandoned)
    idle_abandoned_since_ms = 0;
  else if (!idle_abandoned_since_ms)
    idle_abandoned_since_ms = now;
  const bool abandoned_idle = idle_abandoned && now - idle_abandoned_since_ms >= delay_ms;
  nic_nudge_pass(live, now); /* freed spans only marked, in threads that never collect */
  /* Empty segments abandoned by threads that exited are freed only when a heap visits them, and
   * segments in mimalloc's cache decommitted only when an allocation purges it; a program whose
   * dataplane threads are gone or idle may never make one. At most once a second: a thread that
   * keeps its segments and never comes back would otherwise pay it every pass. */
  static uint64_t visited_ms;
  if ((segments_left || cached || abandoned_idle) && (!visited_ms || now - visited_ms >= 1000)) {
    visited_ms = now;
    nic_collect_abandoned();
    if (cached || abandoned_idle) release_steps(now, delay_ms);
    candidates = advance_states(live, now, delay_ms, &segments_left, &draining);
  }
  /* A chunk with no segment left whose slices are still committed has them in mimalloc's
   * segment cache, which the same visit empties: once, at once. */
  if (candidates && release_candidates(candidates, live)) {
    nic_collect_abandoned();
    release_candidates(candidates, live);
  }
  if (draining) nic_threads_nudge(__atomic_load_n(&nic_chunk_epoch, __ATOMIC_ACQUIRE));
  pthread_mutex_unlock(&pass_lock);
}

static void *reaper_main(void *arg) {
  (void)arg;
  nic_internal_enter(); /* for its whole life */
  const struct nic_config *cfg = nic_config();
  unsigned delay =
      cfg->release_delay_ms < cfg->purge_delay_ms ? cfg->release_delay_ms : cfg->purge_delay_ms;
  unsigned period = delay / 4 < 10 ? 10 : delay / 4 > 1000 ? 1000 : delay / 4;
  struct timespec ts = {period / 1000, (long)(period % 1000) * 1000000};
  uint64_t alone_checked_ms = 0;
  for (;;) {
    syscall(SYS_futex, &stop_word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
    if (__atomic_load_n(&stop_word, __ATOMIC_ACQUIRE)) break;
    nic_reaper_pass();
    /* The program's threads all gone, nicmalloc's own alone left (the backends', the fences',
     * started on nic_* API use, count in glibc's threads too): exit(0), as glibc's last thread
     * does. Two /proc reads, so at most once a second: a second late is no matter at the end of a
     * process. */
    const uint64_t now = nic_now_ms();
    if (now - alone_checked_ms < 1000) continue;
    alone_checked_ms = now;
    if (nic_only_background_left(nic_own_threads_live())) exit(0);
  }
  nic_internal_leave();
  return NULL;
}

void nic_reaper_start(void) {
  if (__atomic_load_n(&started, __ATOMIC_ACQUIRE)) return;
  if (__atomic_exchange_n(&started, 1, __ATOMIC_ACQ_REL)) return;
  nic_abandoned_decommits_wait(); /* whose late drops its passes make */
  nic_nudge_install();
  if (nic_own_thread_create(&thread, "nicmalloc-reap", reaper_main, NULL, NULL) == 0) {
    joinable = true;
  } else {
    nic_log_info("cannot start the chunk reaper thread; empty chunks stay pinned");
  }
}

bool nic_reaper_stop(void) {
  if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE) || !joinable) return false;
  __atomic_store_n(&stop_word, 1, __ATOMIC_RELEASE);
  syscall(SYS_futex, &stop_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  pthread_join(thread, NULL);
  joinable = false;
  __atomic_store_n(&stop_word, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&started, 0, __ATOMIC_RELEASE);
  return true;
}

/* In a fork child the thread is gone. It starts again where a dataplane allocation takes the
 * slow path (alloc_slow), or at nic_collect: a new chunk epoch sends the forking thread, the
 * child's only one, down that path at its next dataplane allocation, instead of the inline path
 * it would keep taking (a prefork server's children never released the steps and chunks they
 * freed). Not started here: a thread made in a fork handler would start before the child's
 * other handlers have made their locks anew. */
static void after_fork_child(void) {
  const bool was_started = __atomic_load_n(&started, __ATOMIC_RELAXED);
  joinable = false;
  __atomic_store_n(&stop_word, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&started, 0, __ATOMIC_RELEASE);
  if (!was_started) return;
  __atomic_add_fetch(&nic_chunk_epoch, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&nic_self.dp_small_span, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&nic_self.dp_fast_below, 0, __ATOMIC_RELAXED);
}
NIC_FORK_CHILD(reaper_thread, NIC_FORK_REAPER_THREAD, after_fork_child);
