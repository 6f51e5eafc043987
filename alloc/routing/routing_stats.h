/* The routing layer's fields of struct nic_stats: bytes sent by where they lie, routed sites. */
#ifndef NIC_ROUTING_STATS_H
#define NIC_ROUTING_STATS_H

struct nic_stats;
void nic_routing_fill_stats(struct nic_stats *out);

#endif
