/* nic_get_stats and the readable report NICMALLOC_STATS=1 prints at exit. */
#include "alloc.h"
#include "chunks.h"
#include "config.h"
#include "log.h"
#include "nicmalloc.h"
#include "thread.h"

#include <string.h>

#define NIC_EXPORT __attribute__((visibility("default")))

NIC_EXPORT const char *nic_page_kind_name(enum nic_page_kind kind) {
  switch (kind) {
  case NIC_PAGE_4K:
    return "4k";
  case NIC_PAGE_THP:
    return "thp";
  case NIC_PAGE_2M:
    return "2m";
  case NIC_PAGE_1G:
    return "1g";
  default:
    return "none";
  }
}

static size_t clamp_positive(int64_t v) {
  return v > 0 ? (size_t)v : 0;
}

NIC_EXPORT void nic_get_stats(struct nic_stats *out) {
  memset(out, 0, sizeof *out);
  int64_t control, dp[NIC_CHUNK_SLOTS], dp_total = 0;
  nic_thread_sum(&control, dp);
  for (unsigned i = 0; i < NIC_CHUNK_SLOTS; i++)
    dp_total += dp[i];
  out->control_bytes = clamp_positive(control);
  out->dataplane_live = clamp_positive(dp_total);

  struct nic_chunk_totals chunks;
  nic_chunk_totals(&chunks);
  const struct nic_config *cfg = nic_config();
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
}

#define MIB(x) ((x) >> 20), ((((x) & ((1ul << 20) - 1)) * 10) >> 20)

NIC_EXPORT void nic_print_stats(int fd) {
  struct nic_stats s;
  nic_get_stats(&s);
  nic_fdprintf(fd, "nicmalloc report\n");
  nic_fdprintf(fd, "  control heap      live %zu.%zu MiB\n", MIB(s.control_bytes));
  nic_fdprintf(fd,
               "  dataplane         live %zu.%zu MiB, pinned %zu.%zu MiB, mapped %zu.%zu MiB, "
               "reserved %zu MiB\n",
               MIB(s.dataplane_live), MIB(s.dataplane_pinned), MIB(s.dataplane_mapped),
               s.dataplane_reserved >> 20);
  size_t unused = s.dataplane_mapped > s.dataplane_live ? s.dataplane_mapped - s.dataplane_live : 0;
  nic_fdprintf(fd, "  dataplane free    %zu.%zu MiB mapped but not in use by live blocks\n",
               MIB(unused));
  nic_fdprintf(fd,
               "  chunks            %u live (%u draining) of %u max, %zu MiB each, %llu "
               "created, %llu released, page kind %s\n",
               s.chunks_live, s.chunks_draining, s.chunks_max, s.chunk_size >> 20,
               (unsigned long long)s.chunks_created, (unsigned long long)s.chunks_released,
               nic_page_kind_name(s.page_kind));
  nic_fdprintf(fd,
               "  fallbacks         %llu smaller page kind, %llu not pinned, %llu dataplane "
               "requests served by control, %llu failed\n",
               (unsigned long long)s.page_fallbacks, (unsigned long long)s.pin_failures,
               (unsigned long long)s.dataplane_fallbacks, (unsigned long long)s.dataplane_failures);
  nic_fdprintf(fd, "  errors            %llu invalid frees, %llu double frees\n",
               (unsigned long long)s.invalid_frees, (unsigned long long)s.double_frees);
}
