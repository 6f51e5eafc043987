/* Explicit dataplane allocation and the per-thread dataplane scope. */
#include "alloc_inline.h"
#include "export.h"
#include "late_decommit.h"
#include "mi_decommit.h"
#include "nicmalloc.h"
#include "nocancel.h"
#include "reaper.h"
#include "sub_pages.h"

#include <errno.h>

NIC_EXPORT void *nic_malloc(size_t size) {
  return nic_dp_alloc_fast(size, false, true);
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

NIC_EXPORT void nic_free(void *p) {
  nic_free_inline(p, "nic_free");
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

NIC_EXPORT void nic_collect(void) {
  NIC_CANCEL_OFF_SCOPE(); /* the pass and the asks take nicmalloc's locks */
  struct nic_thread *t = &nic_self;
  /* What this pass starts waiting for (the release delay) the thread goes on with: in a fork
   * child it may not run yet. */
  if (nic_chunk_slots_used()) nic_reaper_start();
  if (nic_thread_ready()) {
    nic_dp_refresh(t);
    unsigned slots = nic_chunk_slots_used();
    for (unsigned i = 0; i < slots; i++)
      if (t->heaps[i] &&
          __atomic_load_n(&nic_chunk_at(i)->state, __ATOMIC_ACQUIRE) == NIC_CHUNK_LIVE) {
        nic_heap_collect_visiting(t->heaps[i], true);
        /* What mimalloc frees it decommits only when it next comes to that segment. */
        nic_mi_decommit_owned(i);
        /* Free blocks on pages that stay in use: their whole 4 KiB pages. */
        nic_sub_pages_drop_owned(i, NULL);
      }
  }
  nic_huge_cache_purge(0);
  nic_reaper_pass();
  nic_late_decommit_run(true); /* now, as the huge-block cache's purge */
}

NIC_EXPORT int nic_is_dataplane(const void *p) {
  return nic_in_dp(p);
}
