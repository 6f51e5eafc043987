/* What the public endpoint constructors share (endpoint.c, endpoint_uring.c, endpoint_dpdk.c,
 * endpoint_verbs.c): starting their backend, with a one-line message when it cannot run; a list
 * of the endpoints each made with the backend each belongs to, so that posts and receives reach
 * that backend and destroying anything else is an error rather than a crash; and reaching a
 * plugin's own API. */
#ifndef NIC_ENDPOINT_COMMON_H
#define NIC_ENDPOINT_COMMON_H

#include "backend.h"
#include "export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Backend kind, started now if it does not run yet. Otherwise NULL with errno ENODEV, after one
 * line on stderr naming who, the backend and why it cannot run (hint: what it needs). */
struct nic_backend *nic_ep_backend(const char *who, enum nic_backend_kind kind, const char *hint);

/* Remembers ep as made by kind's constructor on backend b (once per call: an endpoint handed out
 * twice is listed twice), numbered for nic_endpoint_id: the number it has when listed already,
 * else one never given before. false when there is no memory for it. */
bool nic_ep_track(struct nic_endpoint *ep, const char *kind, struct nic_backend *b);
/* Forgets an endpoint of kind that its own code destroyed (the sim's). */
void nic_ep_forget(struct nic_endpoint *ep, const char *kind);

/* The backend ep belongs to. Two loads and a compare while one backend runs and no endpoint was
 * inherited from a parent process (then it is that one, whatever ep is); in a child of fork
 * that inherited some, a binary search first (NULL for one of them); else a look in the list,
 * and the default backend for an endpoint that no public constructor made (a test's, made with
 * the backend's own endpoint_create). */
struct nic_backend *nic_ep_backend_of_slow(const struct nic_endpoint *ep);
extern size_t nic_ep_inherited_count __attribute__((visibility("hidden")));
static inline struct nic_backend *nic_ep_backend_of(const struct nic_endpoint *ep) {
  struct nic_backend *only = nic_backend_only();
  return __builtin_expect(only != NULL && !nic_ep_inherited_count, 1) ? only
                                                                      : nic_ep_backend_of_slow(ep);
}
/* Whether ep was made before this process was forked: its backend is the parent's, and every
 * call on it fails with -ENODEV and nic_ep_inherited_why(). */
bool nic_ep_inherited(const struct nic_endpoint *ep);
const char *nic_ep_inherited_why(void);
/* Whether ep was made by the sim's public constructor (else by another one, or unknown). */
bool nic_ep_is_sim(const struct nic_endpoint *ep);

/* Destroys (the backend's endpoint_destroy) an endpoint kind's constructor made, and forgets it
 * when that returns 0. An endpoint it did not make: -EINVAL and one line on stderr naming who. */
int nic_ep_untrack(struct nic_endpoint *ep, const char *kind, const char *who);

/* NICMALLOC_PIN_STEP's lower bound: every step is at least this long, and aligned to its length,
 * so no longer block is sure to fit in one. */
#define NIC_EP_SMALLEST_STEP ((size_t)2 << 20)

/* Receive buffers for a plugin's endpoints (endpoint_verbs.c, endpoint_dpdk.c): len bytes of
 * dataplane memory, align-aligned at least, inside one pin step, registered for local write with
 * backend b; *lkey and *handle name that registration. It is the step's own, which lasts while
 * the block does: nothing to release but the block (nic_free_named). NULL when no such block can
 * be had (no dataplane memory, a refused registration, len over NIC_EP_SMALLEST_STEP). */
void *nic_ep_rx_block(struct nic_backend *b, size_t len, size_t align, uint32_t *lkey,
                      uint64_t *handle);

/* A symbol exported by the plugin that b comes from. Plugins are loaded RTLD_LOCAL, so only
 * their own handle finds it. NULL when b is built in or the symbol is missing. */
void *nic_ep_plugin_symbol(struct nic_backend *b, const char *name);

#endif
