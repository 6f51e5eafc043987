/* The safety fields of struct nic_stats, NIC cache pressure included (collected by
 * alloc/api/stats.c through this). */
#include "nicmalloc.h"
#include "pressure.h"
#include "safety.h"

static uint64_t get(const uint64_t *field) {
  return __atomic_load_n(field, __ATOMIC_RELAXED);
}

void nic_safety_fill_stats(struct nic_stats *out) {
  out->inflight_posts = get(&nic_safety_ctr.inflight_posts);
  out->inflight_entries = get(&nic_safety_ctr.inflight_entries);
  out->deferred_frees = get(&nic_safety_ctr.deferred_frees);
  out->deferred_pending = get(&nic_safety_ctr.deferred_pending);
  out->holds = get(&nic_safety_ctr.holds);
  out->recv_messages = get(&nic_safety_ctr.recv_messages);
  out->recv_bytes = get(&nic_safety_ctr.recv_bytes);
  out->recv_held_buffers = get(&nic_safety_ctr.recv_held_buffers);
  out->recv_held_bytes = get(&nic_safety_ctr.recv_held_bytes);
  out->recv_stalls = get(&nic_safety_ctr.recv_stalls);
  out->recv_capped = get(&nic_safety_ctr.recv_capped);
  out->recv_waiting = get(&nic_safety_ctr.recv_waiting);
  out->recv_capped_dropped = get(&nic_safety_ctr.recv_capped_dropped);
  out->recv_no_buffer = get(&nic_safety_ctr.recv_no_buffer);
  out->bounce_bytes = get(&nic_safety_ctr.bounce_bytes);
  out->fence_waits = get(&nic_safety_ctr.fence_waits);
  out->fence_timeouts = get(&nic_safety_ctr.fence_timeouts);
  out->fence_held_writes = get(&nic_safety_ctr.fence_held_writes);
  out->fence_writers_held = get(&nic_safety_ctr.fence_writers_held);
  out->fence_bypasses = get(&nic_safety_ctr.fence_bypasses);
  out->fence_unprotected = get(&nic_safety_ctr.fence_unprotected);
  out->fence_mismatches = get(&nic_safety_ctr.fence_mismatches);
  out->fence_release_errors = get(&nic_safety_ctr.fence_release_errors);
  nic_pressure_fill_stats(out);
}
