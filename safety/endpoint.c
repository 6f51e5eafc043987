/* The sim backend's public endpoint. The sim NIC hands each message to its receiver in the
 * engine's own buffer; here it lands in a fresh dataplane buffer instead, as a real NIC would
 * DMA into posted dataplane receive buffers. The buffer is freed when receive returns, or, while
 * a nic_hold covers it, kept as every backend keeps a held buffer (receive.c) and freed at the
 * release that ends the last hold: a deserializer may keep pointers into it. */
#include "alloc.h"
#include "api_errors.h"
#include "endpoint_common.h"
#include "export.h"
#include "forklock.h"
#include "log.h"
#include "nicmalloc.h"
#include "nocancel.h"
#include "receive.h"
#include "safety.h"
#include "sim_nic.h"
#include "thread.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct rx {
  nic_receive_fn receive;
  void *arg;
  struct nic_endpoint *ep;
  struct rx *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
NIC_FORKLOCK_MUTEX(sim_endpoints, NIC_FORK_SIM_ENDPOINTS, &lock, NULL);
static struct rx *endpoints;

/* The NIC's receiver: -ENOMEM, which the sender's post completes with, when no dataplane buffer
 * can be had for the message (as a receive queue with no buffer posted drops what comes). */
static int deliver(void *arg, const void *data, size_t len) {
  struct rx *r = arg;
  void *buf = len ? nic_alloc(len, 0, false, NIC_ROUTE_DATAPLANE) : NULL;
  if (!buf && len) {
    NIC_SAFETY_COUNT(recv_no_buffer, 1);
    nic_log_error_once("receive: no dataplane memory for a %zu-byte message to a sim endpoint: "
                       "it is dropped and its post completes with -ENOMEM (each such message "
                       "is counted in recv_no_buffer, this is said once)",
                       len);
    return -ENOMEM;
  }
  if (len) memcpy(buf, data, len);
  /* Together, as nic_sim_receive_set changes them: a receiver replaced meanwhile is called with
   * its own arg, never the new one's. r lives on: its endpoint has this message in flight. */
  pthread_mutex_lock(&lock);
  const nic_receive_fn receive = r->receive;
  void *const receive_arg = r->arg;
  pthread_mutex_unlock(&lock);
  if (receive) {
    NIC_SAFETY_COUNT(recv_messages, 1);
    NIC_SAFETY_COUNT(recv_bytes, len);
    const int internal = nic_internal_suspend(); /* the program's function: its own scope */
    receive(receive_arg, buf, len);
    nic_internal_resume(internal);
  }
  nic_receive_sim_done(buf, len);
  return 0;
}

NIC_EXPORT struct nic_endpoint *nic_sim_endpoint_create(nic_receive_fn receive, void *arg,
                                                        unsigned flags) {
  NIC_CANCEL_OFF_SCOPE(); /* endpoints are made and ended under locks */
  NIC_INTERNAL_SCOPE();
  if (flags & ~NIC_EP_ENGINE_COMPLETIONS) {
    nic_api_error_by(endpoint, 1, 0, "nic_sim_endpoint_create: unknown flags");
    errno = EINVAL;
    return NULL;
  }
  struct nic_backend *b = nic_ep_backend("nic_sim_endpoint_create", NIC_BACKEND_SIM,
                                         "it needs memory and a thread for its engine");
  if (!b) return NULL;
  struct rx *r = malloc(sizeof *r);
  if (!r) return NULL;
  *r = (struct rx){.receive = receive, .arg = arg};
  unsigned sim_flags = flags & NIC_EP_ENGINE_COMPLETIONS ? NIC_SIM_EP_ENGINE_COMPLETIONS : 0;
  const struct nic_endpoint_params params = {.receive = deliver, .arg = r, .sim_flags = sim_flags};
  if (!(r->ep = b->endpoint_create(b, &params))) {
    free(r);
    return NULL;
  }
  if (!nic_ep_track(r->ep, "sim", b)) {
    b->endpoint_destroy(b, r->ep);
    free(r);
    errno = ENOMEM;
    return NULL;
  }
  pthread_mutex_lock(&lock);
  r->next = endpoints;
  endpoints = r;
  pthread_mutex_unlock(&lock);
  return r->ep;
}

int nic_sim_receive_set(struct nic_endpoint *ep, nic_receive_fn receive, void *arg) {
  pthread_mutex_lock(&lock);
  struct rx *r = endpoints;
  while (r && r->ep != ep)
    r = r->next;
  if (r) {
    r->receive = receive;
    r->arg = arg;
  }
  pthread_mutex_unlock(&lock);
  return r ? 0 : -EINVAL;
}

NIC_EXPORT int nic_sim_endpoint_destroy(struct nic_endpoint *ep) {
  NIC_CANCEL_OFF_SCOPE(); /* endpoints are made and ended under locks */
  NIC_INTERNAL_SCOPE();
  if (nic_ep_inherited(ep)) { /* the parent's sim keeps it */
    nic_api_error_by(endpoint, "nic_sim_endpoint_destroy", 0, "nic_sim_endpoint_destroy(%p): %s",
                     (void *)ep, nic_ep_inherited_why());
    return -ENODEV;
  }
  pthread_mutex_lock(&lock);
  struct rx **link = &endpoints;
  while (*link && (*link)->ep != ep)
    link = &(*link)->next;
  struct rx *r = *link;
  struct nic_backend *b = nic_backend_started(NIC_BACKEND_SIM);
  int rc = !r ? -EINVAL : b ? b->endpoint_destroy(b, ep) : -ENODEV;
  if (rc == 0) *link = r->next;
  pthread_mutex_unlock(&lock);
  if (!r)
    nic_api_error(endpoint,
                  "nic_sim_endpoint_destroy(%p): not an endpoint made by nic_sim_endpoint_create",
                  (void *)ep);
  if (rc == 0) {
    nic_ep_forget(ep, "sim");
    free(r);
  }
  return rc;
}
