/* nic_endpoint_limits: what one post to an endpoint may carry, for a program that cuts a long
 * message into several posts in a row (the serializer adapters, include/nicmalloc/sg_post.h). */
#include "api_errors.h"
#include "backend.h"
#include "endpoint_common.h"
#include "export.h"
#include "nicmalloc.h"

#include <errno.h>
#include <stdint.h>

/* The verbs plugin's receive buffers (NIC_VERBS_RX_BUF_BYTES, regcache/verbs/verbs_rx.h): a
 * longer message ends the receiver's receiving with -EMSGSIZE. This layer reaches the plugin only
 * through its handle and does not include its headers. */
#define VERBS_RECEIVE_BYTES ((size_t)64 << 10)

NIC_EXPORT int nic_endpoint_limits(const struct nic_endpoint *ep, unsigned *max_entries,
                                   size_t *max_message) {
  if (!ep) {
    nic_api_error(endpoint, "nic_endpoint_limits: no endpoint");
    return -EINVAL;
  }
  if (nic_ep_inherited(ep)) {
    nic_api_error(endpoint, "nic_endpoint_limits(%p): %s", (const void *)ep,
                  nic_ep_inherited_why());
    return -ENODEV;
  }
  /* The array is filled against the default backend (nic_sga_init) and posted to ep's. */
  struct nic_backend *const d = nic_backend_active(), *b = d ? nic_ep_backend_of(ep) : NULL;
  if (!b) {
    nic_api_error(endpoint, "nic_endpoint_limits(%p): no backend is open (%s)", (const void *)ep,
                  nic_backend_missing_why() ? nic_backend_missing_why() : "NICMALLOC_BACKEND");
    return -ENODEV;
  }
  unsigned entries = NIC_SGA_CAPACITY;
  const unsigned own = b->endpoint_max_entries ? b->endpoint_max_entries(b, ep) : b->caps.max_sge;
  if (own < entries) entries = own;
  if (d->caps.max_sge < entries) entries = d->caps.max_sge;
  if (max_entries) *max_entries = entries;
  /* ep's backend takes the post: the default one only resolved its entries. */
  size_t bytes = b->endpoint_max_message ? b->endpoint_max_message(b, ep)
                 : b->caps.max_message   ? b->caps.max_message
                                         : SIZE_MAX;
  if (nic_backend_kind_of(b) == NIC_BACKEND_VERBS && VERBS_RECEIVE_BYTES < bytes)
    bytes = VERBS_RECEIVE_BYTES;
  if (max_message) *max_message = bytes;
  return 0;
}
