/* What stats.c gives the report at exit (exit_report.c) besides the exported calls. */
#ifndef NIC_API_STATS_H
#define NIC_API_STATS_H

#include <stdbool.h>

/* nic_print_stats (json: nic_print_stats_json) into fd: 0 when every byte was written, else the
 * errno of the write that failed, after which nothing more was written. */
int nic_stats_report(int fd, bool json);

#endif
