/* The heap layer's fields of struct nic_stats: dataplane chunks and bytes, huge control blocks. */
#ifndef NIC_HEAP_STATS_H
#define NIC_HEAP_STATS_H

struct nic_stats;
void nic_heap_fill_stats(struct nic_stats *out);

#endif
