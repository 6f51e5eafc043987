/* What the public endpoint constructors of the uring, dpdk and verbs backends share
 * (endpoint_uring.c, endpoint_dpdk.c, endpoint_verbs.c): the check that the backend in use is
 * theirs, with its one-line message; a list of the endpoints each made, so that destroying
 * anything else is an error rather than a crash; and reaching a plugin's own API. */
#ifndef NIC_ENDPOINT_COMMON_H
#define NIC_ENDPOINT_COMMON_H

#include "backend.h"
#include "export.h"

#include <stdbool.h>

/* The process-wide backend when it is named kind. Otherwise NULL with errno ENODEV, after one
 * line on stderr naming who, the backend in use and what to set (hint). */
struct nic_backend *nic_ep_backend(const char *who, const char *kind, const char *hint);

/* Remembers ep as made by kind's constructor (once per call: an endpoint handed out twice is
 * listed twice). false when there is no memory for it. */
bool nic_ep_track(struct nic_endpoint *ep, const char *kind);

/* Destroys (the backend's endpoint_destroy) an endpoint kind's constructor made, and forgets it
 * when that returns 0. An endpoint it did not make: -EINVAL and one line on stderr naming who. */
int nic_ep_untrack(struct nic_endpoint *ep, const char *kind, const char *who);

/* A symbol exported by the plugin that b comes from. Plugins are loaded RTLD_LOCAL, so only
 * their own handle finds it. NULL when b is built in or the symbol is missing. */
void *nic_ep_plugin_symbol(struct nic_backend *b, const char *name);

#endif
