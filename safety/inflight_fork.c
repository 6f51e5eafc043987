/* What a child of fork sees of the parent's posts: nothing. The child has no completion coming
 * (the backend, its queues and its threads are the parent's: regcache/cache/backend.h), so the
 * parent's in-flight references are void there. Without this a child's free of a block the
 * parent had posted was deferred for good, a write fence on it waited for its timeout, and a
 * free the parent had deferred was never done. Holds stay: nic_hold is the program's own
 * reference, which the child may still nic_release. Write protection is lifted by
 * fence_protect.c's hook, which runs before this one (forklock.h). */
#include "forklock.h"
#include "pagecount.h"
#include "safety.h"

static void after_fork_child(void) {
  nic_pc_void_dma();
  __atomic_store_n(&nic_safety_ctr.inflight_posts, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&nic_safety_ctr.inflight_entries, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&nic_safety_ctr.fence_writers_held, 0, __ATOMIC_RELAXED); /* threads gone */
  /* The parent's deferred frees whose pages only the void posts kept: done now, in the child
   * (the parent does its own when its completions come). */
  nic_safety_retry_deferred();
}
NIC_FORK_CHILD(inflight, NIC_FORK_INFLIGHT, after_fork_child);
