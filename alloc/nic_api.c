/* Explicit dataplane allocation and the per-thread dataplane scope. */
#include "alloc_inline.h"
#include "nicmalloc.h"

#include <errno.h>

#define NIC_EXPORT __attribute__((visibility("default")))

NIC_EXPORT void *nic_malloc(size_t size) {
  return nic_alloc(size, 0, false, NIC_ROUTE_DATAPLANE);
}

NIC_EXPORT void *nic_calloc(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return nic_alloc(total, 0, true, NIC_ROUTE_DATAPLANE);
}

NIC_EXPORT void *nic_realloc(void *p, size_t size) {
  return nic_realloc_routed(p, size, NIC_ROUTE_DATAPLANE, "nic_realloc");
}

NIC_EXPORT void *nic_aligned_alloc(size_t alignment, size_t size) {
  if (!alignment || (alignment & (alignment - 1))) {
    errno = EINVAL;
    return NULL;
  }
  return nic_alloc(size, alignment, false, NIC_ROUTE_DATAPLANE);
}

NIC_EXPORT void nic_dataplane_begin(void) {
  nic_thread_ready();
  nic_self.scope_depth++;
  nic_thread_refresh_fast();
}

NIC_EXPORT void nic_dataplane_end(void) {
  if (nic_self.scope_depth > 0) nic_self.scope_depth--;
  nic_thread_refresh_fast();
}

NIC_EXPORT int nic_is_dataplane(const void *p) {
  return nic_in_dp(p);
}
