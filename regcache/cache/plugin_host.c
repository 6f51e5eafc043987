/* The host's side of plugin_host.h: the table backend.c hands to a plugin's open call. */
#include "plugin_host.h"

#include "api_errors.h"
#include "chunks.h"
#include "log.h"
#include "plugin_env.h"
#include "settings.h"
#include "thread.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

static void host_vlog(enum nic_plugin_log_level level, const void *once, const char *fmt,
                      va_list ap) {
  /* The key is the plugin's static: unique per kind for as long as the plugin is loaded. */
  if (once && !nic_first_time_key((uintptr_t)&host_vlog, (uintptr_t)once, 0)) return;
  nic_log_v(level == NIC_PLUGIN_LOG_ERROR  ? NIC_LOG_ERROR
            : level == NIC_PLUGIN_LOG_WARN ? NIC_LOG_WARN
                                           : NIC_LOG_INFO,
            fmt, ap);
}

/* A plugin's API may be called from inside the program's dataplane scope (nic_dpdk_chain,
 * nic_dpdk_endpoint): its own state is still nicmalloc's bookkeeping, not dataplane memory. */
static void *host_calloc(size_t n, size_t size) {
  NIC_INTERNAL_SCOPE();
  return calloc(n, size);
}

static void host_free(void *p) {
  NIC_INTERNAL_SCOPE();
  free(p);
}

static void host_api_error(enum nic_plugin_api_family family) {
  switch (family) {
  case NIC_PLUGIN_API_REGISTRATION:
    nic_api_count(registration);
    break;
  case NIC_PLUGIN_API_ENDPOINT:
    nic_api_count(endpoint);
    break;
  default:
    nic_api_count(other);
    break;
  }
}

static uint64_t completion_errors;

static void host_completion_error(void) {
  __atomic_add_fetch(&completion_errors, 1, __ATOMIC_RELAXED);
}

uint64_t nic_plugin_completion_errors(void) {
  return __atomic_load_n(&completion_errors, __ATOMIC_RELAXED);
}

static uint64_t rx_dropped;

static void host_rx_dropped(void) {
  __atomic_add_fetch(&rx_dropped, 1, __ATOMIC_RELAXED);
}

uint64_t nic_plugin_rx_dropped(void) {
  return __atomic_load_n(&rx_dropped, __ATOMIC_RELAXED);
}

static bool host_verbs_async_events(void) {
  return nic_setting_bool(NIC_S_VERBS_ASYNC_EVENTS);
}

static void host_quiet_env(void) {
  nic_plugin_env_guard();
}

static int host_dataplane_range(const void *p, size_t len, void **base, size_t *span) {
  const size_t reserved = nic_dp_reserved_span();
  const uintptr_t lo = nic_dp.base, a = (uintptr_t)p;
  if (!reserved || a - lo >= reserved || len > reserved - (a - lo)) return -ENOENT;
  *base = (void *)lo;
  *span = reserved;
  return 0;
}

static const struct nic_plugin_host host = {.size = sizeof host,
                                            .vlog = host_vlog,
                                            .calloc = host_calloc,
                                            .free = host_free,
                                            .api_error = host_api_error,
                                            .quiet_env = host_quiet_env,
                                            .dataplane_range = host_dataplane_range,
                                            .completion_error = host_completion_error,
                                            .verbs_async_events = host_verbs_async_events,
                                            .rx_dropped = host_rx_dropped};

const struct nic_plugin_host *nic_plugin_host_table(void) {
  return &host;
}
