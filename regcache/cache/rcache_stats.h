/* The registration cache's fields of struct nic_stats: its regions and the backend in use. */
#ifndef NIC_RCACHE_STATS_H
#define NIC_RCACHE_STATS_H

struct nic_stats;
void nic_regcache_fill_stats(struct nic_stats *out);

#endif
