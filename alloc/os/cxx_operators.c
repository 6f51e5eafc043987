/* Whether the program replaced C++'s global operators new and delete, which nicmalloc defines
 * too. A program may replace only some of them, most often operator new(size_t) and
 * operator delete(void *); the standard then has the default definitions of the others call
 * those (new[] calls new, a nothrow new calls new and catches, a sized or array delete calls
 * delete), and nicmalloc's definitions of the others must do the same (alloc/api/cxx_new.c).
 * Looked up once, lazily: operator new runs before main, from static constructors, and before
 * nicmalloc's own constructor. */
#define _GNU_SOURCE
#include "cxx_operators.h"

#include "interposed.h"

#include <dlfcn.h>
#include <link.h>
#include <stddef.h>

static const char *const names[NIC_CXX_OPS] = {
    [NIC_CXX_NEW] = "_Znwm",
    [NIC_CXX_NEW_ARRAY] = "_Znam",
    [NIC_CXX_NEW_NOTHROW] = "_ZnwmRKSt9nothrow_t",
    [NIC_CXX_NEW_ARRAY_NOTHROW] = "_ZnamRKSt9nothrow_t",
    [NIC_CXX_DELETE] = "_ZdlPv",
    [NIC_CXX_DELETE_ARRAY] = "_ZdaPv",
    [NIC_CXX_DELETE_SIZED] = "_ZdlPvm",
    [NIC_CXX_DELETE_ARRAY_SIZED] = "_ZdaPvm",
    [NIC_CXX_DELETE_NOTHROW] = "_ZdlPvRKSt9nothrow_t",
    [NIC_CXX_DELETE_ARRAY_NOTHROW] = "_ZdaPvRKSt9nothrow_t",
    [NIC_CXX_ALIGNED + NIC_CXX_NEW] = "_ZnwmSt11align_val_t",
    [NIC_CXX_ALIGNED + NIC_CXX_NEW_ARRAY] = "_ZnamSt11align_val_t",
    [NIC_CXX_ALIGNED + NIC_CXX_NEW_NOTHROW] = "_ZnwmSt11align_val_tRKSt9nothrow_t",
    [NIC_CXX_ALIGNED + NIC_CXX_NEW_ARRAY_NOTHROW] = "_ZnamSt11align_val_tRKSt9nothrow_t",
    [NIC_CXX_ALIGNED + NIC_CXX_DELETE] = "_ZdlPvSt11align_val_t",
    [NIC_CXX_ALIGNED + NIC_CXX_DELETE_ARRAY] = "_ZdaPvSt11align_val_t",
    [NIC_CXX_ALIGNED + NIC_CXX_DELETE_SIZED] = "_ZdlPvmSt11align_val_t",
    [NIC_CXX_ALIGNED + NIC_CXX_DELETE_ARRAY_SIZED] = "_ZdaPvmSt11align_val_t",
    [NIC_CXX_ALIGNED + NIC_CXX_DELETE_NOTHROW] = "_ZdlPvSt11align_val_tRKSt9nothrow_t",
    [NIC_CXX_ALIGNED + NIC_CXX_DELETE_ARRAY_NOTHROW] = "_ZdaPvSt11align_val_tRKSt9nothrow_t",
};

/* What the default definitions call, in each family. The other forms are not looked at: no
 * default definition calls them, and a program that replaces one alone calls its own. */
static const enum nic_cxx_op called_by_defaults[] = {NIC_CXX_NEW, NIC_CXX_NEW_ARRAY, NIC_CXX_DELETE,
                                                     NIC_CXX_DELETE_ARRAY};

unsigned char nic_cxx_replaced =
    NIC_CXX_UNALIGNED_FAMILY | NIC_CXX_ALIGNED_FAMILY | NIC_CXX_NOT_LOOKED;
static void *program_ops[NIC_CXX_OPS]; /* written before nic_cxx_replaced says looked */
static __thread bool looking;

static bool family_replaced(enum nic_cxx_op first) {
  for (size_t i = 0; i < sizeof called_by_defaults / sizeof *called_by_defaults; i++) {
    void *bound;
    if (!nic_calls_reach_here(names[first + called_by_defaults[i]], &bound)) return true;
  }
  return false;
}

unsigned nic_cxx_replaced_families(void) {
  unsigned state = __atomic_load_n(&nic_cxx_replaced, __ATOMIC_ACQUIRE);
  if (!(state & NIC_CXX_NOT_LOOKED)) return state;
  /* The dynamic linker's lookups allocate, and nothing stops a program's malloc from calling
   * operator new: that call is served as if nothing were replaced. */
  if (looking) return 0;
  looking = true;
  state = 0;
  const enum nic_cxx_op firsts[] = {NIC_CXX_NEW, NIC_CXX_ALIGNED};
  for (size_t f = 0; f < 2; f++) {
    if (!family_replaced(firsts[f])) continue;
    state |= nic_cxx_family(firsts[f]);
    for (unsigned op = firsts[f]; op < firsts[f] + NIC_CXX_ALIGNED; op++)
      __atomic_store_n(&program_ops[op], dlsym(RTLD_DEFAULT, names[op]), __ATOMIC_RELAXED);
  }
  /* Threads that looked at the same time found the same: the last store stands. */
  __atomic_store_n(&nic_cxx_replaced, (unsigned char)state, __ATOMIC_RELEASE);
  looking = false;
  return state;
}

void *nic_cxx_program_operator(enum nic_cxx_op op) {
  return nic_cxx_replaced_families() & nic_cxx_family(op)
             ? __atomic_load_n(&program_ops[op], __ATOMIC_RELAXED)
             : NULL;
}

/* std::get_new_handler, defined by the C++ runtime where one is loaded: a weak reference, as a
 * lookup by name that fails would leave an error for the program's next dlerror. */
typedef void (*new_handler_fn)(void);
extern new_handler_fn _ZSt15get_new_handlerv(void) __attribute__((weak));

static void *runtime_ops[NIC_CXX_OPS];
static bool runtime_looked; /* runtime_ops are written before it turns true */

/* The definitions of names in the object that holds get_new_handler, none of them this one's. */
static void look_up_runtime(void) {
  new_handler_fn (*get_new_handler)(void) = _ZSt15get_new_handlerv;
  struct link_map *runtime = nic_object_of(*(void **)&get_new_handler);
  if (!runtime || runtime == nic_object_of((const void *)look_up_runtime)) return;
  /* The program's own link map has an empty name; dlopen(NULL) is its handle. The object's own
   * definitions come first in its scope, its libraries' after them: each is checked. */
  void *lib = dlopen(runtime->l_name[0] ? runtime->l_name : NULL, RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) return;
  for (int op = 0; op < NIC_CXX_OPS; op++) {
    void *sym = dlsym(lib, names[op]);
    if (nic_object_of(sym) == runtime) __atomic_store_n(&runtime_ops[op], sym, __ATOMIC_RELAXED);
  }
  dlclose(lib);
}

void *nic_cxx_runtime_operator(enum nic_cxx_op op) {
  if (!__atomic_load_n(&runtime_looked, __ATOMIC_ACQUIRE)) {
    look_up_runtime();
    __atomic_store_n(&runtime_looked, true, __ATOMIC_RELEASE);
  }
  return __atomic_load_n(&runtime_ops[op], __ATOMIC_RELAXED);
}
