/* mimalloc commits inside a dataplane chunk arena (which is not committed as a whole) with
 * mprotect, and decommits and resets with madvise, all through the interposed calls
 * (interpose.c). The dataplane range belongs to the heap layer above: it hands its commit
 * function down here, and the interposed calls route the range's commits to it and keep the
 * range's pages where they are (only the heap gives dataplane memory back, and never while it
 * is pinned and registered). */
#ifndef NIC_DP_COMMIT_H
#define NIC_DP_COMMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nic_dp_commit {
  uintptr_t base; /* 0 until the heap reserved the range */
  size_t span;
  /* Backs [addr, addr + len) (a part of the range) with memory. Returns 0 or -errno. */
  int (*commit)(void *addr, size_t len);
  /* mimalloc decommitted [addr, addr + len): it commits again before it touches a byte. */
  void (*decommit)(void *addr, size_t len);
};
extern struct nic_dp_commit nic_dp_commit __attribute__((visibility("hidden")));

/* Set once, by the heap, when its range is reserved (commit before base, with release). */
void nic_dp_commit_set(uintptr_t base, size_t span, int (*commit)(void *addr, size_t len),
                       void (*decommit)(void *addr, size_t len));

static inline bool nic_dp_commit_covers(const void *addr) {
  const uintptr_t base = __atomic_load_n(&nic_dp_commit.base, __ATOMIC_ACQUIRE);
  return base && (uintptr_t)addr - base < nic_dp_commit.span;
}

#endif
