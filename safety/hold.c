/* nic_hold / nic_release: a deserializer keeps pointers into a received buffer alive past the
 * receive call (Zerializer-style RX arenas). A hold is a reference on the 4 KiB page holding p
 * (the high half of its page count): every free of a block touching that page, the received
 * buffer's included, is deferred until the page is clear, so the buffer is neither reused nor
 * unpinned while held. The exact pointer is recorded too, so that nic_release of a pointer that
 * was never held is an error rather than a silent underflow. */
#include "api_errors.h"
#include "chunks.h"
#include "export.h"
#include "forklock.h"
#include "log.h"
#include "mapped.h"
#include "nicmalloc.h"
#include "pagecount.h"
#include "pool.h"
#include "receive.h"
#include "safety.h"

#include <errno.h>
#include <mimalloc.h>
#include <pthread.h>

#define BUCKETS 256

struct hold {
  struct hold *next;
  const void *p;
  uint64_t count;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
NIC_FORKLOCK_MUTEX(holds, NIC_FORK_HOLDS, &lock, NULL);
static struct hold *buckets[BUCKETS];
static struct nic_pool pool = NIC_POOL_INIT(sizeof(struct hold));

static struct hold **find_locked(const void *p) {
  struct hold **link = &buckets[((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ull >> 56];
  while (*link && (*link)->p != p)
    link = &(*link)->next;
  return link;
}

/* The dataplane range is reserved whole, but only mapped chunks hold blocks. */
static bool ours(const void *p) {
  if (nic_in_dp(p)) return nic_chunk_readable(nic_chunk_index(p));
  return mi_is_in_heap_region(p) ||
         (__atomic_load_n(&nic_mapped_blocks, __ATOMIC_RELAXED) && nic_mapped_contains(p));
}

NIC_EXPORT int nic_hold(const void *p) {
  if (!p || !ours(p)) {
    nic_api_error(hold, "nic_hold(%p): not nicmalloc memory; a hold would protect nothing", p);
    return -EINVAL;
  }
  uintptr_t a = (uintptr_t)p;
  /* A hold on a freed block would keep nothing alive, and the program would read memory
   * handed out again. */
  if (nic_safety_was_freed(p)) {
    nic_api_error(hold, "nic_hold(%p): no live block starts here (freed, or never handed out)", p);
    return -NIC_EFREED;
  }
  /* The page's reference, the table and the statistic change under the lock, which is held
   * across fork: a child's hold references are those its table holds, each one nic_release
   * can let go (one taken outside it, with the fork between it and the table, kept the page's
   * frees deferred in the child for good). */
  pthread_mutex_lock(&lock);
  struct hold **link = find_locked(p);
  if (!*link) {
    struct hold *h = nic_pool_get(&pool);
    if (!h) {
      pthread_mutex_unlock(&lock);
      nic_api_error(hold, "nic_hold(%p): no memory for the hold's record; not held", p);
      return -ENOMEM;
    }
    *h = (struct hold){.p = p};
    *link = h;
  }
  if (!nic_pc_add(a, a + 1, NIC_PC_HOLD)) {
    struct hold *h = *link;
    if (!h->count) {
      *link = h->next;
      nic_pool_put(&pool, h);
    }
    pthread_mutex_unlock(&lock);
    nic_api_error(hold, "nic_hold(%p): no memory to count the hold on its page; not held", p);
    return -ENOMEM;
  }
  (*link)->count++;
  NIC_SAFETY_COUNT(holds, 1);
  pthread_mutex_unlock(&lock);
  return 0;
}

NIC_EXPORT int nic_release(const void *p) {
  pthread_mutex_lock(&lock);
  struct hold **link = find_locked(p), *h = *link;
  if (!h) {
    pthread_mutex_unlock(&lock);
    nic_api_error(hold, "nic_release(%p): no nic_hold(%p) is outstanding", p, p);
    return -NIC_ENOHOLD;
  }
  if (--h->count == 0) {
    *link = h->next;
    nic_pool_put(&pool, h);
  }
  __atomic_sub_fetch(&nic_safety_ctr.holds, 1, __ATOMIC_RELAXED);
  nic_pc_sub((uintptr_t)p, (uintptr_t)p + 1, NIC_PC_HOLD);
  pthread_mutex_unlock(&lock);
  nic_safety_retry_deferred(); /* the buffer's free may have waited for this */
  nic_receive_retry_held();    /* or the receive buffer its NIC waits for */
  return 0;
}
