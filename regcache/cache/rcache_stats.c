/* The registration cache's fields of struct nic_stats (collected by alloc/api/stats.c through
 * this). */
#include "rcache_stats.h"

#include "backend.h"
#include "nicmalloc.h"
#include "plugin_host.h"
#include "rcache.h"

void nic_regcache_fill_stats(struct nic_stats *out) {
  struct nic_rcache_stats rc;
  nic_rcache_get_stats_all(&rc);
  out->rcache_hits = rc.hits;
  out->rcache_misses = rc.misses;
  out->rcache_evictions = rc.evictions;
  out->rcache_invalidations = rc.invalidations;
  out->rcache_regions = rc.regions;
  out->rcache_bytes = rc.bytes;
  out->backend = nic_backends_names();
  out->backend_start_refusals = nic_backend_start_refusals();
  out->verbs_completion_errors = nic_plugin_completion_errors();
  out->dpdk_recv_dropped = nic_plugin_rx_dropped();
}
