/* nic_verbs_endpoint_create: the verbs backend's public endpoint, the application's queue pair.
 * The backend is a plugin (libnicmalloc-verbs.so) loaded only when chosen, so its API
 * (regcache/verbs/verbs.h) is reached through the plugin's own handle, and this file needs no
 * rdma-core header: the QP and PD pass as void *. */
#include "api_errors.h"
#include "endpoint_common.h"
#include "log.h"
#include "nicmalloc.h"
#include "thread.h"

#include <errno.h>
#include <string.h>

static const char kHint[] = "set NICMALLOC_BACKEND=verbs; it needs an RDMA device";

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

NIC_EXPORT void *nic_verbs_get_pd(void) {
  NIC_INTERNAL_SCOPE();
  static const char who[] = "nic_verbs_get_pd";
  struct nic_backend *b = nic_ep_backend(who, "verbs", kHint);
  void *(*pd)(struct nic_backend *) = b ? plugin_fn(b, who, "nic_verbs_pd") : NULL;
  return pd ? pd(b) : NULL;
}

NIC_EXPORT struct nic_endpoint *nic_verbs_endpoint_create(void *qp) {
  NIC_INTERNAL_SCOPE();
  static const char who[] = "nic_verbs_endpoint_create";
  struct nic_backend *b = nic_ep_backend(who, "verbs", kHint);
  if (!b) return NULL;
  struct nic_endpoint *ep = b->endpoint_create(b, &(struct nic_endpoint_params){.qp = qp});
  int err = errno;
  if (ep && !nic_ep_track(ep, "verbs")) {
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
  NIC_INTERNAL_SCOPE();
  return nic_ep_untrack(ep, "verbs", "nic_verbs_endpoint_destroy");
}
