#include "pool.h"

#include "map.h"

#include <stdint.h>
#include <sys/mman.h>

#define DEFAULT_BLOCK ((size_t)64 << 10)
#define ALIGN ((size_t)16)

/* At the start of every block; ALIGN bytes, so the nodes after it stay aligned. */
struct block {
  struct block *next;
  size_t bytes;
};
_Static_assert(sizeof(struct block) == ALIGN, "block header is one alignment unit");

static size_t node_bytes(const struct nic_pool *p) {
  size_t n = p->node_size < sizeof(void *) ? sizeof(void *) : p->node_size;
  return (n + ALIGN - 1) & ~(ALIGN - 1);
}

static size_t block_bytes(const struct nic_pool *p) {
  const size_t want = p->block_bytes ? p->block_bytes : DEFAULT_BLOCK;
  const size_t least = sizeof(struct block) + node_bytes(p);
  return want < least ? least : want;
}

static void lock(struct nic_pool *p) {
  if (p->locked) pthread_mutex_lock(&p->lock);
}
static void unlock(struct nic_pool *p) {
  if (p->locked) pthread_mutex_unlock(&p->lock);
}

static void *pop_locked(struct nic_pool *p) {
  void *node = p->free_list;
  if (node) p->free_list = *(void **)node;
  return node;
}

static void add_locked(struct nic_pool *p, void *mem) {
  struct block *b = mem;
  b->bytes = block_bytes(p);
  b->next = p->blocks;
  p->blocks = b;
  const size_t node = node_bytes(p);
  /* Pushed from the end, so that nodes come out in address order. */
  char *first = (char *)mem + sizeof *b;
  for (char *n = first + (b->bytes - sizeof *b) / node * node; n > first;) {
    n -= node;
    *(void **)n = p->free_list;
    p->free_list = n;
  }
}

void *nic_pool_map_block(const struct nic_pool *p) {
  return nic_map_anon(block_bytes(p), PROT_READ | PROT_WRITE, false);
}

void nic_pool_add_block(struct nic_pool *p, void *block) {
  lock(p);
  add_locked(p, block);
  unlock(p);
}

void *nic_pool_try_get(struct nic_pool *p) {
  lock(p);
  void *node = pop_locked(p);
  unlock(p);
  return node;
}

void *nic_pool_get(struct nic_pool *p) {
  lock(p);
  void *node = pop_locked(p);
  if (!node) {
    /* Mapped under the lock: the system call takes no lock of the runtime, so the pool's lock
     * stays a leaf. */
    void *mem = nic_pool_map_block(p);
    if (mem) {
      add_locked(p, mem);
      node = pop_locked(p);
    }
  }
  unlock(p);
  return node;
}

void nic_pool_put(struct nic_pool *p, void *node) {
  lock(p);
  *(void **)node = p->free_list;
  p->free_list = node;
  unlock(p);
}

void nic_pool_release(struct nic_pool *p) {
  lock(p);
  for (struct block *b = p->blocks, *next; b; b = next) {
    next = b->next;
    nic_unmap(b, b->bytes);
  }
  p->blocks = NULL;
  p->free_list = NULL;
  unlock(p);
}
