/* In secure execution the libraries a backend plugin brings must not read the user's
 * environment (regcache/cache/plugin_env.h). Their getenv imports are pointed elsewhere once
 * they are loaded, which is too late for their constructors (libnl, under rdma-core, reads NLDBG
 * and opens $NLSYSCONFDIR/classid as it loads) and for what a plugin's open loads and runs at
 * once (EAL's drivers read DPRC and DSA_DEV_PATH inside rte_eal_init). So nicmalloc defines
 * getenv, which they bind to when nicmalloc is preloaded or linked, and which answers for
 * nicmalloc while such a load and open run. Otherwise it answers as the C library's does: a scan
 * of environ, which is what glibc's getenv is; the C library's own reads (TZ, say) keep its own.
 * The environment itself is never swapped: a setenv made meanwhile would realloc the array glibc
 * last made, which may be the program's. */
#define _GNU_SOURCE
#include "interpose_env.h"

#include "export.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static const char *hidden_runtime; /* set: the window is open */

void nic_env_hide(const char *runtime_directory) {
  __atomic_store_n(&hidden_runtime, runtime_directory, __ATOMIC_RELEASE);
}

void nic_env_show(void) {
  __atomic_store_n(&hidden_runtime, NULL, __ATOMIC_RELEASE);
}

NIC_EXPORT char *getenv(const char *name) {
  const char *runtime = __atomic_load_n(&hidden_runtime, __ATOMIC_ACQUIRE);
  if (__builtin_expect(runtime != NULL, 0))
    return !strcmp(name, "RUNTIME_DIRECTORY") ? (char *)runtime : NULL;
  char **env = environ;
  if (!*name || !env) return NULL;
  const size_t len = strlen(name);
  for (; *env; env++)
    if (!strncmp(*env, name, len) && (*env)[len] == '=') return *env + len + 1;
  return NULL;
}
