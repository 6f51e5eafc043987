/* NICMALLOC_PROFILE: sampling, the free hook and the profile file (see profile.h).
 * Sampling is by bytes, as tcmalloc's heap profiler does: each thread counts down an
 * exponentially distributed number of bytes (mean NICMALLOC_PROFILE_SAMPLE) and samples the
 * allocation that crosses zero, so a block of s bytes is sampled with probability
 * 1 - exp(-s/mean): every large block is caught, and a sampled block stands for
 * 1 / that probability blocks (the estimates in the profile).
 * File format (text, one site per line, sorted by bytes sent; written by profile_write.c):
 *   # nicmalloc profile 1
 *   # sample_bytes S sent_dataplane D sent_other O dropped_samples N
 *   # run ID
 *   site SENT EST_SENT SAMPLED EST_ALLOCS EST_BYTES EST_SENT_BLOCKS MODULE+0xOFFSET ...
 * SENT: bytes sent (interposed send calls) from this site's sampled blocks that were not
 * dataplane, or were made dataplane by NICMALLOC_SITES in this run (so that a profile written by
 * a routed run keeps its routed sites); EST_BYTES: bytes allocated; EST_SENT_BLOCKS: bytes of the
 * blocks that reached a sink at least once (what routing the site needs; see profile_sites.c's
 * budget); EST_*: scaled by sampling; MODULE+0xOFFSET: return addresses, innermost first, as
 * offsets from the module's load address (ASLR-independent; a space or '%' in a module's path is
 * written %20 / %25). */
#define _GNU_SOURCE
#include "profile.h"

#include "alloc_inline.h"
#include "chunks.h"
#include "config.h"
#include "events.h"
#include "log.h"
#include "reaper.h"
#include "sample_math.h"
#include "startup.h"
#include "thread.h"

#include <fcntl.h>
#include <mimalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SITES 8192u

int nic_profile_flags;
bool nic_profile_tracking;
void nic_sink_init(void);

static double sample_mean;
/* NICMALLOC_FENCE=detect: blocks from fence_min bytes get their site recorded, about one per
 * fence_mean bytes (0: all); see safety/fence_detect.c. */
static size_t fence_min = SIZE_MAX;
static double fence_mean;
static __thread int64_t until_sample __attribute__((tls_model("initial-exec")));
static __thread int64_t until_record __attribute__((tls_model("initial-exec")));
static __thread uint64_t rng __attribute__((tls_model("initial-exec")));
/* Set while this thread captures a stack: allocations from inside the unwinder are plain. */
static __thread bool busy __attribute__((tls_model("initial-exec")));

/* Profiling sees every malloc, routing those of NICMALLOC_SITES_MIN_SIZE bytes and more: they
 * take the slow path, where nic_profile_alloc is. */
static void routes_start(void) {
  const struct nic_config *c = nic_config();
  const size_t limit = c->profile_path ? 0 : c->sites_path ? c->sites_min_size : SIZE_MAX;
  if (limit < nic_fast_limit) nic_fast_limit = limit;
}
NIC_STARTUP_STEP(routes, NIC_START_ROUTES, routes_start);

void nic_profile_record_sites(size_t min_size, double mean) {
  fence_min = min_size;
  fence_mean = mean;
  if (min_size < nic_fast_limit) nic_fast_limit = min_size;
}

static int64_t next_interval(double mean) {
  if (!rng) rng = ((uintptr_t)&rng * 0x9e3779b97f4a7c15ull) ^ (uint64_t)time(NULL) ^ 1;
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  double u = ((double)(rng >> 11) + 0.5) * 0x1.0p-53;
  return (int64_t)(nic_neg_log_unit(u) * mean) + 1;
}

/* True when p was sampled. routed: NICMALLOC_SITES made p dataplane in this run. */
static bool sample(void *p, size_t size, bool routed) {
  /* A thread's first allocation starts its countdown, and is counted against it like any
   * other: a worker whose first malloc is its I/O buffer must not be invisible. */
  if (!rng) until_sample = next_interval(sample_mean);
  until_sample -= (int64_t)size;
  if (until_sample > 0) return false;
  until_sample = next_interval(sample_mean);
  /* Dataplane blocks need no profile, except routed ones: a run with NICMALLOC_SITES and
   * NICMALLOC_PROFILE on one file would otherwise write a profile without its routed sites. */
  if (!routed && nic_in_dp(p)) return false;
  busy = true;
  uintptr_t frames[NIC_PROF_FRAMES];
  unsigned n = nic_prof_capture(frames);
  double weight = 1.0 / nic_one_minus_exp_neg((double)size / sample_mean);
  if (n) nic_prof_table_sample(p, nic_block_usable(p), weight, frames, n);
  busy = false;
  return n != 0;
}

