/* Plain sends kept behind posted ones. A send, write or their vector forms on a socket that a
 * layer above posts to asynchronously (an io_uring endpoint) would otherwise land in the middle
 * of a posted message still queued or half sent. The interposed send family
 * (alloc/routing/profile_sink.c) asks here first; the layer that posts installs what to do
 * (wait until its posts on the fd are wholly handed to the kernel, or refuse) and counts its
 * endpoints, so that this layer knows nothing of it.
 *
 * Cost for a program without such endpoints: one relaxed load and a branch per call. */
#ifndef NIC_SEND_ORDER_H
#define NIC_SEND_ORDER_H

#include <stdbool.h>

/* Endpoints open that plain sends must wait for; zero in almost every process. */
extern unsigned nic_send_order_endpoints __attribute__((visibility("hidden")));

/* Set once, before the first nic_send_order_watch(+1). before(fd, flags): 0 when a plain send
 * on fd may go now (after waiting, if it had to), else -errno (-EAGAIN: the socket or flags say
 * non-blocking and posts on fd are not yet all handed to the kernel). */
void nic_send_order_set(int (*before)(int fd, int flags));
void nic_send_order_watch(int delta);

/* True while some endpoint exists: only then need a send ask nic_send_order. Tested first, on
 * its own, so that the sending function's fast path is the load, a branch and its usual body. */
static inline bool nic_send_order_active(void) {
  return __builtin_expect(__atomic_load_n(&nic_send_order_endpoints, __ATOMIC_RELAXED) != 0, 0);
}

/* 0: send now; -errno: fail the call with that errno, sending nothing. */
int nic_send_order(int fd, int flags);

#endif
