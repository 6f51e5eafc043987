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
#include "valgrind.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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

/* A program built without PIE that takes malloc's address binds the name to an entry of its own
 * procedure linkage table, the one address every object must see for the function: an undefined
 * symbol with a value. dlsym answers with that entry (node does this), while calls through it
 * reach the first definition after the program. */
static bool is_program_entry(const char *name, const void *bound) {
  Dl_info info;
  const ElfW(Sym) *sym = NULL;
  return dladdr1(bound, &info, (void **)&sym, RTLD_DL_SYMENT) && sym &&
         sym->st_shndx == SHN_UNDEF && info.dli_sname && !strcmp(info.dli_sname, name);
}

__thread bool nic_probe_free_seen, nic_probe_malloc_seen;

/* Whether a call through the program's entry for free ends here: free(NULL) does nothing in any
 * allocator, and nicmalloc's notes it on the calling thread. */
static bool free_call_ends_here(const void *entry) {
  nic_probe_free_seen = false;
  ((void (*)(void *))entry)(NULL);
  return nic_probe_free_seen;
}

/* The same for malloc, asked only once free's calls are known to end here (a malloc that is not
 * nicmalloc's would give a block no known free could take): malloc(SIZE_MAX) is refused by any
 * allocator. */
static bool malloc_call_ends_here(const void *entry) {
  const int saved_errno = errno;
  nic_probe_malloc_seen = false;
  void *p = ((void *(*)(size_t))entry)(SIZE_MAX);
  errno = saved_errno;
  return !p && nic_probe_malloc_seen;
}

/* Where calls to name end, when the program's entry for it is not a definition: the first object
 * after the program (in load order: the preloaded ones, then the program's needs) defining it. */
static void find_definition(const char *name, Dl_info *owner, struct link_map **owner_map) {
  for (struct link_map *l = *owner_map ? (*owner_map)->l_next : NULL; l; l = l->l_next) {
    void *handle = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) continue;
    const void *found = dlsym(handle, name);
    Dl_info info;
    struct link_map *map = NULL;
    const bool defined_here =
        found && dladdr1(found, &info, (void **)&map, RTLD_DL_LINKMAP) && map == l;
    dlclose(handle);
    if (defined_here) {
      *owner = info;
      *owner_map = map;
      return;
    }
  }
  *owner = (Dl_info){0};
  *owner_map = NULL;
}

struct link_map *nic_object_of(const void *addr) {
  struct dl_find_object found;
  return addr && _dl_find_object((void *)addr, &found) == 0 ? found.dlfo_link_map : NULL;
}

bool nic_calls_reach_here(const char *name, void **bound) {
  *bound = dlsym(RTLD_DEFAULT, name);
  struct link_map *map = nic_object_of(*bound);
  struct link_map *const here = nic_object_of((const void *)nic_interposed_check);
  if (!*bound || map == here) return true;
  if (!is_program_entry(name, *bound)) return false;
  Dl_info owner;
  find_definition(name, &owner, &map);
  return map == here;
}

static bool interposed = true;
static struct nic_program_alloc program_alloc; /* filled before interposed turns false */

bool nic_malloc_interposed(void) {
  return __atomic_load_n(&interposed, __ATOMIC_RELAXED);
}

const struct nic_program_alloc *nic_program_alloc(void) {
  return __atomic_load_n(&interposed, __ATOMIC_ACQUIRE) ? NULL : &program_alloc;
}

/* The definition calls to name reach, unless it is nicmalloc's own (loaded with RTLD_GLOBAL into
 * a process whose earlier objects lack it). */
static void *program_function(const char *name) {
  const void *f;
  Dl_info owner;
  struct link_map *map;
  return bound_here(name, &f, &owner, &map) ? NULL : (void *)f;
}

void nic_interposed_check(void) {
  const void *bound_malloc = NULL, *bound_free = NULL;
  Dl_info malloc_owner = {0}, free_owner = {0};
  struct link_map *malloc_map = NULL, *free_map = NULL;
  const bool free_here =
      bound_here("free", &bound_free, &free_owner, &free_map) ||
      (bound_free && is_program_entry("free", bound_free) && free_call_ends_here(bound_free));
  const bool malloc_bound_here = bound_here("malloc", &bound_malloc, &malloc_owner, &malloc_map);
  if (free_here &&
      (malloc_bound_here || (bound_malloc && is_program_entry("malloc", bound_malloc) &&
                             malloc_call_ends_here(bound_malloc))))
    return;
  program_alloc.malloc = (void *(*)(size_t))program_function("malloc");
  program_alloc.calloc = (void *(*)(size_t, size_t))program_function("calloc");
  program_alloc.realloc = (void *(*)(void *, size_t))program_function("realloc");
  program_alloc.posix_memalign =
      (int (*)(void **, size_t, size_t))program_function("posix_memalign");
  __atomic_store_n(&interposed, false, __ATOMIC_RELEASE);
  nic_mimalloc_imports_redirect();
  /* malloc, unless it alone is nicmalloc's */
  const bool about_malloc = free_here || !malloc_bound_here;
  const char *name = about_malloc ? "malloc" : "free";
  const void *bound = about_malloc ? bound_malloc : bound_free;
  Dl_info *owner = about_malloc ? &malloc_owner : &free_owner;
  struct link_map **map = about_malloc ? &malloc_map : &free_map;
  if (bound && is_program_entry(name, bound)) find_definition(name, owner, map);
  /* The entry's first definition is this object's, and still the calls end elsewhere: Valgrind
   * replaced the code of libnicmalloc's malloc family, which its own warning says at start-up
   * (valgrind.c); naming libnicmalloc as the other allocator would only confuse. */
  if (*map && *map == nic_object_of((const void *)nic_interposed_check) && nic_under_valgrind())
    return;
#define WHAT                                                                                       \
  "malloc, free, operator new, NICMALLOC_DP_MIN_SIZE, NICMALLOC_PROFILE, NICMALLOC_SITES and the " \
  "dataplane scope do not reach nicmalloc here (code compiled with the LLVM pass allocates with "  \
  "the program's malloc), and its blocks (nic_malloc and the other nic_ calls) must be freed "     \
  "with nic_free"
  const char *what = WHAT;
  /* The main program's link map has an empty name. A program with an allocator of its own
   * (rustc's jemalloc) has it whatever is preloaded: said where a setting asks for what cannot
   * be, else only when verbose, as a preloaded wrapper of a whole build would meet many. */
  if (*map && (*map)->l_name && !(*map)->l_name[0]) {
    const struct nic_config *cfg = nic_config();
    const bool asked = cfg->dp_min_size || cfg->sites_path || cfg->profile_path;
    (asked ? nic_log_warn : nic_log_info)("the program defines its own %s (%s): %s", name,
                                          owner->dli_fname ? owner->dli_fname : "?", what);
    return;
  }
  /* Longer than a log line's buffer with a long path: the head formatted, the rest written as
   * it is, so that the advice at its end is not cut off. */
  char head[PATH_MAX + 128];
  snprintf(head, sizeof head,
           "the program's %s is not nicmalloc's but %s's (nicmalloc was loaded with dlopen, or "
           "after that allocator): ",
           name, owner->dli_fname ? owner->dli_fname : "an unknown object");
  nic_log_warn_text(head, WHAT "; preload it (LD_PRELOAD) or link the program with it to make it "
                               "the malloc");
#undef WHAT
}
