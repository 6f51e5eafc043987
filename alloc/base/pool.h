/* Fixed-size nodes carved from mmap'd blocks, for the runtime's tables and queues that free()
 * itself, or a backend called from it, updates: they may not call malloc, which could also hand
 * them a block the NIC is still reading. Nodes are recycled, never unmapped while the pool lives;
 * nic_pool_release unmaps every block when the owner closes.
 *
 * Access is serialised by the owner's lock, or by the pool's own when made with
 * NIC_POOL_LOCKED (then the owner registers &pool.lock with the fork-lock registry,
 * alloc/base/forklock.h). An owner that must not map under its lock takes nodes with
 * nic_pool_try_get and grows the pool with nic_pool_map_block / nic_pool_add_block. */
#ifndef NIC_POOL_H
#define NIC_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

struct nic_pool {
  size_t node_size;   /* set before first use; rounded up to 16 bytes, at least a pointer */
  size_t block_bytes; /* 0: 64 KiB; a block always holds at least one node */
  bool locked;
  pthread_mutex_t lock; /* with locked */
  void *free_list;
  void *blocks; /* every block, linked through its header */
};
#define NIC_POOL_INIT(node_size_)                                                                  \
  { .node_size = (node_size_) }
#define NIC_POOL_LOCKED(node_size_)                                                                \
  { .node_size = (node_size_), .locked = true, .lock = PTHREAD_MUTEX_INITIALIZER }

/* A node (its contents are left over: the caller initialises it); NULL when the pool is empty
 * and no memory could be mapped. */
void *nic_pool_get(struct nic_pool *p);
void nic_pool_put(struct nic_pool *p, void *node);
/* A node, or NULL when the pool is empty (nothing is mapped). */
void *nic_pool_try_get(struct nic_pool *p);
/* A block for p, mapped without touching p (no lock needed); NULL when the kernel refused. */
void *nic_pool_map_block(const struct nic_pool *p);
/* Carves block (from nic_pool_map_block) into nodes of p. */
void nic_pool_add_block(struct nic_pool *p, void *block);
/* Unmaps every block: only when no node is in use, by the program or a device. The pool can be
 * used again afterwards. */
void nic_pool_release(struct nic_pool *p);

#endif
