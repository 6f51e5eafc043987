/* Whether nicmalloc is the program's malloc. Loaded with dlopen (a Python extension or a plugin
 * linked with it), or after another allocator, it is not: the symbol table keeps binding malloc,
 * free and operator new where it bound them, and only the nic_ calls reach nicmalloc. Said once
 * at load, so that a nic_malloc block given to free() later, which the other allocator aborts on,
 * is not a mystery; nic_free is the way out (nicmalloc.h). What nicmalloc needs to see of
 * mimalloc is pointed at it (mimalloc_imports.h); what it cannot see of the program's memory it
 * does not register (interposed.h). */
#define _GNU_SOURCE
#include "interposed.h"

#include "config.h"
#include "log.h"
#include "mimalloc_imports.h"

#include <dlfcn.h>
#include <link.h>
#include <stdbool.h>

/* Whether name is bound to a definition in the object that holds this code: libnicmalloc.so,
 * or a program built with the runtime's objects in it. *owner is the object it is bound to. */
static bool bound_here(const char *name, const void **bound, Dl_info *owner,
                       struct link_map **owner_map) {
  Dl_info here;
  *bound = dlsym(RTLD_DEFAULT, name);
  return *bound && dladdr((const void *)nic_interposed_check, &here) &&
         dladdr1(*bound, owner, (void **)owner_map, RTLD_DL_LINKMAP) &&
         owner->dli_fbase == here.dli_fbase;
}

static bool interposed = true;

bool nic_malloc_interposed(void) {
  return __atomic_load_n(&interposed, __ATOMIC_RELAXED);
}

void nic_interposed_check(void) {
  const void *bound_malloc, *bound_free;
  Dl_info malloc_owner = {0}, free_owner = {0};
  struct link_map *malloc_map = NULL, *free_map = NULL;
  const bool malloc_here = bound_here("malloc", &bound_malloc, &malloc_owner, &malloc_map);
  if (malloc_here && bound_here("free", &bound_free, &free_owner, &free_map)) return;
  __atomic_store_n(&interposed, false, __ATOMIC_RELAXED);
  nic_mimalloc_imports_redirect();
  const char *name = malloc_here ? "free" : "malloc";
  const Dl_info *owner = malloc_here ? &free_owner : &malloc_owner;
  const struct link_map *map = malloc_here ? free_map : malloc_map;
  const char *what = "malloc, free, operator new, NICMALLOC_DP_MIN_SIZE, NICMALLOC_PROFILE, "
                     "NICMALLOC_SITES and the dataplane scope do not reach nicmalloc here, and "
                     "its blocks (nic_malloc and the other nic_ calls) must be freed with nic_free";
  /* The main program's link map has an empty name. A program with an allocator of its own
   * (rustc's jemalloc) has it whatever is preloaded: said where a setting asks for what cannot
   * be, else only when verbose, as a preloaded wrapper of a whole build would meet many. */
  if (map && map->l_name && !map->l_name[0]) {
    const struct nic_config *cfg = nic_config();
    const bool asked = cfg->dp_min_size || cfg->sites_path || cfg->profile_path;
    (asked ? nic_log_warn : nic_log_info)("the program defines its own %s (%s): %s", name,
                                          owner->dli_fname ? owner->dli_fname : "?", what);
    return;
  }
  nic_log_warn("the program's %s is not nicmalloc's but %s's (nicmalloc was loaded with dlopen, "
               "or after that allocator): %s; preload it (LD_PRELOAD) or link the program with "
               "it to make it the malloc",
               name, owner->dli_fname ? owner->dli_fname : "an unknown object", what);
}
