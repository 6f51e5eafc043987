/* nic_dpdk_endpoint_create: the dpdk backend's public endpoint, a started port's tx queue; and
 * nic_dpdk_attach, the application's port as the default one.
 * The backend is a plugin (libnicmalloc-dpdk.so) loaded only when chosen, so its endpoint API
 * (regcache/dpdk/dpdk.h) is reached through the plugin's own handle. */
#include "alloc.h"
#include "api_errors.h"
#include "chunks.h"
#include "endpoint_common.h"
#include "log.h"
#include "nicmalloc.h"
#include "nocancel.h"
#include "thread.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct nic_endpoint *(*default_fn)(struct nic_backend *);
typedef void (*port_fn)(const struct nic_endpoint *, uint16_t *, uint16_t *);

/* The default endpoint's port and queue: 0, or -ENOENT when the backend has none. */
static int default_port(struct nic_backend *b, uint16_t *port, uint16_t *queue) {
  default_fn get = (default_fn)nic_ep_plugin_symbol(b, "nic_dpdk_default_endpoint");
  port_fn where = (port_fn)nic_ep_plugin_symbol(b, "nic_dpdk_endpoint_port");
  struct nic_endpoint *ep = get && where ? get(b) : NULL;
  if (!ep) return -ENOENT;
  where(ep, port, queue);
  return 0;
}

/* The plugin's receive buffers (regcache/dpdk/dpdk.h, nic_dpdk_rx_memory): dataplane memory
 * only, in one step registered with the dpdk backend (endpoint_common.h: the step's one
 * registration, which the plugin's buffers then share with every post from that step, and which
 * lasts while the block does), 4 KiB aligned for the pool's page-sized buffers. The layout of
 * struct nic_dpdk_rx_memory (dpdk.h), which safety does not include: the plugin is reached only
 * through its handle. */
struct rx_memory {
  void *(*alloc)(size_t len);
  void (*free)(void *p);
};
typedef void (*rx_memory_fn)(const struct rx_memory *);

static void *rx_alloc(size_t len) {
  uint32_t lkey;
  uint64_t handle;
  if (len <= NIC_EP_SMALLEST_STEP)
    return nic_ep_rx_block(nic_backend_started(NIC_BACKEND_DPDK), len, 4096, &lkey, &handle);
  /* Longer than a step holds: asked for only for a received packet gathered whole, which no NIC
   * writes (dpdk.h), so dataplane memory needs no registration here. */
  NIC_INTERNAL_SCOPE();
  void *p = nic_alloc(len, 4096, false, NIC_ROUTE_DATAPLANE);
  if (p && !nic_in_dp(p)) {
    nic_free_named(p, "receive buffer");
    p = NULL;
  }
  return p;
}

static void rx_free(void *p) {
  NIC_INTERNAL_SCOPE();
  nic_free_named(p, "receive buffer");
}

static void hand_rx_memory(struct nic_backend *b) {
  static const struct rx_memory memory = {.alloc = rx_alloc, .free = rx_free};
  rx_memory_fn give = (rx_memory_fn)nic_ep_plugin_symbol(b, "nic_dpdk_rx_memory");
  if (give) give(&memory);
}

NIC_EXPORT struct nic_endpoint *nic_dpdk_endpoint_create(uint16_t port_id, uint16_t queue_id) {
  NIC_CANCEL_OFF_SCOPE(); /* endpoints are made and ended under locks */
  NIC_INTERNAL_SCOPE();
  /* An endpoint lasts longer than the thread that made it, often: thread.h */
  NIC_LIFETIME_SCOPE();
  static const char who[] = "nic_dpdk_endpoint_create";
  struct nic_backend *b =
      nic_ep_backend(who, NIC_BACKEND_DPDK, "it needs DPDK's EAL and a port: NICMALLOC_DPDK_VDEV");
  if (!b) return NULL;
  hand_rx_memory(b); /* before any endpoint of it can receive */
  if (port_id == NIC_DPDK_DEFAULT_PORT) {
    if (queue_id != 0 || default_port(b, &port_id, &queue_id)) {
      nic_api_error_by(endpoint, queue_id != 0, 0, "%s(NIC_DPDK_DEFAULT_PORT, %u): %s", who,
                       queue_id,
                       queue_id ? "the default port takes queue 0 (its own queue)"
                                : "there is no default port (set NICMALLOC_DPDK_VDEV, or call "
                                  "nic_dpdk_attach)");
      errno = queue_id ? EINVAL : ENOENT;
      return NULL;
    }
  }
  struct nic_endpoint *ep =
      b->endpoint_create(b, &(struct nic_endpoint_params){.port = port_id, .queue = queue_id});
  int err = errno;
  if (ep && !nic_ep_track(ep, "dpdk", b)) {
    b->endpoint_destroy(b, ep);
    ep = NULL;
    err = ENOMEM;
  }
  if (!ep) {
    nic_api_error_by(endpoint, err, 0, "%s(%u, %u): %s", who, port_id, queue_id,
                     err == EINVAL ? "no such port, or no tx queue of that number set up on it"
                                   : strerror(err));
    errno = err;
  }
  return ep;
}

/* The plugin's own nic_dpdk_attach (regcache/dpdk/dpdk.h), reached the only way an application
 * can: the plugin is loaded by libnicmalloc, privately, and only when the backend opens. Before
 * that it is loaded here without opening the backend (which would start EAL where the
 * application's does not run), so that the backend, when it opens, uses the attached port. The
 * plugin says and counts its errors through the host table its open hands it: until then this
 * side does. */
typedef int (*attach_fn)(uint16_t, uint16_t);

NIC_EXPORT int nic_dpdk_attach(uint16_t port_id, uint16_t queue_id) {
  NIC_CANCEL_OFF_SCOPE(); /* the plugin is loaded, and endpoints made, under locks */
  NIC_INTERNAL_SCOPE();
  NIC_LIFETIME_SCOPE(); /* the endpoint it may make outlives the calling thread */
  static const char who[] = "nic_dpdk_attach";
  const bool hosted = nic_backend_started(NIC_BACKEND_DPDK) != NULL;
  attach_fn attach = (attach_fn)nic_backend_plugin_symbol(NIC_BACKEND_DPDK, who);
  if (!attach) {
    nic_api_error_by(endpoint, who, ENODEV, "%s(%u, %u): the dpdk backend is not available (%s)",
                     who, port_id, queue_id,
                     nic_backend_refused_why(NIC_BACKEND_DPDK)
                         ? nic_backend_refused_why(NIC_BACKEND_DPDK)
                         : "libnicmalloc-dpdk.so cannot be loaded: NICMALLOC_VERBOSE=1 says why");
    return -ENODEV;
  }
  const int rc = attach(port_id, queue_id);
  if (rc && !hosted)
    nic_api_error_by(endpoint, who, rc, "%s(%u, %u): %s", who, port_id, queue_id,
                     rc == -EINVAL ? "no such port (the application starts EAL and the port first)"
                                   : strerror(-rc));
  return rc;
}

NIC_EXPORT int nic_dpdk_endpoint_destroy(struct nic_endpoint *ep) {
  NIC_CANCEL_OFF_SCOPE(); /* endpoints are made and ended under locks */
  NIC_INTERNAL_SCOPE();
  return nic_ep_untrack(ep, "dpdk", "nic_dpdk_endpoint_destroy");
}
