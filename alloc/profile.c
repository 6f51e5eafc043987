/* NICMALLOC_PROFILE: sampling, the free hook and the profile file (see profile.h).
 * Sampling is by bytes, as tcmalloc's heap profiler does: each thread counts down an
 * exponentially distributed number of bytes (mean NICMALLOC_PROFILE_SAMPLE) and samples the
 * allocation that crosses zero, so a block of s bytes is sampled with probability
 * 1 - exp(-s/mean): every large block is caught, and a sampled block stands for
 * 1 / that probability blocks (the estimates in the profile).
 * File format (text, one site per line, sorted by bytes sent):
 *   # nicmalloc profile 1
 *   # sample_bytes S sent_dataplane D sent_other O dropped_samples N
 *   site SENT EST_SENT SAMPLED EST_ALLOCS EST_BYTES EST_SENT_BLOCKS MODULE+0xOFFSET ...
 * SENT: bytes sent (interposed send calls) from this site's sampled blocks while they were not
 * dataplane; EST_BYTES: bytes allocated; EST_SENT_BLOCKS: bytes of the blocks that reached a
 * sink at least once (what routing the site needs; see profile_sites.c's budget); EST_*: scaled
 * by sampling; MODULE+0xOFFSET: return addresses, innermost first, as offsets from the module's
 * load address (ASLR-independent). */
#define _GNU_SOURCE
#include "profile.h"

#include "chunks.h"
#include "config.h"
#include "fence.h"
#include "log.h"

#include <fcntl.h>
#include <math.h>
#include <mimalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SITES 8192u

int nic_profile_flags;
bool nic_profile_tracking;
extern unsigned long nic_safety_refs; /* safety/pagecount.c */
void nic_sink_init(void);

static double sample_mean;
static pid_t owner;
/* NICMALLOC_FENCE=detect: blocks from fence_min bytes get their site recorded, about one per
 * fence_mean bytes (0: all); see safety/fence_detect.c. */
static size_t fence_min = SIZE_MAX;
static double fence_mean;
extern size_t nic_dp_fast_max; /* alloc_inline.h */
static __thread int64_t until_sample __attribute__((tls_model("initial-exec")));
static __thread int64_t until_record __attribute__((tls_model("initial-exec")));
static __thread uint64_t rng __attribute__((tls_model("initial-exec")));
/* Set while this thread captures a stack: allocations from inside the unwinder are plain. */
static __thread bool busy __attribute__((tls_model("initial-exec")));

size_t nic_profile_fast_limit(void) {
  const struct nic_config *c = nic_config();
  double mean;
  size_t fence = nic_fence_detect_record_min(&mean);
  if (c->profile_path) return 0;
  if (c->sites_path) return c->sites_min_size < fence ? c->sites_min_size : fence;
  return fence;
}

static int64_t next_interval(double mean) {
  if (!rng) rng = ((uintptr_t)&rng * 0x9e3779b97f4a7c15ull) ^ (uint64_t)time(NULL) ^ 1;
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  double u = ((double)(rng >> 11) + 0.5) * 0x1.0p-53;
  return (int64_t)(-log(u) * mean) + 1;
}

/* True when p was sampled. */
static bool sample(void *p, size_t size) {
  if (!rng) { /* a thread's first allocation starts its countdown */
    until_sample = next_interval(sample_mean);
    return false;
  }
  until_sample -= (int64_t)size;
  if (until_sample > 0) return false;
  until_sample = next_interval(sample_mean);
  if (nic_in_dp(p)) return false; /* sinks count only memory that is not dataplane */
  busy = true;
  uintptr_t frames[NIC_PROF_FRAMES];
  unsigned n = nic_prof_capture(frames);
  double weight = 1.0 / -expm1(-(double)size / sample_mean);
  if (n) nic_prof_table_sample(p, mi_usable_size(p), weight, frames, n);
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
  if (n) nic_prof_table_record(p, mi_usable_size(p), frames, n);
  busy = false;
}

void *nic_profile_alloc(size_t size, size_t alignment, bool zero, enum nic_route route) {
  int flags = __atomic_load_n(&nic_profile_flags, __ATOMIC_RELAXED);
  if (busy) return nic_alloc_core(size, alignment, zero, route);
  if ((flags & NIC_PROF_ROUTE) && route == NIC_ROUTE_AUTO) {
    busy = true;
    route = nic_sites_route(size);
    busy = false;
  }
  void *p = nic_alloc_core(size, alignment, zero, route);
  bool sampled = p && (flags & NIC_PROF_SAMPLE) && sample(p, size);
  if (p && !sampled && (flags & NIC_PROF_FENCE)) record(p, size);
  return p;
}

