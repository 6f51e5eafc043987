/* Request memory and request queues. Requests come from mmap'd slabs, never from malloc: the
 * backend runs inside the allocator and may be called from a free() that invalidates a
 * registration. Slabs are kept until the backend closes. */
#define _GNU_SOURCE
#include "uring_internal.h"

#include <sys/mman.h>

#define SLAB_REQS 64

struct slab {
  struct slab *next;
  struct uring_req reqs[SLAB_REQS];
};

struct uring_req *nic_uring_req_alloc_locked(struct uring_backend *ub) {
  if (!ub->free_reqs) {
    struct slab *s =
        mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) return NULL;
    s->next = ub->slabs;
    ub->slabs = s;
    for (unsigned i = 0; i < SLAB_REQS; i++)
      nic_uring_req_free_locked(ub, &s->reqs[i]);
  }
  struct uring_req *req = ub->free_reqs;
  ub->free_reqs = req->next;
  return req;
}

void nic_uring_req_free_locked(struct uring_backend *ub, struct uring_req *req) {
  req->next = ub->free_reqs;
  ub->free_reqs = req;
}

void nic_uring_requests_fini(struct uring_backend *ub) {
  for (struct slab *s = ub->slabs, *next; s; s = next) {
    next = s->next;
    munmap(s, sizeof *s);
  }
  ub->slabs = NULL;
  ub->free_reqs = NULL;
}

void nic_uring_push(struct uring_queue *q, struct uring_req *req) {
  req->next = NULL;
  if (q->tail)
    q->tail->next = req;
  else
    q->head = req;
  q->tail = req;
}

struct uring_req *nic_uring_pop(struct uring_queue *q) {
  struct uring_req *req = q->head;
  if (req && !(q->head = req->next)) q->tail = NULL;
  return req;
}

/* A resumed post goes back before every later post of its endpoint. */
void nic_uring_requeue(struct uring_queue *q, struct uring_req *req) {
  struct uring_req **at = &q->head;
  while (*at && (*at)->seq < req->seq)
    at = &(*at)->next;
  req->next = *at;
  *at = req;
  if (!req->next) q->tail = req;
}
