/* Fixed-size nodes carved from mmap'd blocks, for tables that free() itself updates: they may
 * not call malloc, and must never write into a block the NIC may still be reading. The caller
 * serialises access (each table has its own lock); nodes are recycled, never unmapped. */
#ifndef NIC_POOL_H
#define NIC_POOL_H

#include <stddef.h>

struct nic_pool {
  size_t node_size; /* set before first use; at least sizeof(void *) */
  void *free_list;
};

/* NULL when no memory could be mapped. */
void *nic_pool_get(struct nic_pool *p);
void nic_pool_put(struct nic_pool *p, void *node);

#endif
