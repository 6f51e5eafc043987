/* A plugin's view of the host table (plugin_host.h): the only logger and allocator
 * libnicmalloc-verbs.so and libnicmalloc-dpdk.so use. Compiled into each plugin, hidden. Until
 * the plugin's open call attaches the host nothing is said and no memory is given: there is
 * nowhere safe to write to. */
#ifndef NIC_PLUGIN_SERVICES_H
#define NIC_PLUGIN_SERVICES_H

#include "plugin_host.h"

#include <stdbool.h>
#include <stddef.h>

/* Keeps host for every later call. false, with errno EPROTO, when the host's table lacks a
 * member the plugin needs (a libnicmalloc older than the plugin). */
bool nic_plugin_attach(const struct nic_plugin_host *host);

void nic_plugin_log(enum nic_plugin_log_level level, const void *once, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define nic_plugin_info(...) nic_plugin_log(NIC_PLUGIN_LOG_INFO, NULL, __VA_ARGS__)
#define nic_plugin_warn(...) nic_plugin_log(NIC_PLUGIN_LOG_WARN, NULL, __VA_ARGS__)
/* An error the plugin's API returns to its caller: counted every time, said once per site. */
#define nic_plugin_api_error(family, ...)                                                          \
  do {                                                                                             \
    static const char nic_kind_;                                                                   \
    nic_plugin_count_api_error(family);                                                            \
    nic_plugin_log(NIC_PLUGIN_LOG_ERROR, &nic_kind_, __VA_ARGS__);                                 \
  } while (0)
void nic_plugin_count_api_error(enum nic_plugin_api_family family);
/* A work completion in error the plugin reaped, counted by the host (nothing with an older one). */
void nic_plugin_count_completion_error(void);
/* A received message the plugin dropped, counted by the host (nothing with an older one). */
void nic_plugin_count_rx_dropped(void);

/* Asks the host to keep the libraries loaded since the plugin out of the environment in secure
 * execution (plugin_host.h, quiet_env); nothing with an older host. */
void nic_plugin_quiet_env(void);

/* NICMALLOC_VERBS_ASYNC_EVENTS as the host reads it; false with an older host. */
bool nic_plugin_verbs_async_events(void);

/* The host's dataplane_range (plugin_host.h); -ENOENT with an older host. */
int nic_plugin_dataplane_range(const void *p, size_t len, void **base, size_t *span);

/* Zeroed control memory of the host; NULL with errno ENOMEM. */
void *nic_plugin_calloc(size_t n, size_t size);
void nic_plugin_free(void *p);

#endif
