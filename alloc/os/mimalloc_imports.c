/* See mimalloc_imports.h. The commit map (commit_map.h) and the dataplane slices (chunks.h)
 * learn what mimalloc commits and decommits only through the calls it makes; preloaded or
 * linked into the program, nicmalloc defines them for every object, mimalloc included. Loaded
 * later, the C library's definitions come first in the symbol table, so mimalloc's own entries
 * are pointed at nicmalloc's: every block freed then looked freed twice, and the dataplane's
 * commits would not back or pin their steps. Nobody else's calls change. */
#define _GNU_SOURCE
#include "mimalloc_imports.h"

#include "log.h"

#include <dlfcn.h>
#include <mimalloc.h>
#include <string.h>

bool nic_mimalloc_imports_redirect(void) {
  Dl_info where;
  struct link_map *map = NULL;
  if (!dladdr1((const void *)mi_version, &where, (void **)&map, RTLD_DL_LINKMAP) || !map) {
    nic_log_warn("libmimalloc's own calls could not be found (dladdr1); its commits go unseen");
    return false;
  }
  struct nic_import calls[NIC_OWN_CALLS];
  nic_interpose_own_calls(calls);
  const bool read = nic_imports_redirect(map, calls, NIC_OWN_CALLS);
  for (unsigned k = 0; k < NIC_OWN_CALLS; k++)
    if (!read || !calls[k].done) {
      nic_log_warn("%s does not import %s as expected; its commits go unseen", where.dli_fname,
                   calls[k].name);
      return false;
    }
  return true;
}

static bool madvise_apart, mprotect_apart;

bool nic_mimalloc_madvise_apart(void) {
  return __atomic_load_n(&madvise_apart, __ATOMIC_ACQUIRE);
}

bool nic_mimalloc_mprotect_apart(void) {
  return __atomic_load_n(&mprotect_apart, __ATOMIC_ACQUIRE);
}

/* One of interpose.c's definitions for libmimalloc's import of name; false when it imports no
 * such call. */
static bool own_call(struct link_map *map, const char *name) {
  struct nic_import calls[NIC_OWN_CALLS];
  nic_interpose_own_calls(calls);
  struct nic_import *own = calls;
  while (strcmp(own->name, name))
    own++;
  return nic_imports_redirect(map, own, 1) && own->done;
}

bool nic_mimalloc_own_madvise(void) {
  Dl_info where;
  struct link_map *map = NULL;
  if (!dladdr1((const void *)mi_version, &where, (void **)&map, RTLD_DL_LINKMAP) || !map)
    return false;
  static const struct {
    const char *name;
    bool *apart;
  } calls[] = {{"madvise", &madvise_apart}, {"mprotect", &mprotect_apart}};
  bool all = true;
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
    if (own_call(map, calls[i].name)) {
      __atomic_store_n(calls[i].apart, true, __ATOMIC_RELEASE);
      continue;
    }
    all = false;
    nic_log_info("%s does not import %s; a program's %s of dataplane memory is taken for "
                 "mimalloc's",
                 where.dli_fname, calls[i].name, calls[i].name);
  }
  return all;
}
