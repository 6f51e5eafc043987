/* See plugin_env.h. */
#define _GNU_SOURCE
#include "plugin_env.h"

#include "imports.h"
#include "settings.h"

#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

static char *plugin_getenv(const char *name) {
  if (name && !strcmp(name, "RUNTIME_DIRECTORY"))
    return geteuid() == 0 ? (char *)"/var/run" : (char *)"/dev/null";
  return NULL;
}

const struct link_map *nic_plugin_env_mark(void) {
  struct link_map *m = NULL;
  void *self = dlopen(NULL, RTLD_NOW | RTLD_NOLOAD);
  if (!self || dlinfo(self, RTLD_DI_LINKMAP, &m) != 0) m = NULL;
  while (m && m->l_next)
    m = m->l_next;
  return m;
}

static const struct link_map *first_mark; /* the objects loaded before the first plugin */

unsigned nic_plugin_env_guard(const struct link_map *mark) {
  if (!mark || !nic_secure_execution()) return 0;
  const struct link_map *none = NULL;
  __atomic_compare_exchange_n(&first_mark, &none, mark, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  unsigned changed = 0;
  for (const struct link_map *m = mark->l_next; m; m = m->l_next) {
    struct nic_import imports[] = {{"getenv", (void *)plugin_getenv, false}};
    if (nic_imports_redirect(m, imports, 1) && imports[0].done) changed++;
  }
  return changed;
}

unsigned nic_plugin_env_guard_again(void) {
  return nic_plugin_env_guard(__atomic_load_n(&first_mark, __ATOMIC_ACQUIRE));
}
