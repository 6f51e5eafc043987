/* Descriptors a backend's open leaves behind without close-on-exec. DPDK 22.11's EAL keeps its
 * memory's memfd (or hugetlbfs files), its interrupt pipe, alarm timerfd and epoll set open
 * without it: every program the process later execs would get them, the memfd with the
 * dataplane's packet buffers in it (a privileged program handing DPDK's memory to a helper it
 * runs). The open is bracketed: what it opened is made close-on-exec, and kept on a list of
 * the backends' own descriptors.
 *
 * A child of fork never uses its parent's backends (backend.h), but would hold their
 * descriptors for its whole life: the parent's io_uring ring, with every step registered in it
 * pinned, outlived the parent while any child lived; the sim's /proc/<parent>/mem. The child
 * closes its copies of the list (the parent's stay open). */
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
/* Sets close-on-exec on each descriptor open now that was not in before, and adds it to the
 * backends' own; how many it set close-on-exec. Under the backend lock. */
unsigned nic_fds_adopt_new(const struct nic_fd_set *before);
/* Adds fd, opened by nicmalloc for its backends, to their own. Under the backend lock. */
void nic_fds_adopt(int fd);
/* In a child of fork (the fork handler: async-signal-safe calls only): closes the backends' own
 * descriptors, each only if it still names the file it named when adopted (its device, inode
 * and type), so that a number the program closed and opened again is left alone; how many. */
unsigned nic_fds_close_adopted(void);

#endif
