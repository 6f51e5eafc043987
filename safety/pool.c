#include "pool.h"

#include <sys/mman.h>

#define BLOCK_BYTES ((size_t)64 << 10)

void *nic_pool_get(struct nic_pool *p) {
  if (!p->free_list) {
    char *block =
        mmap(NULL, BLOCK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED) return NULL;
    for (size_t off = 0; off + p->node_size <= BLOCK_BYTES; off += p->node_size)
      nic_pool_put(p, block + off);
  }
  void *node = p->free_list;
  p->free_list = *(void **)node;
  return node;
}

void nic_pool_put(struct nic_pool *p, void *node) {
  *(void **)node = p->free_list;
  p->free_list = node;
}
