/* The heap layer's fields of struct nic_stats (collected by alloc/api/stats.c through this). */
#include "heap_stats.h"

#include "chunks.h"
#include "config.h"
#include "control_live.h"
#include "dp_heap.h"
#include "dp_live.h"
#include "huge_cache.h"
#include "mi_layout.h"
#include "nicmalloc.h"
#include "nudge.h"
#include "peaks.h"
#include "thread.h"

#include <mimalloc.h>

/* One probe of mimalloc's segment map per segment (nic_mi_segment_at). */
static size_t segment_bytes(unsigned chunk) {
  char *base = nic_chunk_base(chunk);
  size_t size = (size_t)1 << nic_dp.shift, bytes = 0;
  for (size_t off = 0; off < size; off += NIC_MI_SEGMENT_SIZE)
    if (nic_mi_segment_at((uintptr_t)base + off)) bytes += NIC_MI_SEGMENT_SIZE;
  return bytes;
}

static void fill_huge(struct nic_stats *out) {
  struct nic_huge_cache_stats huge;
  nic_huge_cache_stats(&huge);
  out->huge_cached_bytes = huge.bytes;
  out->huge_cached_blocks = huge.blocks;
  out->huge_hits = huge.hits;
  out->huge_misses = huge.misses;
  out->huge_purged = huge.purged;
}

void nic_heap_fill_stats(struct nic_stats *out) {
  int64_t dp[NIC_CHUNK_SLOTS], dp_total = 0;
  nic_dp_live_sum(dp, NULL);
  for (unsigned i = 0; i < NIC_CHUNK_SLOTS; i++)
    dp_total += dp[i];
  out->dataplane_live = dp_total > 0 ? (size_t)dp_total : 0;
  fill_huge(out);
  /* After the os layer's control_committed (alloc/api/stats.c): what counts where the headers
   * cannot be read. */
  size_t control_live;
  if (!nic_control_live(&control_live)) control_live = out->control_committed;
  out->control_live =
      control_live > out->huge_cached_bytes ? control_live - out->huge_cached_bytes : 0;

  struct nic_chunk_totals chunks;
  nic_chunk_totals(&chunks);
  const struct nic_config *cfg = nic_config();
  out->dataplane_in_use = 0;
  for (unsigned i = 0; i < nic_chunk_slots_used(); i++) {
    int state = __atomic_load_n(&nic_chunk_at(i)->state, __ATOMIC_ACQUIRE);
    if (state == NIC_CHUNK_LIVE || state == NIC_CHUNK_DRAINING)
      out->dataplane_in_use += segment_bytes(i);
  }
  out->dataplane_pinned = chunks.pinned_bytes;
  out->dataplane_mapped = chunks.mapped_bytes;
  out->dataplane_reserved = nic_dp_reserved_span();
  out->chunk_size = cfg->chunk_size;
  out->chunks_live = chunks.live;
  out->chunks_draining = chunks.draining;
  out->chunks_max = nic_chunks_max_now();
  out->chunks_created = chunks.created;
  out->chunks_released = chunks.released;
  out->page_kind = chunks.last_kind;
  out->page_fallbacks = chunks.page_fallbacks;
  out->pin_failures = chunks.pin_failures;
  out->chunk_refusals = chunks.refusals;
  out->pin_step = out->dataplane_reserved ? (size_t)1 << nic_dp.step_shift : cfg->pin_step;
  out->steps_pinned = chunks.pinned_steps;
  out->steps_backed = chunks.steps_backed;
  out->steps_released = chunks.steps_released;
  out->dataplane_backed = chunks.backed_bytes;
  out->dataplane_dropped = chunks.dropped_bytes;
  struct nic_nudge_totals nudges;
  nic_nudge_totals(&nudges);
  out->dataplane_nudges = nudges.asked;
  out->dataplane_nudge_answers = nudges.answers;
  out->dataplane_nudged_bytes = nudges.bytes;
  nic_peaks_read(out->dataplane_live, out->dataplane_pinned, &out->dataplane_live_peak,
                 &out->dataplane_pinned_peak);
}
