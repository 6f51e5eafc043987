/* The receive side of the endpoints (receive.c): one shape for every backend. The backend hands
 * each message over in one of its receive buffers (backend.h nic_endpoint_rx_fn); this layer
 * runs the program's function, then gives the buffer back, or keeps it out while a nic_hold
 * covers it and gives it back at the matching nic_release. */
#ifndef NIC_RECEIVE_H
#define NIC_RECEIVE_H

#include "nicmalloc.h"

#include <stdbool.h>

/* nic_poll: hands over up to max (all when 0) messages that waited for the held bytes to fall
 * under NICMALLOC_RECV_HELD_MAX, in order; returns how many. */
int nic_receive_drain(int max);
/* Gives back every receive buffer no hold covers any more (nic_release calls it). */
void nic_receive_retry_held(void);
/* Before an endpoint's destroy: its buffers no hold covers go back first. */
void nic_receive_endpoint_closing(struct nic_endpoint *ep);
/* Right before its backend's destroy, under the endpoints' lock: -EBUSY while nic_receive_drain
 * runs ep's receive function (which the backend does not see); else 0, and the drain hands ep
 * nothing more until the destroy has gone one way (gone) or the other (kept). */
int nic_receive_endpoint_stopping(struct nic_endpoint *ep);
/* Its destroy failed: ep's waiting messages may be handed over again. */
void nic_receive_endpoint_kept(struct nic_endpoint *ep);
/* After its destroy succeeded: forgets what it knew of ep. */
void nic_receive_endpoint_gone(struct nic_endpoint *ep);

/* endpoint.c, once a sim endpoint's receiver returned: buf, the dataplane block len bytes of the
 * message came in, is freed, or listed as held (counted as every backend's) while a hold covers
 * it and freed at the release that ends the last. */
void nic_receive_sim_done(void *buf, size_t len);
/* endpoint.c: the sim's endpoints keep their receiver there. 0, or -EINVAL (not one of them). */
int nic_sim_receive_set(struct nic_endpoint *ep, nic_receive_fn receive, void *arg);
/* endpoint_common.c: whether ep was made by a public constructor of a non-sim backend. */
bool nic_ep_known(const struct nic_endpoint *ep);

#endif
