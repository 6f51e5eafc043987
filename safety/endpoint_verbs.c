/* nic_verbs_endpoint_create: the verbs backend's public endpoint, the application's queue pair.
 * The backend is a plugin (libnicmalloc-verbs.so) loaded only when chosen, so its API
 * (regcache/verbs/verbs.h) is reached through the plugin's own handle, and this file needs no
 * rdma-core header: the QP and PD pass as void *. Receiving needs dataplane memory, which the
 * plugin cannot allocate (it links nothing of libnicmalloc): it is handed the means here. */
#include "alloc.h"
#include "api_errors.h"
#include "endpoint_common.h"
#include "log.h"
#include "nicmalloc.h"
#include "nocancel.h"
#include "thread.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char kHint[] = "it needs an RDMA device";

static void *plugin_fn(struct nic_backend *b, const char *who, const char *name) {
  void *fn = nic_ep_plugin_symbol(b, name);
  if (!fn) {
    nic_api_error_by(endpoint, who, name,
                     "%s: libnicmalloc-verbs.so lacks %s (a plugin from another build?)", who,
                     name);
    errno = ENOSYS;
  }
  return fn;
}

/* As regcache/verbs/verbs.h declares it; this file includes no rdma-core header. */
struct nic_verbs_rx_memory {
  void *(*alloc)(size_t len, size_t align, uint32_t *lkey, uint64_t *handle);
  void (*free)(void *block);
};

/* The backend's NIC writes there: a block of one step, with that step's registration with the
 * verbs backend (endpoint_common.h), which lasts while the block does. */
static void *rx_alloc(size_t len, size_t align, uint32_t *lkey, uint64_t *handle) {
  return nic_ep_rx_block(nic_backend_started(NIC_BACKEND_VERBS), len, align, lkey, handle);
}

static void rx_free(void *block) {
  NIC_INTERNAL_SCOPE();
  nic_free_named(block, "receive buffer");
}

static const struct nic_verbs_rx_memory rx_memory = {.alloc = rx_alloc, .free = rx_free};

NIC_EXPORT void *nic_verbs_get_pd(void) {
  NIC_CANCEL_OFF_SCOPE(); /* endpoints are made and ended under locks */
  NIC_INTERNAL_SCOPE();
  static const char who[] = "nic_verbs_get_pd";
  struct nic_backend *b = nic_ep_backend(who, NIC_BACKEND_VERBS, kHint);
  void *(*pd)(struct nic_backend *) = b ? plugin_fn(b, who, "nic_verbs_pd") : NULL;
  return pd ? pd(b) : NULL;
}

NIC_EXPORT struct nic_endpoint *nic_verbs_endpoint_create(void *qp) {
  NIC_CANCEL_OFF_SCOPE(); /* endpoints are made and ended under locks */
  NIC_INTERNAL_SCOPE();
  /* An endpoint lasts longer than the thread that made it, often: thread.h */
  NIC_LIFETIME_SCOPE();
  static const char who[] = "nic_verbs_endpoint_create";
  struct nic_backend *b = nic_ep_backend(who, NIC_BACKEND_VERBS, kHint);
  if (!b) return NULL;
  /* A plugin without it (another build) still sends; receiving then says -EOPNOTSUPP. */
  void (*set_rx_memory)(struct nic_backend *, const struct nic_verbs_rx_memory *) =
      nic_ep_plugin_symbol(b, "nic_verbs_set_rx_memory");
  if (set_rx_memory) set_rx_memory(b, &rx_memory);
  struct nic_endpoint *ep = b->endpoint_create(b, &(struct nic_endpoint_params){.qp = qp});
  int err = errno;
  if (ep && !nic_ep_track(ep, "verbs", b)) {
    b->endpoint_destroy(b, ep);
    ep = NULL;
    err = ENOMEM;
  }
  if (!ep) {
    nic_api_error_by(endpoint, err, 0, "%s(%p): %s", who, qp,
                     err == EINVAL ? "no queue pair, or one outside nicmalloc's protection domain "
                                     "(create it in nic_verbs_get_pd())"
                                   : strerror(err));
    errno = err;
  }
  return ep;
}

NIC_EXPORT int nic_verbs_endpoint_destroy(struct nic_endpoint *ep) {
  NIC_CANCEL_OFF_SCOPE(); /* endpoints are made and ended under locks */
  NIC_INTERNAL_SCOPE();
  return nic_ep_untrack(ep, "verbs", "nic_verbs_endpoint_destroy");
}
