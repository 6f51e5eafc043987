/* Request memory and request queues. Requests come from a pool of mmap'd blocks
 * (alloc/base/pool.h), never from malloc: the backend runs inside the allocator and may be called
 * from a free() that invalidates a registration. Blocks are kept until the backend closes. */
#define _GNU_SOURCE
#include "uring_internal.h"

struct uring_req *nic_uring_req_alloc_locked(struct uring_backend *ub) {
  return nic_pool_get(&ub->reqs);
}

void nic_uring_req_free_locked(struct uring_backend *ub, struct uring_req *req) {
  nic_pool_put(&ub->reqs, req);
}

void nic_uring_requests_fini(struct uring_backend *ub) {
  nic_pool_release(&ub->reqs);
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
