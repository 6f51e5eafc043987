/* The os layer's fields of struct nic_stats: the control arena as the kernel sees it, and
 * address-space reservations refused. */
#ifndef NIC_OS_STATS_H
#define NIC_OS_STATS_H

struct nic_stats;
void nic_os_fill_stats(struct nic_stats *out);

#endif
