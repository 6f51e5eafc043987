/* Choosing and opening the process-wide backend (NICMALLOC_BACKEND). verbs and dpdk live in
 * plugins loaded only when chosen, so that preloading the allocator never drags rdma-core or
 * DPDK (and their constructors) into every program. */
#define _GNU_SOURCE
#include "backend.h"
#include "forklock.h"

#include "log.h"
#include "plugin_host.h"
#include "settings.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nic_backend *(*open_fn)(void);

/* Built-in backends register themselves (NIC_BACKEND_BUILTIN); one left out of the build (no
 * liburing, say) is then simply not available. */
NIC_REGISTRY_DECLARE(struct nic_backend_builtin, nic_backends);

static struct nic_backend *open_builtin(const char *name) {
  NIC_REGISTRY_EACH(struct nic_backend_builtin, nic_backends, e) {
    if (!strcmp(e->name, name)) return e->open();
  }
  errno = ENOSYS;
  return NULL;
}

static struct nic_backend *active;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Plugins sit next to libnicmalloc.so; dladdr finds where that is. */
static struct nic_backend *open_plugin(const char *name) {
  char path[4096];
  Dl_info self;
  const char *dir_end = NULL;
  if (dladdr((void *)&open_plugin, &self) && self.dli_fname) dir_end = strrchr(self.dli_fname, '/');
  size_t dir_len = dir_end ? (size_t)(dir_end - self.dli_fname) + 1 : 0;
  if (dir_len + strlen(name) + 40 > sizeof path) return NULL;
  memcpy(path, self.dli_fname, dir_len);
  snprintf(path + dir_len, sizeof path - dir_len, "libnicmalloc-%s.so", name);
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) handle = dlopen(path + dir_len, RTLD_NOW | RTLD_LOCAL); /* library path */
  if (!handle) {
    nic_log_info("backend %s: cannot load %s: %s", name, path, dlerror());
    errno = ENOENT;
    return NULL;
  }
  char symbol[64];
  snprintf(symbol, sizeof symbol, "nic_backend_%s_settings", name);
  void (*take)(const struct nic_plugin_settings *) =
      (void (*)(const struct nic_plugin_settings *))dlsym(handle, symbol);
  if (take) {
    struct nic_plugin_settings s = {.verbs_device = nic_setting_text(NIC_S_VERBS_DEVICE),
                                    .verbs_odp = nic_setting_bool(NIC_S_VERBS_ODP),
                                    .dpdk_vdev = nic_setting_text(NIC_S_DPDK_VDEV),
                                    .dpdk_eal_args = nic_setting_text(NIC_S_DPDK_EAL_ARGS)};
    take(&s);
  }
  snprintf(symbol, sizeof symbol, "nic_backend_%s_open", name);
  nic_plugin_open_fn fn = (nic_plugin_open_fn)dlsym(handle, symbol);
  if (!fn) errno = ENOSYS;
  return fn ? fn(nic_plugin_host_table()) : NULL;
}

static struct nic_backend *open_named(const char *name) {
  if (!strcmp(name, "sim") || !strcmp(name, "uring")) return open_builtin(name);
  if (!strcmp(name, "verbs") || !strcmp(name, "dpdk")) return open_plugin(name);
  errno = EINVAL;
  return NULL;
}

static void choose(void) {
  /* A name the table does not list was refused there, with a warning: auto. */
  static const char *named[] = {NULL, "sim", "uring", "verbs", "dpdk"}; /* auto|sim|... */
  const char *want = named[nic_setting_choice(NIC_S_BACKEND)];
  if (want) {
    active = open_named(want);
    if (active) return;
    nic_log_warn("backend %s cannot run here (%s); choosing automatically", want, strerror(errno));
  }
  static const char *order[] = {"verbs", "uring", "sim"};
  for (size_t i = 0; i < sizeof order / sizeof order[0] && !active; i++) {
    active = open_named(order[i]);
    if (!active) nic_log_info("backend %s not available: %s", order[i], strerror(errno));
  }
  if (!active) nic_log_warn("no registration backend could be opened");
}

static bool parents; /* this process is a child of fork and the backend is the parent's */

struct nic_backend *nic_backend_active(void) {
  pthread_once(&once, choose);
  return parents ? NULL : active;
}

struct nic_backend *nic_backend_if_open(void) {
  return parents ? NULL : __atomic_load_n(&active, __ATOMIC_ACQUIRE);
}

static void after_fork_child(void) {
  if (__atomic_load_n(&active, __ATOMIC_ACQUIRE)) parents = true;
}
NIC_FORK_CHILD(backend, NIC_FORK_BACKEND, after_fork_child);

const char *nic_backend_missing_why(void) {
  return parents ? "the backend belongs to the parent process: a child of fork neither posts nor "
                   "polls"
                 : NULL;
}
