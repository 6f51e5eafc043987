/* The routing layer's fields of struct nic_stats (collected by alloc/api/stats.c through this). */
#include "routing_stats.h"

#include "nicmalloc.h"
#include "profile.h"

void nic_routing_fill_stats(struct nic_stats *out) {
  struct nic_sink_totals sent; /* profile_sink.c */
  nic_sink_totals(&sent);
  out->sent_dataplane_bytes = sent.dataplane;
  out->sent_other_bytes = sent.other;
  struct nic_sites_totals sites; /* profile_sites.c */
  nic_sites_totals(&sites);
  out->sites_routed = sites.sites;
  out->sites_routed_allocs = sites.routed_allocs;
  out->sites_routed_bytes = sites.routed_bytes;
  out->sites_over_budget = sites.over_budget;
}
