/* libunwind by dlopen: see unwind.h. The soname is fixed, never taken from the environment,
 * so that a set-user-ID program cannot be made to load a library of the caller's choosing. */
#define _GNU_SOURCE
#include "unwind.h"

#include "log.h"

#include <dlfcn.h>
#include <pthread.h>

#define NIC_UNWIND_SONAME "libunwind.so.8"

/* The exported names behind libunwind's macros (UNW_OBJ and friends name them per
 * architecture), spelled by the header itself. */
#define NIC_STR_(x) #x
#define NIC_STR(x) NIC_STR_(x)

static struct nic_unwind table;
static const struct nic_unwind *loaded;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
  void *handle = dlopen(NIC_UNWIND_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    nic_log_warn("cannot load " NIC_UNWIND_SONAME " (%s): profiles, NICMALLOC_SITES and detect's "
                 "reports go on without allocation sites",
                 dlerror());
    return;
  }
  struct nic_unwind t;
  *(void **)&t.backtrace = dlsym(handle, "unw_backtrace");
  *(void **)&t.getcontext = dlsym(handle, NIC_STR(unw_tdep_getcontext));
  *(void **)&t.init_local = dlsym(handle, NIC_STR(unw_init_local));
  *(void **)&t.set_reg = dlsym(handle, NIC_STR(unw_set_reg));
  *(void **)&t.get_proc_name = dlsym(handle, NIC_STR(unw_get_proc_name));
  if (!t.backtrace || !t.getcontext || !t.init_local || !t.set_reg || !t.get_proc_name) {
    nic_log_warn(NIC_UNWIND_SONAME " lacks an entry point this build uses: allocation sites are "
                                   "not recorded");
    dlclose(handle);
    return;
  }
  if (!nic_unwind_redirect_imports(handle)) {
    /* Not dlclose'd: a partly redirected library stays as it is, unused. */
    nic_log_warn(NIC_UNWIND_SONAME
                 " does not test addresses as this build expects (with pipe2, "
                 "read and syscall); it is not used, so that it keeps no pipe on the program's "
                 "descriptors: allocation sites are not recorded");
    return;
  }
  table = t;
  __atomic_store_n(&loaded, &table, __ATOMIC_RELEASE);
}

bool nic_unwind_load(void) {
  pthread_once(&once, load);
  return nic_unwind_get() != NULL;
}

const struct nic_unwind *nic_unwind_get(void) {
  return __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);
}
