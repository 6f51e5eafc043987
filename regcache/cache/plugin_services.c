/* The plugin side of plugin_host.h (see plugin_services.h). */
#include "plugin_services.h"

#include "backend.h"
#include "export.h"

#include <errno.h>
#include <stdarg.h>

NIC_EXPORT const unsigned nic_backend_abi = NIC_BACKEND_ABI;

static const struct nic_plugin_host *host;

static const struct nic_plugin_host *the_host(void) {
  return __atomic_load_n(&host, __ATOMIC_ACQUIRE);
}

bool nic_plugin_attach(const struct nic_plugin_host *h) {
  if (!NIC_PLUGIN_HOST_HAS(h, vlog) || !NIC_PLUGIN_HOST_HAS(h, calloc) ||
      !NIC_PLUGIN_HOST_HAS(h, free)) {
    errno = EPROTO;
    return false;
  }
  __atomic_store_n(&host, h, __ATOMIC_RELEASE);
  return true;
}

void nic_plugin_log(enum nic_plugin_log_level level, const void *once, const char *fmt, ...) {
  const struct nic_plugin_host *h = the_host();
  if (!h) return;
  va_list ap;
  va_start(ap, fmt);
  h->vlog(level, once, fmt, ap);
  va_end(ap);
}

void nic_plugin_count_api_error(enum nic_plugin_api_family family) {
  const struct nic_plugin_host *h = the_host();
  if (NIC_PLUGIN_HOST_HAS(h, api_error)) h->api_error(family);
}

void nic_plugin_count_completion_error(void) {
  const struct nic_plugin_host *h = the_host();
  if (NIC_PLUGIN_HOST_HAS(h, completion_error)) h->completion_error();
}

void nic_plugin_count_rx_dropped(void) {
  const struct nic_plugin_host *h = the_host();
  if (NIC_PLUGIN_HOST_HAS(h, rx_dropped)) h->rx_dropped();
}

void nic_plugin_quiet_env(void) {
  const struct nic_plugin_host *h = the_host();
  if (NIC_PLUGIN_HOST_HAS(h, quiet_env)) h->quiet_env();
}

int nic_plugin_dataplane_range(const void *p, size_t len, void **base, size_t *span) {
  const struct nic_plugin_host *h = the_host();
  return NIC_PLUGIN_HOST_HAS(h, dataplane_range) ? h->dataplane_range(p, len, base, span) : -ENOENT;
}

bool nic_plugin_verbs_async_events(void) {
  const struct nic_plugin_host *h = the_host();
  return NIC_PLUGIN_HOST_HAS(h, verbs_async_events) && h->verbs_async_events();
}

void *nic_plugin_calloc(size_t n, size_t size) {
  const struct nic_plugin_host *h = the_host();
  void *p = h ? h->calloc(n, size) : NULL;
  if (!p) errno = ENOMEM;
  return p;
}

void nic_plugin_free(void *p) {
  const struct nic_plugin_host *h = the_host();
  if (h && p) h->free(p);
}
