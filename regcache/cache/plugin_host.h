/* What libnicmalloc lends a backend plugin (libnicmalloc-verbs.so, libnicmalloc-dpdk.so) when it
 * opens one: its logger, its control memory and its API-error counts. A plugin links none of
 * libnicmalloc's (hidden) functions, and must not carry copies of them: a copy would write to
 * fd 2 after the program reused it for a file (log_target.c guards the host's lines only), and
 * put the plugin's bookkeeping wherever malloc routes the caller's blocks (a dataplane scope).
 * Its settings are not read through this table: they come typed, before the open call
 * (nic_backend_<name>_settings, backend.h), so a plugin never reads the environment.
 *
 * The table is versioned by its size: members are only ever added at the end, and a plugin
 * reads a member only when `size` covers it (NIC_PLUGIN_HOST_HAS). */
#ifndef NIC_PLUGIN_HOST_H
#define NIC_PLUGIN_HOST_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct nic_backend;

enum nic_plugin_log_level {
  NIC_PLUGIN_LOG_INFO = 0, /* said only with NICMALLOC_VERBOSE=1 */
  NIC_PLUGIN_LOG_WARN = 1,
  NIC_PLUGIN_LOG_ERROR = 2,
};

/* The families of struct nic_stats' API-error counts. */
enum nic_plugin_api_family {
  NIC_PLUGIN_API_REGISTRATION = 0,
  NIC_PLUGIN_API_ENDPOINT = 1,
  NIC_PLUGIN_API_OTHER = 2,
};

struct nic_plugin_host {
  size_t size; /* sizeof (struct nic_plugin_host) as the host was built */
  /* One line "nicmalloc: [level: ]..." where the host's own lines go, or nowhere (counted) when
   * the program reused fd 2. With a non-NULL `once`, only the first line for that key is said
   * (the address of a static in the plugin: one key per kind). */
  void (*vlog)(enum nic_plugin_log_level level, const void *once, const char *fmt, va_list ap);
  /* Control memory (never dataplane chunks, whatever scope the caller is in), zeroed. */
  void *(*calloc)(size_t n, size_t size);
  void (*free)(void *p);
  /* Counts an error the plugin's API returned to its caller (nic_get_stats). */
  void (*api_error)(enum nic_plugin_api_family family);
  /* In secure execution, makes the libraries loaded since the plugin read no environment
   * (plugin_env.h): call it after a library loads more (rdma-core's providers in
   * ibv_get_device_list, EAL's drivers) and before it runs them. */
  void (*quiet_env)(void);
  /* When [p, p + len) lies inside the dataplane range, 0 and that whole range: address space
   * libnicmalloc reserved for its chunks, shared with no other memory, whether or not its pages
   * are backed now (so a plugin may describe it once, as DPDK's one extmem area, where that
   * records addresses only). Else -ENOENT. */
  int (*dataplane_range)(const void *p, size_t len, void **base, size_t *span);
  /* Counts a work completion in error that the plugin reaped (nic_get_stats:
   * verbs_completion_errors). */
  void (*completion_error)(void);
  /* NICMALLOC_VERBS_ASYNC_EVENTS. Settings newer than struct nic_plugin_settings come through
   * the table, whose size says whether the host knows them: that struct has no size, and a
   * member added to it would be read from an older host's padding. */
  bool (*verbs_async_events)(void);
  /* Counts a received message the plugin dropped rather than hand over (nic_get_stats:
   * dpdk_recv_dropped). */
  void (*rx_dropped)(void);
};

#define NIC_PLUGIN_HOST_HAS(host, member)                                                          \
  ((host) && (host)->size >= offsetof(struct nic_plugin_host, member) + sizeof((host)->member) &&  \
   (host)->member)

/* The entry point backend.c looks up as nic_backend_<name>_open. NULL with errno when the
 * backend cannot run here, or EPROTO when the host's table lacks what the plugin needs. */
typedef struct nic_backend *(*nic_plugin_open_fn)(const struct nic_plugin_host *host);

/* The host's table (plugin_host.c). */
const struct nic_plugin_host *nic_plugin_host_table(void);
/* The completions in error, and the received messages dropped, plugins counted through it. */
uint64_t nic_plugin_completion_errors(void);
uint64_t nic_plugin_rx_dropped(void);

#ifdef __cplusplus
}
#endif
#endif
