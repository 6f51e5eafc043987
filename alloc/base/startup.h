/* Process start-up: once, on the first allocation (which may come long before any constructor,
 * from the dynamic loader or another library's constructor), each layer's start-up steps run
 * in the order of their ranks below. A step registers itself next to its code
 * (NIC_STARTUP_STEP), so the malloc path starts everything without knowing who is above it.
 *
 * ORDER (rank: owner: why there):
 *   FREE_KEY      heap/free_key.c      before anything here allocates or frees
 *   LOG           base/log_target.c    whether a copy of stderr is kept depends on the settings,
 *                                      and their warnings go to fd 2 as it is at start-up
 *   MIMALLOC_OPTIONS os/mimalloc_options.c  in secure execution mimalloc's own settings go back
 *                                      to their defaults, before nicmalloc sets its own
 *   FAST_PATHS    core/alloc.c         the size rule, the free check, the control heap's tuning
 *   ROUTES        routing/profile.c    profiling or routing sends (some) mallocs to the slow path
 *   FENCE_SITES   safety/fence_detect.c  detect records the sites of blocks it may report
 *   CONTROL_ARENA os/vspace.c          before mimalloc maps its first segment (vspace.h)
 *   HUGE_CACHE    heap/huge_cache.c    sized from the control arena
 *   DATAPLANE     heap/chunks.c        the dataplane reservation, made early
 *                 heap/commit_policy.c mimalloc commits on demand from then on
 *   FREE_LISTS    heap/mi_free_lists.c it allocates too
 *   DP_LIVE       heap/dp_live.c       it allocates too
 *   SITE_TABLE    routing/site_table.c NICMALLOC_SITES_OFF
 *   FORK          base/forklock.c      may allocate; the flag below sends that past us
 * Steps before CONTROL_ARENA must not allocate. */
#ifndef NIC_STARTUP_H
#define NIC_STARTUP_H

#include "registry.h"

#include <stdbool.h>

enum nic_startup_rank {
  NIC_START_FREE_KEY,
  NIC_START_LOG,
  NIC_START_MIMALLOC_OPTIONS,
  NIC_START_FAST_PATHS,
  NIC_START_ROUTES,
  NIC_START_FENCE_SITES,
  NIC_START_CONTROL_ARENA,
  NIC_START_HUGE_CACHE,
  NIC_START_DATAPLANE,
  NIC_START_FREE_LISTS,
  NIC_START_DP_LIVE,
  NIC_START_SITE_TABLE,
  NIC_START_FORK,
  NIC_START_RANKS
};

struct nic_startup_step {
  unsigned rank;
  const char *name;
  void (*run)(void);
};

#define NIC_STARTUP_STEP(id, rank_, run_)                                                          \
  static const struct nic_startup_step nic_startup_##id NIC_REGISTRY_ENTRY(nic_startup_steps) = {  \
      .rank = (rank_), .name = #id, .run = (run_)}

void nic_startup_slow(void);
bool nic_started(void);
/* Cheap after the first call. Returns with start-up done, except on the thread running it
 * (an allocation from inside a step), which gets false from nic_started. */
static inline void nic_startup(void) {
  if (__builtin_expect(!nic_started(), 0)) nic_startup_slow();
}

#endif
