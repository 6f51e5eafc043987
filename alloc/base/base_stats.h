/* The base layer's fields of struct nic_stats: API errors and dropped log lines. */
#ifndef NIC_BASE_STATS_H
#define NIC_BASE_STATS_H

struct nic_stats;
void nic_base_fill_stats(struct nic_stats *out);

#endif
