/* Descriptors a backend's open leaves behind without close-on-exec. DPDK 22.11's EAL keeps its
 * memory's memfd (or hugetlbfs files), its interrupt pipe, alarm timerfd and epoll set open
 * without it: every program the process later execs would get them, the memfd with the
 * dataplane's packet buffers in it (a privileged program handing DPDK's memory to a helper it
 * runs). The open is bracketed: what it opened is made close-on-exec. */
#ifndef NIC_OPEN_FDS_H
#define NIC_OPEN_FDS_H

#include <stdbool.h>
#include <stdint.h>

#define NIC_FD_SET_MAX 65536 /* descriptors above are not looked at */

struct nic_fd_set {
  uint64_t bits[NIC_FD_SET_MAX / 64];
};

/* The descriptors open now (/proc/self/fd, or one fcntl each where /proc is not mounted). */
void nic_fds_snapshot(struct nic_fd_set *s);
/* Sets close-on-exec on each descriptor open now that was not in before; how many it set. */
unsigned nic_fds_cloexec_new(const struct nic_fd_set *before);

#endif