/* NICMALLOC_FENCE=detect: the site of a block a mismatch report may have to name. */
static void record(void *p, size_t size) {
  if (size < fence_min) return;
  if (fence_mean > 0) {
    until_record -= (int64_t)size;
    if (until_record > 0) return;
    until_record = next_interval(fence_mean);
  }
  busy = true;
  uintptr_t frames[NIC_PROF_FRAMES];
  unsigned n = nic_prof_capture(frames);
  if (n) nic_prof_table_record(p, nic_block_usable(p), frames, n);
  busy = false;
}

void *nic_profile_alloc(size_t size, size_t alignment, bool zero, enum nic_route route,
                        const void *caller) {
  int flags = __atomic_load_n(&nic_profile_flags, __ATOMIC_RELAXED);
  if (busy) return nic_alloc_core(size, alignment, zero, route);
  bool routed = false;
  if ((flags & NIC_PROF_ROUTE) && route == NIC_ROUTE_AUTO) {
    busy = true;
    route = nic_sites_route(size, (uintptr_t)caller);
    routed = route == NIC_ROUTE_DATAPLANE;
    busy = false;
  }
  void *p = nic_alloc_core(size, alignment, zero, route);
  bool sampled = p && (flags & NIC_PROF_SAMPLE) && sample(p, size, routed);
  if (p && !sampled && (flags & NIC_PROF_FENCE)) record(p, size);
  /* The reaper writes the profile periodically; a forked child starts its own here. */
  if ((flags & NIC_PROF_SAMPLE) && nic_self.state == NIC_THREAD_READY) nic_reaper_start();
  return p;
}

/* Every free, while the tables track blocks: a sampled or recorded block leaves them. */
static bool profile_block_freeing(void *p) {
  if (nic_profile_tracking) nic_prof_table_forget(p);
  return false;
}
NIC_MEMORY_WATCHER(profile, .observes_only = true, .block_freeing = profile_block_freeing,
                   .tick = nic_profile_tick);

void nic_profile_start(void) {
  nic_sink_init();
  const struct nic_config *c = nic_config();
  if (!c->profile_path && !c->sites_path && fence_min == SIZE_MAX) return;
  nic_prof_stack_init();
  int flags = 0;
  if (c->sites_path && nic_sites_load(c->sites_path)) flags |= NIC_PROF_ROUTE;
  const bool fence = fence_min != SIZE_MAX;
  if (c->profile_path || fence) {
    if (nic_prof_table_init()) {
      flags |= (c->profile_path ? NIC_PROF_SAMPLE : 0) | (fence ? NIC_PROF_FENCE : 0);
      /* Watches every free for good (events.h), so that sampled blocks leave the tables
       * without a test of their own on the free fast path. */
      nic_profile_tracking = true;
      nic_watch_blocks(1);
      /* Dataplane blocks that detect records leave the inline path for nic_alloc. */
      if (fence && nic_dp_fast_max >= fence_min) nic_dp_fast_max = fence_min - 1;
    } else {
      nic_log_warn("%s", c->profile_path ? "NICMALLOC_PROFILE: no memory for the profile tables; "
                                           "not profiling"
                                         : "NICMALLOC_FENCE=detect: no memory for the site "
                                           "tables; reports name no allocation site");
    }
  }
  sample_mean = (double)c->profile_sample;
  if (flags & NIC_PROF_SAMPLE) nic_profile_file_start(c->profile_path);
  __atomic_store_n(&nic_profile_flags, flags, __ATOMIC_RELEASE);
  if (flags) __atomic_store_n(&nic_alloc_router, nic_profile_alloc, __ATOMIC_RELEASE);
  if (flags & NIC_PROF_SAMPLE) nic_reaper_start();
}

void nic_profile_tick(void) {
  if (__atomic_load_n(&nic_profile_flags, __ATOMIC_ACQUIRE) & NIC_PROF_SAMPLE)
    nic_profile_file_tick();
}

void nic_profile_finish(void) {
  const int flags = __atomic_load_n(&nic_profile_flags, __ATOMIC_ACQUIRE);
  if (flags & NIC_PROF_SAMPLE) nic_profile_file_write();
  /* A profile of another build of the program names the right modules at the wrong offsets:
   * it loads without a word and routes nothing. Say so once the run shows it. */
  if (flags & NIC_PROF_ROUTE) nic_sites_finish();
  struct nic_sites_totals t;
  nic_sites_totals(&t);
  if ((flags & NIC_PROF_ROUTE) && t.sites && !t.routed_allocs && !t.over_budget)
    nic_log_warn("NICMALLOC_SITES=%s: none of its %llu sites allocated in this run (was it "
                 "recorded from another build of the program? requests under "
                 "NICMALLOC_SITES_MIN_SIZE are never routed)",
                 nic_config()->sites_path, (unsigned long long)t.sites);
}
