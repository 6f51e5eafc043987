/* The memory events' publishers: each walks the watcher table (events.h). */
#include "events.h"

#include <errno.h>

uint64_t nic_free_watch;
uint64_t nic_left_watch;

NIC_REGISTRY_DECLARE(struct nic_memory_watcher, nic_watchers);
#define EACH_WATCHER(w) NIC_REGISTRY_EACH(struct nic_memory_watcher, nic_watchers, w)

bool nic_publish_block_freeing(void *p) {
  EACH_WATCHER(w) {
    if (w->block_freeing && w->observes_only) w->block_freeing(p);
  }
  EACH_WATCHER(w) {
    if (w->block_freeing && !w->observes_only && w->block_freeing(p)) return true;
  }
  return false;
}

enum nic_resize_answer nic_publish_block_resizing(void *p, size_t usable) {
  enum nic_resize_answer answer = NIC_RESIZE_AS_USUAL;
  EACH_WATCHER(w) {
    if (!w->block_resizing) continue;
    const enum nic_resize_answer a = w->block_resizing(p, usable);
    if (a == NIC_RESIZE_REFUSE) return a;
    if (a == NIC_RESIZE_MOVE) answer = a;
  }
  return answer;
}

void nic_publish_range_stale(uintptr_t start, size_t len) {
  EACH_WATCHER(w) {
    if (w->range_stale) w->range_stale(start, len);
  }
}

void nic_publish_pages_leaving(uintptr_t start, size_t len) {
  EACH_WATCHER(w) {
    if (w->pages_leaving) w->pages_leaving(start, len);
  }
}

void nic_publish_pages_left_watched(uintptr_t start, size_t len) {
  const int saved = errno; /* the system call's, for its caller */
  EACH_WATCHER(w) {
    if (w->pages_left) w->pages_left(start, len);
  }
  errno = saved;
}

bool nic_publish_protection_changing(uintptr_t start, size_t len, int prot, int *rc) {
  EACH_WATCHER(w) {
    if (w->protection_changing && w->protection_changing(start, len, prot, rc)) return true;
  }
  return false;
}

void nic_publish_chunk_mapped(unsigned index, void *base, size_t len) {
  EACH_WATCHER(w) {
    if (w->chunk_mapped) w->chunk_mapped(index, base, len);
  }
}

/* One watcher's no keeps the chunk; those that already let go map it again on reuse
 * (chunk_mapped), as they would any chunk. */
bool nic_publish_chunk_releasing(unsigned index, void *base, size_t len) {
  EACH_WATCHER(w) {
    if (w->chunk_releasing && !w->chunk_releasing(index, base, len)) return false;
  }
  return true;
}

bool nic_publish_step_releasing(unsigned index, unsigned step, void *base, size_t len) {
  EACH_WATCHER(w) {
    if (w->step_releasing && !w->step_releasing(index, step, base, len)) return false;
  }
  return true;
}

void nic_publish_nic_thread(bool starting) {
  EACH_WATCHER(w) {
    if (w->nic_thread) w->nic_thread(starting);
  }
}

void nic_publish_tick(void) {
  EACH_WATCHER(w) {
    if (w->tick) w->tick();
  }
}