void nic_profile_forget(void *p) {
  nic_prof_table_forget(p);
}

void nic_profile_start(void) {
  nic_sink_init();
  const struct nic_config *c = nic_config();
  fence_min = nic_fence_detect_record_min(&fence_mean);
  if (!c->profile_path && !c->sites_path && fence_min == SIZE_MAX) return;
  nic_prof_stack_init();
  int flags = 0;
  if (c->sites_path && nic_sites_load(c->sites_path)) flags |= NIC_PROF_ROUTE;
  const bool fence = fence_min != SIZE_MAX;
  if (c->profile_path || fence) {
    if (nic_prof_table_init()) {
      flags |= (c->profile_path ? NIC_PROF_SAMPLE : 0) | (fence ? NIC_PROF_FENCE : 0);
      /* Arms the safety filter of nic_release_block for good, so that every free reaches
       * nic_profile_forget without a test of its own on the fast path (safety code treats the
       * extra reference as "something may be in flight" and answers from its page counts). */
      nic_profile_tracking = true;
      __atomic_add_fetch(&nic_safety_refs, 1, __ATOMIC_SEQ_CST);
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
  owner = getpid();
  __atomic_store_n(&nic_profile_flags, flags, __ATOMIC_RELEASE);
}

void nic_profile_after_fork_child(void) {
  nic_prof_table_after_fork_child();
}

static int by_sent(const void *a, const void *b) {
  const struct nic_prof_site *x = a, *y = b;
  if (x->sent != y->sent) return x->sent < y->sent ? 1 : -1;
  return x->est_bytes < y->est_bytes ? 1 : x->est_bytes > y->est_bytes ? -1 : 0;
}

static void write_site(int fd, const struct nic_prof_site *s) {
  char line[4096], path[1024];
  int len = snprintf(line, sizeof line, "site %llu %.0f %llu %.0f %.0f %.0f",
                     (unsigned long long)s->sent, s->est_sent, (unsigned long long)s->sampled,
                     s->est_allocs, s->est_bytes, s->est_sent_blocks);
  for (unsigned i = 0; i < s->nframes && len < (int)sizeof line - 1; i++) {
    uintptr_t bias = 0;
    if (!nic_prof_module_of(s->frames[i], path, sizeof path, &bias)) snprintf(path, 8, "?");
    len += snprintf(line + len, sizeof line - (size_t)len, " %s+0x%lx", path,
                    (unsigned long)(s->frames[i] - bias));
  }
  if (len >= (int)sizeof line - 1) return; /* absurd paths: leave the site out */
  line[len++] = '\n';
  (void)!write(fd, line, (size_t)len);
}

/* A forked child writes PATH.PID, so that it does not overwrite its parent's profile. */
void nic_profile_finish(void) {
  if (!(__atomic_load_n(&nic_profile_flags, __ATOMIC_ACQUIRE) & NIC_PROF_SAMPLE)) return;
  const struct nic_config *c = nic_config();
  char path[4096];
  if (getpid() == owner)
    snprintf(path, sizeof path, "%s", c->profile_path);
  else
    snprintf(path, sizeof path, "%s.%d", c->profile_path, (int)getpid());
  static struct nic_prof_site sites[MAX_SITES];
  unsigned n = nic_prof_table_sites(sites, MAX_SITES);
  qsort(sites, n, sizeof sites[0], by_sent);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    nic_log_warn("NICMALLOC_PROFILE=%s cannot be written; no profile", path);
    return;
  }
  struct nic_sink_totals sent;
  nic_sink_totals(&sent);
  nic_fdprintf(fd, "# nicmalloc profile 1\n");
  nic_fdprintf(fd, "# sample_bytes %zu sent_dataplane %llu sent_other %llu dropped_samples %llu\n",
               c->profile_sample, (unsigned long long)sent.dataplane,
               (unsigned long long)sent.other, (unsigned long long)nic_prof_table_dropped());
  nic_fdprintf(
      fd, "# site SENT EST_SENT SAMPLED EST_ALLOCS EST_BYTES EST_SENT_BLOCKS MODULE+0xOFFSET...\n");
  for (unsigned i = 0; i < n; i++)
    write_site(fd, &sites[i]);
  close(fd);
}
