/* nic_get_stats and the readable report NICMALLOC_STATS=1 prints at exit. */
#include "alloc.h"
#include "api_errors.h"
#include "backend.h"
#include "chunks.h"
#include "config.h"
#include "dp_heap.h"
#include "fence.h"
#include "huge_cache.h"
#include "log.h"
#include "nicmalloc.h"
#include "pressure.h"
#include "profile.h"
#include "rcache.h"
#include "safety.h"
#include "smaps.h"
#include "thread.h"
#include "vspace.h"

#include <mimalloc.h>
#include <string.h>

#define NIC_EXPORT __attribute__((visibility("default")))

#define SEGMENT_SIZE ((size_t)32 << 20)

NIC_EXPORT const char *nic_page_kind_name(enum nic_page_kind kind) {
  return nic_page_kind_str(kind);
}

static uint64_t clamp_positive(int64_t v) {
  return v > 0 ? (uint64_t)v : 0;
}

/* mimalloc commits control memory by making it writable; what the kernel holds is Rss. */
static bool add_control(const struct nic_smaps_entry *e, void *arg) {
  struct nic_stats *s = arg;
  if (e->writable) s->control_committed += e->end - e->start;
  s->control_resident += e->rss_kb << 10;
  return true;
}

/* One probe of mimalloc's segment map per 32 MiB (see reaper.c for the one-byte offset). */
static size_t segment_bytes(unsigned chunk) {
  char *base = nic_chunk_base(chunk);
  size_t size = (size_t)1 << nic_dp.shift, bytes = 0;
  for (size_t off = 0; off < size; off += SEGMENT_SIZE)
    if (mi_is_in_heap_region(base + off + 1)) bytes += SEGMENT_SIZE;
  return bytes;
}

NIC_EXPORT void nic_get_stats(struct nic_stats *out) {
  if (!out) {
    nic_api_error(other, "nic_get_stats(NULL): nowhere to write the statistics; ignored");
    return;
  }
  NIC_INTERNAL_SCOPE();
  memset(out, 0, sizeof *out);
  int64_t dp[NIC_CHUNK_SLOTS], dp_total = 0;
  nic_thread_sum(dp);
  for (unsigned i = 0; i < NIC_CHUNK_SLOTS; i++)
    dp_total += dp[i];
  out->dataplane_live = clamp_positive(dp_total);
  if (nic_control_size)
    nic_smaps_walk(nic_control_base, nic_control_base + nic_control_size, add_control, out);
  struct nic_huge_cache_stats huge;
  nic_huge_cache_stats(&huge);
  out->huge_cached_bytes = huge.bytes;
  out->huge_cached_blocks = huge.blocks;
  out->huge_hits = huge.hits;
  out->huge_misses = huge.misses;
  out->huge_purged = huge.purged;

  struct nic_chunk_totals chunks;
  nic_chunk_totals(&chunks);
  const struct nic_config *cfg = nic_config();
  for (unsigned i = 0; i < nic_chunk_slots_used(); i++) {
    int state = __atomic_load_n(&nic_chunk_at(i)->state, __ATOMIC_ACQUIRE);
    if (state == NIC_CHUNK_LIVE || state == NIC_CHUNK_DRAINING)
      out->dataplane_in_use += segment_bytes(i);
  }
  out->dataplane_pinned = chunks.pinned_bytes;
  out->dataplane_mapped = chunks.mapped_bytes;
  out->dataplane_reserved = nic_dp.base ? nic_dp.span : 0;
  out->chunk_size = cfg->chunk_size;
  out->chunks_live = chunks.live;
  out->chunks_draining = chunks.draining;
  out->chunks_max = cfg->max_chunks;
  out->chunks_created = chunks.created;
  out->chunks_released = chunks.released;
  out->page_kind = chunks.last_kind;
  out->page_fallbacks = chunks.page_fallbacks;
  out->pin_failures = chunks.pin_failures;

  struct nic_alloc_counters counters;
  nic_alloc_counters(&counters);
  out->dataplane_fallbacks = counters.dataplane_fallbacks;
  out->dataplane_failures = counters.dataplane_failures;
  out->invalid_frees = counters.invalid_frees;
  out->double_frees = counters.double_frees;

  struct nic_rcache_stats rc;
  nic_rcache_get_stats(nic_rcache_process(), &rc);
  out->rcache_hits = rc.hits;
  out->rcache_misses = rc.misses;
  out->rcache_evictions = rc.evictions;
  out->rcache_invalidations = rc.invalidations;
  out->rcache_regions = rc.regions;
  out->rcache_bytes = rc.bytes;
  struct nic_backend *b = nic_backend_if_open();
  out->backend = b ? b->name : "none";
  nic_safety_fill_stats(out);   /* safety/safety_stats.c */
  nic_pressure_fill_stats(out); /* safety/pressure.c */
  struct nic_sink_totals sent;  /* alloc/routing/profile_sink.c */
  nic_sink_totals(&sent);
  out->sent_dataplane_bytes = sent.dataplane;
  out->sent_other_bytes = sent.other;
  struct nic_sites_totals sites; /* alloc/routing/profile_sites.c */
  nic_sites_totals(&sites);
  out->sites_routed = sites.sites;
  out->sites_routed_allocs = sites.routed_allocs;
  out->sites_routed_bytes = sites.routed_bytes;
  out->sites_over_budget = sites.over_budget;
  out->log_lines_dropped = nic_log_dropped();
  out->vspace_refusals = __atomic_load_n(&nic_vspace_refusals, __ATOMIC_RELAXED);
  out->chunk_refusals = chunks.refusals;
  out->sga_errors = __atomic_load_n(&nic_api_errors.sga, __ATOMIC_RELAXED);
  out->registration_errors = __atomic_load_n(&nic_api_errors.registration, __ATOMIC_RELAXED);
  out->hold_errors = __atomic_load_n(&nic_api_errors.hold, __ATOMIC_RELAXED);
  out->endpoint_errors = __atomic_load_n(&nic_api_errors.endpoint, __ATOMIC_RELAXED);
  out->other_api_errors = __atomic_load_n(&nic_api_errors.other, __ATOMIC_RELAXED);
}

