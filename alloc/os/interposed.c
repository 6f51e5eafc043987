/* Whether nicmalloc is the program's malloc. Loaded with dlopen (a Python extension or a plugin
 * linked with it), or after another allocator, it is not: the symbol table keeps binding malloc,
 * free and operator new where it bound them, and only the nic_ calls reach nicmalloc. Said once
 * at load, so that a nic_malloc block given to free() later, which the other allocator aborts on,
 * is not a mystery; nic_free is the way out (nicmalloc.h). What nicmalloc needs to see of
 * mimalloc is pointed at it (mimalloc_imports.h); what it cannot see of the program's memory it
 * does not register (interposed.h). */
#define _GNU_SOURCE
#include "interposed.h"

#include "log.h"
#include "mimalloc_imports.h"

#include <dlfcn.h>
#include <stdbool.h>

/* Whether name is bound to a definition in the object that holds this code: libnicmalloc.so,
 * or a program built with the runtime's objects in it. */
static bool bound_here(const char *name, const void **bound, Dl_info *owner) {
  Dl_info here;
  *bound = dlsym(RTLD_DEFAULT, name);
  return *bound && dladdr((const void *)nic_interposed_check, &here) && dladdr(*bound, owner) &&
         owner->dli_fbase == here.dli_fbase;
}

static bool interposed = true;

bool nic_malloc_interposed(void) {
  return __atomic_load_n(&interposed, __ATOMIC_RELAXED);
}

void nic_interposed_check(void) {
  const void *bound_malloc, *bound_free;
  Dl_info malloc_owner = {0}, free_owner = {0};
  const bool malloc_here = bound_here("malloc", &bound_malloc, &malloc_owner);
  if (malloc_here && bound_here("free", &bound_free, &free_owner)) return;
  __atomic_store_n(&interposed, false, __ATOMIC_RELAXED);
  const char *owner = malloc_here ? free_owner.dli_fname : malloc_owner.dli_fname;
  nic_log_warn("the program's %s is not nicmalloc's but %s's (nicmalloc was loaded with dlopen, "
               "or after that allocator): malloc, free, operator new, NICMALLOC_DP_MIN_SIZE and "
               "the dataplane scope do not reach nicmalloc here, and its blocks (nic_malloc and "
               "the other nic_ calls) must be freed with nic_free; preload it (LD_PRELOAD) or "
               "link the program with it to make it the malloc",
               malloc_here ? "free" : "malloc", owner ? owner : "an unknown object");
  nic_mimalloc_imports_redirect();
}