#define MIB(x) ((x) >> 20), ((((x) & ((1ul << 20) - 1)) * 10) >> 20)

NIC_EXPORT void nic_print_stats(int fd) {
  if (fd < 0) return;
  NIC_INTERNAL_SCOPE();
  struct nic_stats s;
  nic_get_stats(&s);
  nic_fdprintf(fd, "nicmalloc report\n");
  nic_fdprintf(fd, "  control heap      %zu.%zu MiB committed, %zu.%zu MiB resident\n",
               MIB(s.control_committed), MIB(s.control_resident));
  if (s.huge_hits + s.huge_misses)
    nic_fdprintf(fd,
                 "  huge blocks       %llu of %llu requests over 16 MiB reused a freed block; %u "
                 "cached (%zu.%zu MiB), %llu given back\n",
                 (unsigned long long)s.huge_hits, (unsigned long long)(s.huge_hits + s.huge_misses),
                 s.huge_cached_blocks, MIB(s.huge_cached_bytes), (unsigned long long)s.huge_purged);
  nic_fdprintf(fd,
               "  dataplane         live %zu.%zu MiB, pinned %zu.%zu MiB, mapped %zu.%zu MiB, "
               "reserved %zu MiB\n",
               MIB(s.dataplane_live), MIB(s.dataplane_pinned), MIB(s.dataplane_mapped),
               s.dataplane_reserved >> 20);
  size_t in_use = s.dataplane_in_use < s.dataplane_mapped ? s.dataplane_in_use : s.dataplane_mapped;
  size_t used = s.dataplane_live < s.dataplane_mapped ? s.dataplane_live : s.dataplane_mapped;
  nic_fdprintf(fd,
               "  dataplane free    %zu.%zu MiB of mapped chunks not in live blocks (%zu.%zu MiB "
               "held by no mimalloc segment)\n",
               MIB(s.dataplane_mapped - used), MIB(s.dataplane_mapped - in_use));
  nic_fdprintf(fd,
               "  chunks            %u live (%u draining) of %u max, %zu MiB each, %llu "
               "created, %llu released, page kind %s\n",
               s.chunks_live, s.chunks_draining, s.chunks_max, s.chunk_size >> 20,
               (unsigned long long)s.chunks_created, (unsigned long long)s.chunks_released,
               nic_page_kind_name(s.page_kind));
  nic_fdprintf(fd,
               "  fallbacks         %llu smaller page kind, %llu not pinned, %llu dataplane "
               "requests served by control, %llu failed; %llu chunks refused, %llu address-space "
               "reservations refused%s\n",
               (unsigned long long)s.page_fallbacks, (unsigned long long)s.pin_failures,
               (unsigned long long)s.dataplane_fallbacks, (unsigned long long)s.dataplane_failures,
               (unsigned long long)s.chunk_refusals, (unsigned long long)s.vspace_refusals,
               nic_control_size ? "" : " (no control arena: bad frees may go unnoticed)");
  nic_fdprintf(fd,
               "  registration      backend %s; cache %u regions (%zu.%zu MiB), %llu hits, %llu "
               "misses, %llu evictions, %llu invalidations\n",
               s.backend, s.rcache_regions, MIB(s.rcache_bytes), (unsigned long long)s.rcache_hits,
               (unsigned long long)s.rcache_misses, (unsigned long long)s.rcache_evictions,
               (unsigned long long)s.rcache_invalidations);
  nic_fdprintf(fd,
               "  safety            %llu posts (%llu entries) in flight, %llu frees deferred "
               "(%llu pending), %llu holds, %llu bytes copied to bounce areas\n",
               (unsigned long long)s.inflight_posts, (unsigned long long)s.inflight_entries,
               (unsigned long long)s.deferred_frees, (unsigned long long)s.deferred_pending,
               (unsigned long long)s.holds, (unsigned long long)s.bounce_bytes);
  static const char *const fence_modes[] = {"off", "wait", "protect", "detect"};
  const enum nic_fence_mode mode = nic_safety_config()->fence;
  nic_fdprintf(fd,
               "  fence             %s%s%s%s; %llu waits (%llu timed out), %llu writes held, %llu "
               "let through, %llu entries unprotected, %llu written while posted\n",
               fence_modes[mode], mode == NIC_FENCE_PROTECT ? " (" : "",
               mode != NIC_FENCE_PROTECT     ? ""
               : nic_fence_protect_started() ? nic_fence_protect_name()
                                             : "nothing posted yet",
               mode == NIC_FENCE_PROTECT ? ")" : "", (unsigned long long)s.fence_waits,
               (unsigned long long)s.fence_timeouts, (unsigned long long)s.fence_held_writes,
               (unsigned long long)s.fence_bypasses, (unsigned long long)s.fence_unprotected,
               (unsigned long long)s.fence_mismatches);
  char busiest[256];
  nic_pressure_describe(busiest, sizeof busiest);
  nic_fdprintf(fd,
               "  NIC cache         %llu regions need %llu entries; posted working set %llu of "
               "%u (%u%%), %llu modeled misses, %llu small entries copied under pressure%s%s\n",
               (unsigned long long)s.nic_regions, (unsigned long long)s.nic_entries_needed,
               (unsigned long long)s.nic_working_set, s.nic_cache_capacity, s.nic_pressure_pct,
               (unsigned long long)s.nic_modeled_misses, (unsigned long long)s.pressure_copies,
               busiest[0] ? "; busiest: " : "", busiest);
  uint64_t sent = s.sent_dataplane_bytes + s.sent_other_bytes;
  nic_fdprintf(fd,
               "  sent              %llu bytes, %llu from dataplane memory (%llu.%llu%%), %llu "
               "from elsewhere\n",
               (unsigned long long)sent, (unsigned long long)s.sent_dataplane_bytes,
               (unsigned long long)(sent ? s.sent_dataplane_bytes * 100 / sent : 0),
               (unsigned long long)(sent ? s.sent_dataplane_bytes * 1000 / sent % 10 : 0),
               (unsigned long long)s.sent_other_bytes);
  if (s.sites_routed)
    nic_fdprintf(fd,
                 "  routed sites      %llu sites, %llu allocations (%llu bytes) routed, %llu "
                 "over budget\n",
                 (unsigned long long)s.sites_routed, (unsigned long long)s.sites_routed_allocs,
                 (unsigned long long)s.sites_routed_bytes, (unsigned long long)s.sites_over_budget);
  nic_fdprintf(fd,
               "  errors            %llu invalid frees, %llu double frees; calls that returned an "
               "error: %llu sga, %llu registration, %llu hold, %llu endpoint, %llu other\n",
               (unsigned long long)s.invalid_frees, (unsigned long long)s.double_frees,
               (unsigned long long)s.sga_errors, (unsigned long long)s.registration_errors,
               (unsigned long long)s.hold_errors, (unsigned long long)s.endpoint_errors,
               (unsigned long long)s.other_api_errors);
  if (s.log_lines_dropped)
    nic_fdprintf(fd, "  messages          %llu lines not written: stderr was closed or reused\n",
                 (unsigned long long)s.log_lines_dropped);
}
