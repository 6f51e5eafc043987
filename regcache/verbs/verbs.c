/* verbs backend (rdma-core): one ibv_reg_mr per registration, posts as signaled sends on the
 * application's QPs, completions from their send CQs; receives into buffers of dataplane memory
 * posted on the QPs' receive queues, completions from their receive CQs (verbs_rx.h keeps the
 * buffers' books). Built as libnicmalloc-verbs.so. */
#define _GNU_SOURCE
#include "verbs.h"
#include "export.h"
#include "verbs_rx.h"

#include "plugin_services.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define VERBS_MAX_REGS 4096 /* chunks plus the registration cache's regions */
#define VERBS_MAX_SGE 64    /* stack array per post; devices offer ~30 */

/* Handed over by libnicmalloc before it opens the plugin (backend.h). */
static struct nic_plugin_settings settings;
NIC_EXPORT void nic_backend_verbs_settings(const struct nic_plugin_settings *s) {
  settings = *s;
}

struct vreg {
  struct ibv_mr *mr; /* NULL: free slot */
  int flags;         /* its IBV_ACCESS_* */
  atomic_uint inflight;
};

/* A CQ endpoints complete on, and how many more work requests may complete there. Every post is
 * signaled and every receive completes, several endpoints may share a CQ, and a completion into a
 * full CQ overruns it: the CQ and its QPs go to error and completions are lost, so posts never
 * complete. Under the backend's lock. */
struct vcq {
  struct ibv_cq *cq;
  int room;       /* cq->cqe less live sends completing there and receives reserved there */
  unsigned users; /* endpoints sending or receiving through it */
  struct vcq *next;
};

struct nic_endpoint {
  struct ibv_qp *qp;
  struct ibv_cq *cq;
  struct vcq *send_room;
  uint32_t max_sge;
  atomic_uint inflight;
  struct nic_endpoint *next;
  /* Receiving (v_endpoint_receive), under the backend's lock. */
  struct nic_verbs_rx *rx;
  struct ibv_cq *rcq;
  nic_endpoint_rx_fn rx_fn;
  void *rx_arg;
  bool rx_starting, rx_flushing;
  int64_t rx_slot;       /* the registration of the block counted in flight, or -1 */
  uint32_t rx_lkey;      /* the chunk registration's lkey (rx_slot) */
  struct ibv_mr *rx_mr;  /* the block's own MR when that registration lacks local write */
  struct vcq *recv_room; /* rcq's, with rx_reserved of its room taken while it receives */
  unsigned rx_reserved;
};

/* One post, in the table of live posts from before its ibv_post_send until its completion is
 * reaped: its wr_id names its slot there. */
struct vpost {
  nic_completion_fn done;
  void *arg;
  struct nic_endpoint *ep;
  struct vpost *next; /* on the list of finished posts poll() takes from */
  uint64_t wr_id;
  int status;
  unsigned n;
  uint32_t slots[];
};

/* A send's wr_id: this tag in the top 16 bits (no user-space pointer has them set, so the
 * application's own wr_ids, often pointers, never carry it), the slot's generation in the next
 * 16, the slot in the low 32. A completion is taken as one of nicmalloc's only when its wr_id
 * names a live post of this very CQ: nothing read through a pointer the completion carries. */
#define VERBS_WR_TAG ((uint64_t)0x9e1c << 48)
#define VERBS_WR_TAG_MASK ((uint64_t)0xffff << 48)
#define VERBS_LIVE_NONE UINT32_MAX

struct vlive {
  struct vpost *p;    /* NULL: free */
  uint32_t next_free; /* free slots are a list */
  uint16_t gen;       /* bumped as the slot is freed: a stale wr_id names no post */
};

struct vbackend {
  struct nic_backend pub;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  /* On-demand paging: the device's IBV_ODP_SUPPORT_* bits per transport (0 without general
   * support), whether later registrations use it (under reg_lock and lock), and how many MRs do. */
  uint32_t odp_rc, odp_uc;
  bool odp;
  atomic_uint odp_mrs;
  pthread_mutex_t reg_lock; /* registrations: held across ibv_reg_mr, so not taken by poll */
  /* A post's lookup and count of its registrations, against a deregistration's test of the count
   * and clear of the slot and a registration's fill of one: taken last, held for those few loads
   * and stores only, never across a device call, so that posts never wait for an ibv_reg_mr. */
  pthread_mutex_t use_lock;
  pthread_mutex_t lock; /* endpoint list, finished posts */
  struct nic_endpoint *eps;
  struct vpost *soft_head, *soft_tail; /* finished: the NIC never saw them, or reaped */
  struct vlive *live;                  /* under lock: posts the NIC may complete */
  uint32_t live_cap, live_free;
  struct vcq *cqs; /* under lock */
  /* The context's asynchronous events are nicmalloc's to read (NICMALLOC_VERBS_ASYNC_EVENTS);
   * otherwise they stay the application's, which creates its QPs on this context. */
  bool async_events;
  _Atomic int64_t async_ms;          /* when poll last read the device's asynchronous events */
  atomic_bool async_reading;         /* a poll is between poll(2) and ibv_get_async_event */
  struct nic_verbs_rx_memory rx_mem; /* where receive buffers come from (libnicmalloc's) */
  struct vreg regs[VERBS_MAX_REGS];
};

NIC_EXPORT int nic_verbs_access_flags(unsigned access, bool odp) {
  if (access &
      ~(unsigned)(NIC_ACCESS_LOCAL_WRITE | NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE))
    return -EINVAL;
  int flags = 0; /* local read is implicit in verbs */
  if (access & NIC_ACCESS_LOCAL_WRITE) flags |= IBV_ACCESS_LOCAL_WRITE;
  if (access & NIC_ACCESS_REMOTE_READ) flags |= IBV_ACCESS_REMOTE_READ;
  if (access & NIC_ACCESS_REMOTE_WRITE) flags |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (odp) flags |= IBV_ACCESS_ON_DEMAND;
  return flags;
}

NIC_EXPORT uint32_t nic_verbs_exposed_rkey(unsigned access, uint32_t mr_rkey) {
  return access & (NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE) ? mr_rkey : 0;
}

NIC_EXPORT int nic_verbs_wc_errno(int status) {
  static const int map[][2] = {{IBV_WC_SUCCESS, 0},
                               {IBV_WC_LOC_PROT_ERR, -EFAULT},
                               {IBV_WC_WR_FLUSH_ERR, -ECANCELED},
                               {IBV_WC_RETRY_EXC_ERR, -ETIMEDOUT},
                               {IBV_WC_RNR_RETRY_EXC_ERR, -ETIMEDOUT},
                               {IBV_WC_REM_ACCESS_ERR, -EACCES},
                               {IBV_WC_LOC_LEN_ERR, -EMSGSIZE},
                               /* a bare send's NAK: longer than the peer's receive */
                               {IBV_WC_REM_INV_REQ_ERR, -EMSGSIZE}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (map[i][0] == status) return map[i][1];
  return -EIO;
}

static struct vbackend *vb_of(struct nic_backend *b) {
  return (struct vbackend *)b;
}

/* Whether a registration for access may page on demand: the device must offer it on RC for
 * everything the NIC may do there, sends from it, receives into it (receive buffers are carved
 * from registrations with local write) and a peer's reads and writes; else it is pinned. */
static bool odp_for_locked(const struct vbackend *vb, unsigned access) {
  uint32_t need = IBV_ODP_SUPPORT_SEND;
  if (access & NIC_ACCESS_LOCAL_WRITE) need |= IBV_ODP_SUPPORT_RECV;
  if (access & NIC_ACCESS_REMOTE_READ) need |= IBV_ODP_SUPPORT_READ;
  if (access & NIC_ACCESS_REMOTE_WRITE) need |= IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_RECV;
  return vb->odp && (vb->odp_rc & need) == need;
}

/* UC sends and receives need ODP of UC's own, which mlx5 never offers. */
static bool uc_serves_odp(const struct vbackend *vb) {
  const uint32_t need = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
  return (vb->odp_uc & need) == need;
}

static int vreg(struct nic_backend *b, void *base, size_t len, unsigned access,
                struct nic_registration *out) {
  struct vbackend *vb = vb_of(b);
  if (!base || !len || !out) return -EINVAL;
  pthread_mutex_lock(&vb->reg_lock);
  int flags = nic_verbs_access_flags(access, odp_for_locked(vb, access)), rc = -ENOSPC;
  for (uint32_t i = 0; flags >= 0 && i < b->caps.max_regions; i++) {
    if (vb->regs[i].mr) continue;
    struct ibv_mr *mr = ibv_reg_mr(vb->pd, base, len, flags);
    if (!mr) {
      rc = errno ? -errno : -EIO;
      break;
    }
    pthread_mutex_lock(&vb->use_lock);
    vb->regs[i].mr = mr;
    vb->regs[i].flags = flags;
    pthread_mutex_unlock(&vb->use_lock);
    if (flags & IBV_ACCESS_ON_DEMAND) atomic_fetch_add(&vb->odp_mrs, 1);
    *out = (struct nic_registration){.base = base,
                                     .len = len,
                                     .access = access,
                                     .lkey = mr->lkey,
                                     .rkey = nic_verbs_exposed_rkey(access, mr->rkey),
                                     .handle = i};
    rc = 0;
    break;
  }
  pthread_mutex_unlock(&vb->reg_lock);
  return flags < 0 ? flags : rc;
}

static int vdereg(struct nic_backend *b, struct nic_registration *reg) {
  struct vbackend *vb = vb_of(b);
  if (!reg || reg->handle >= b->caps.max_regions) return -EINVAL;
  struct vreg *r = &vb->regs[reg->handle];
  pthread_mutex_lock(&vb->reg_lock);
  pthread_mutex_lock(&vb->use_lock);
  struct ibv_mr *mr = r->mr;
  int rc = !mr || mr->lkey != reg->lkey ? -EINVAL : atomic_load(&r->inflight) ? -EBUSY : 0;
  if (!rc) r->mr = NULL; /* from here no post finds it */
  pthread_mutex_unlock(&vb->use_lock);
  if (!rc && (rc = -ibv_dereg_mr(mr))) {
    pthread_mutex_lock(&vb->use_lock);
    r->mr = mr; /* still registered */
    pthread_mutex_unlock(&vb->use_lock);
  } else if (!rc && (r->flags & IBV_ACCESS_ON_DEMAND)) {
    atomic_fetch_sub(&vb->odp_mrs, 1);
  }
  pthread_mutex_unlock(&vb->reg_lock);
  return rc;
}

/* The registration an entry names, if it covers the entry; under use_lock. The NIC would check
 * the lkey too; checking here as well lets us count in-flight posts per registration for dereg. */
static int find_reg_locked(struct vbackend *vb, const struct nic_sge *s) {
  if (s->handle >= vb->pub.caps.max_regions) return -1;
  struct ibv_mr *mr = vb->regs[s->handle].mr;
  if (!mr || mr->lkey != s->lkey) return -1;
  uintptr_t a = (uintptr_t)s->addr, lo = (uintptr_t)mr->addr;
  return a >= lo && a - lo <= mr->length && s->len <= mr->length - (a - lo) ? (int)s->handle : -1;
}

/* Makes room for one more live post: the table doubles, allocated outside the lock. */
static int live_grow(struct vbackend *vb) {
  pthread_mutex_lock(&vb->lock);
  const uint32_t cap = vb->live_cap;
  const bool full = vb->live_free == VERBS_LIVE_NONE;
  pthread_mutex_unlock(&vb->lock);
  if (!full) return 0;
  const uint32_t ncap = cap ? cap * 2 : 256;
  struct vlive *n = ncap > cap ? nic_plugin_calloc(ncap, sizeof *n) : NULL;
  struct vlive *old = n; /* freed below: the table replaced, or n when another thread grew it */
  if (!n) return -ENOMEM;
  pthread_mutex_lock(&vb->lock);
  if (vb->live_cap == cap) { /* nobody grew it meanwhile */
    if (cap) memcpy(n, vb->live, cap * sizeof *n);
    for (uint32_t i = cap; i < ncap; i++)
      n[i].next_free = i + 1 < ncap ? i + 1 : vb->live_free;
    old = vb->live;
    vb->live = n;
    vb->live_cap = ncap;
    vb->live_free = cap;
  }
  pthread_mutex_unlock(&vb->lock);
  nic_plugin_free(old);
  return 0;
}

/* p into the table, counted against its CQ's room: 1; 0 when the table is full; -EAGAIN when
 * the CQ has no room for its completion. */
static int live_add_locked(struct vbackend *vb, struct vpost *p) {
  const uint32_t i = vb->live_free;
  if (p->ep->send_room->room <= 0) return -EAGAIN;
  if (i == VERBS_LIVE_NONE) return 0;
  struct vlive *l = &vb->live[i];
  vb->live_free = l->next_free;
  l->p = p;
  p->wr_id = VERBS_WR_TAG | (uint64_t)l->gen << 32 | i;
  p->ep->send_room->room--;
  return 1;
}

/* The live post wr_id names, taken off the table, if it was posted to an endpoint completing on
 * cq; else NULL (a work request that is not nicmalloc's). */
static struct vpost *live_take_locked(struct vbackend *vb, uint64_t wr_id,
                                      const struct ibv_cq *cq) {
  const uint32_t i = (uint32_t)wr_id;
  if ((wr_id & VERBS_WR_TAG_MASK) != VERBS_WR_TAG || i >= vb->live_cap) return NULL;
  struct vlive *l = &vb->live[i];
  struct vpost *p = l->p;
  if (!p || p->wr_id != wr_id || (cq && p->ep->cq != cq)) return NULL;
  l->p = NULL;
  l->gen++;
  l->next_free = vb->live_free;
  vb->live_free = i;
  p->ep->send_room->room++;
  return p;
}

/* cq's books, one more user; spare (allocated outside the lock) becomes them for a CQ not yet
 * known, and is then taken (*spare = NULL). */
static struct vcq *vcq_use_locked(struct vbackend *vb, struct ibv_cq *cq, struct vcq **spare) {
  struct vcq *v = vb->cqs;
  while (v && v->cq != cq)
    v = v->next;
  if (!v) {
    v = *spare;
    *spare = NULL;
    *v = (struct vcq){.cq = cq, .room = cq->cqe, .next = vb->cqs};
    vb->cqs = v;
  }
  v->users++;
  return v;
}

/* One user fewer; the books, when that was the last, for the caller to free after the lock. */
static struct vcq *vcq_leave_locked(struct vbackend *vb, struct vcq *v) {
  if (!v || --v->users) return NULL;
  for (struct vcq **pp = &vb->cqs; *pp; pp = &(*pp)->next)
    if (*pp == v) {
      *pp = v->next;
      break;
    }
  return v;
}

/* Gives back what vpost took for p: its registrations' in-flight counts, the endpoint's, and p
 * itself. */
static void unpost(struct vbackend *vb, struct vpost *p) {
  for (unsigned i = 0; i < p->n; i++)
    atomic_fetch_sub(&vb->regs[p->slots[i]].inflight, 1);
  atomic_fetch_sub(&p->ep->inflight, 1);
  nic_plugin_free(p);
}

static void finish(struct vbackend *vb, struct vpost *p, int status) {
  const nic_completion_fn done = p->done;
  void *const arg = p->arg;
  unpost(vb, p);
  done(arg, status);
}

/* The queue of finished posts poll() takes from: software completions, and work completions
 * reaped from the CQs. */
static void queue_done_locked(struct vbackend *vb, struct vpost *p, int status) {
  p->status = status;
  p->next = NULL;
  if (vb->soft_tail)
    vb->soft_tail->next = p;
  else
    vb->soft_head = p;
  vb->soft_tail = p;
}

static void soft_complete(struct vbackend *vb, struct vpost *p, int status) {
  pthread_mutex_lock(&vb->lock);
  queue_done_locked(vb, p, status);
  pthread_mutex_unlock(&vb->lock);
}

/* No room, in the send queue or in its CQ for one more completion: -EAGAIN, nothing posted and
 * no done(). The caller posts it again after a poll, so the endpoint's sends go in post order
 * and none leaves a hole in the stream for later ones to follow. Other failures after
 * validation (an uncovered entry: -EFAULT) complete through poll like a NIC error would. */
static int vpost(struct nic_backend *b, struct nic_endpoint *ep, const struct nic_sge *sge,
                 unsigned n, nic_completion_fn done, void *arg) {
  struct vbackend *vb = vb_of(b);
  if (!ep || !done || !sge || !n) return -EINVAL;
  if (n > b->caps.max_sge || n > ep->max_sge) return -E2BIG; /* the QP's max_send_sge */
  uint64_t bytes = 0;
  for (unsigned i = 0; i < n; i++) {
    if (!sge[i].addr || !sge[i].len) return -EINVAL;
    bytes += sge[i].len;
  }
  /* A longer send completes IBV_WC_LOC_LEN_ERR and takes the QP to the error state. */
  if (b->caps.max_message && bytes > b->caps.max_message) return -EMSGSIZE;
  struct vpost *p = nic_plugin_calloc(1, sizeof *p + n * sizeof p->slots[0]);
  if (!p) return -ENOMEM;
  *p = (struct vpost){.done = done, .arg = arg, .ep = ep};
  atomic_fetch_add(&ep->inflight, 1);
  struct ibv_sge list[VERBS_MAX_SGE];
  int status = 0;
  pthread_mutex_lock(&vb->use_lock); /* a deregistration finds every one counted, or none */
  for (unsigned i = 0; i < n && !status; i++) {
    int slot = find_reg_locked(vb, &sge[i]);
    if (slot < 0) {
      status = -EFAULT;
      break;
    }
    atomic_fetch_add(&vb->regs[slot].inflight, 1);
    p->slots[p->n++] = (uint32_t)slot;
    list[i] =
        (struct ibv_sge){.addr = (uintptr_t)sge[i].addr, .length = sge[i].len, .lkey = sge[i].lkey};
  }
  pthread_mutex_unlock(&vb->use_lock);
  while (!status) {
    pthread_mutex_lock(&vb->lock);
    const int added = live_add_locked(vb, p);
    pthread_mutex_unlock(&vb->lock);
    if (added > 0) break;
    status = added < 0 ? added : live_grow(vb); /* -EAGAIN: the send CQ is full */
  }
  if (!status) {
    struct ibv_send_wr wr = {.wr_id = p->wr_id,
                             .sg_list = list,
                             .num_sge = (int)n,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED};
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(ep->qp, &wr, &bad);
    if (!rc) return 0;
    status = rc == ENOMEM ? -EAGAIN : -rc; /* ENOMEM: send queue full */
    pthread_mutex_lock(&vb->lock);
    live_take_locked(vb, p->wr_id, NULL);
    pthread_mutex_unlock(&vb->lock);
  }
  if (status == -EAGAIN) { /* the NIC never saw it */
    unpost(vb, p);
    return -EAGAIN;
  }
  soft_complete(vb, p, status);
  return 0;
}

static int poll_recv(struct vbackend *vb, int max, int *reaped);

/* A work completion in error, counted (verbs_completion_errors) and said once per status. */
static void completion_error(const struct ibv_wc *wc) {
  static const char once[32];
  nic_plugin_count_completion_error();
  nic_plugin_log(NIC_PLUGIN_LOG_WARN, &once[(unsigned)wc->status < 32 ? wc->status : 31],
                 "verbs: a work completion in error on queue pair %u: status %d (%s); counted in "
                 "verbs_completion_errors, each status said once",
                 wc->qp_num, (int)wc->status, strerror(-nic_verbs_wc_errno(wc->status)));
}

/* A completion from a send CQ onto the queue of finished posts. One that names no live post of
 * that CQ is the application's own work request (a signaled RDMA read or write on the QP, say,
 * against verbs.h): counted and dropped, never followed as a pointer. */
static void reaped_send_locked(struct vbackend *vb, const struct ibv_cq *cq,
                               const struct ibv_wc *wc) {
  if (wc->status != IBV_WC_SUCCESS) completion_error(wc);
  struct vpost *p = live_take_locked(vb, wc->wr_id, cq);
  if (p) {
    queue_done_locked(vb, p, nic_verbs_wc_errno(wc->status));
    return;
  }
  nic_plugin_api_error(NIC_PLUGIN_API_ENDPOINT,
                       "verbs: a completion on the send CQ of an endpoint names no post of "
                       "nicmalloc's (wr_id %#llx, opcode %d: the application's own work request?); "
                       "the CQ must carry only nicmalloc's sends. Dropped",
                       (unsigned long long)wc->wr_id, (int)wc->opcode);
}

/* Finished posts are taken one at a time, work completions reaped onto the same queue first:
 * a done() that writes its own buffer may have to wait for another finished post on the same
 * page to let go of it (the fences wait on its page references), and only a post still on the
 * queue can be completed by the poll that wait makes, or by the fence's poller thread. */
/* What an asynchronous event means for nicmalloc's posts, said once per kind. */
static void tell_event(const struct ibv_async_event *ev) {
  static const char cq_err, qp_err, dev_err;
  switch (ev->event_type) {
  case IBV_EVENT_CQ_ERR:
    nic_plugin_log(NIC_PLUGIN_LOG_ERROR, &cq_err,
                   "verbs: CQ %p is in error (IBV_EVENT_CQ_ERR: overrun, or the NIC failed it); "
                   "the posts and receives completing there may never complete",
                   (void *)ev->element.cq);
    break;
  case IBV_EVENT_QP_FATAL:
  case IBV_EVENT_QP_REQ_ERR:
  case IBV_EVENT_QP_ACCESS_ERR:
    nic_plugin_log(NIC_PLUGIN_LOG_ERROR, &qp_err,
                   "verbs: queue pair %u is in the error state (%s); its posts and receives end "
                   "flushed",
                   ev->element.qp ? ev->element.qp->qp_num : 0,
                   ev->event_type == IBV_EVENT_QP_FATAL     ? "IBV_EVENT_QP_FATAL"
                   : ev->event_type == IBV_EVENT_QP_REQ_ERR ? "IBV_EVENT_QP_REQ_ERR"
                                                            : "IBV_EVENT_QP_ACCESS_ERR");
    break;
  case IBV_EVENT_DEVICE_FATAL:
    nic_plugin_log(NIC_PLUGIN_LOG_ERROR, &dev_err,
                   "verbs: the device failed (IBV_EVENT_DEVICE_FATAL); no post will complete");
    break;
  default:
    break;
  }
}

/* The device's asynchronous events, when they are nicmalloc's (vb->async_events), at most once
 * per tick of the coarse clock, so that a poll makes no system call as a rule. The descriptor
 * keeps the flags it has: poll(2) says whether an event waits, and one thread at a time reads,
 * so that no ibv_get_async_event waits for one another took. */
static void read_events(struct vbackend *vb) {
  if (!vb->async_events) return;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  const int64_t ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
  int64_t last = atomic_load_explicit(&vb->async_ms, memory_order_relaxed);
  if (ms == last || !atomic_compare_exchange_strong(&vb->async_ms, &last, ms)) return;
  if (atomic_exchange(&vb->async_reading, true)) return;
  struct pollfd pfd = {.fd = vb->ctx->async_fd, .events = POLLIN};
  struct ibv_async_event ev;
  while (poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN) && !ibv_get_async_event(vb->ctx, &ev)) {
    tell_event(&ev);
    ibv_ack_async_event(&ev);
  }
  atomic_store(&vb->async_reading, false);
}

static int vpoll(struct nic_backend *b, int max) {
  struct vbackend *vb = vb_of(b);
  int ran = 0;
  read_events(vb);
  const bool receives = max != NIC_POLL_COMPLETIONS_ONLY;
  if (max <= 0) max = 1 << 30;
  while (ran < max) {
    pthread_mutex_lock(&vb->lock);
    if (!vb->soft_head) { /* software completions first: they are already decided */
      /* Reaped under the lock (endpoints may close meanwhile), no more than this poll runs. */
      struct ibv_wc wc[32];
      const int limit = 32 < max - ran ? 32 : max - ran;
      int got = 0;
      for (struct nic_endpoint *ep = vb->eps; ep && got < limit; ep = ep->next) {
        const int k = ibv_poll_cq(ep->cq, limit - got, wc + got);
        for (int i = got; i < got + (k > 0 ? k : 0); i++)
          reaped_send_locked(vb, ep->cq, &wc[i]);
        got += k > 0 ? k : 0;
      }
    }
    struct vpost *p = vb->soft_head;
    if (p && !(vb->soft_head = p->next)) vb->soft_tail = NULL;
    pthread_mutex_unlock(&vb->lock);
    if (!p) break;
    finish(vb, p, p->status);
    ran++;
  }
  while (receives && ran < max) {
    int reaped = 0;
    const int calls = poll_recv(vb, max - ran, &reaped);
    ran += calls;
    if (!calls && !reaped) break;
  }
  return ran;
}

/* ---- Receiving ---- */

static bool ep_listed_locked(struct vbackend *vb, const struct nic_endpoint *ep) {
  for (const struct nic_endpoint *e = vb->eps; e; e = e->next)
    if (e == ep) return true;
  return false;
}

static int post_recv(struct nic_endpoint *ep, unsigned i) {
  struct nic_verbs_rx *r = ep->rx;
  struct ibv_sge sge = {.addr = (uintptr_t)nic_verbs_rx_addr(r, i),
                        .length = (uint32_t)r->buf_bytes,
                        .lkey = ep->rx_mr ? ep->rx_mr->lkey : ep->rx_lkey};
  struct ibv_recv_wr wr = {.wr_id = (uintptr_t)&r->bufs[i], .sg_list = &sge, .num_sge = 1};
  struct ibv_recv_wr *bad = NULL;
  return ibv_post_recv(ep->qp, &wr, &bad);
}

/* The block's registration: its chunk's, counted in flight so that it stays, when that one lets
 * the NIC write; else an MR of its own with local write (never remote access). */
static int rx_register(struct vbackend *vb, struct nic_endpoint *ep, void *block, size_t len,
                       uint32_t lkey, uint64_t handle) {
  int rc = 0;
  pthread_mutex_lock(&vb->reg_lock);
  struct vreg *r = handle < vb->pub.caps.max_regions ? &vb->regs[handle] : NULL;
  if (r && r->mr && r->mr->lkey == lkey && (r->flags & IBV_ACCESS_LOCAL_WRITE) &&
      (uintptr_t)block >= (uintptr_t)r->mr->addr &&
      (uintptr_t)block + len <= (uintptr_t)r->mr->addr + r->mr->length) {
    atomic_fetch_add(&r->inflight, 1);
    ep->rx_slot = (int64_t)handle;
    ep->rx_lkey = lkey;
  } else if (!(ep->rx_mr =
                   ibv_reg_mr(vb->pd, block, len,
                              IBV_ACCESS_LOCAL_WRITE |
                                  (vb->pub.caps.pages_follow ? IBV_ACCESS_ON_DEMAND : 0)))) {
    rc = errno ? -errno : -EIO;
  }
  pthread_mutex_unlock(&vb->reg_lock);
  return rc;
}

static void rx_unregister(struct vbackend *vb, struct nic_endpoint *ep) {
  if (ep->rx_slot >= 0) atomic_fetch_sub(&vb->regs[ep->rx_slot].inflight, 1);
  if (ep->rx_mr) ibv_dereg_mr(ep->rx_mr);
  ep->rx_slot = -1;
  ep->rx_mr = NULL;
}

/* What the QP offers, read under the lock (a send CQ is any endpoint's). */
static struct nic_verbs_rx_qp rx_qp_locked(struct vbackend *vb, struct nic_endpoint *ep,
                                           const struct ibv_qp_attr *attr,
                                           const struct ibv_qp_init_attr *init) {
  struct nic_verbs_rx_qp q = {.qp_type = ep->qp->qp_type,
                              .state = attr->qp_state,
                              .srq = ep->qp->srq || init->srq,
                              .recv_cq = ep->qp->recv_cq != NULL,
                              .max_recv_wr = attr->cap.max_recv_wr,
                              .max_recv_sge = attr->cap.max_recv_sge};
  for (const struct nic_endpoint *e = vb->eps; e; e = e->next)
    q.recv_cq_is_send |= e->cq == ep->qp->recv_cq;
  return q;
}

/* The receive CQ's room that ep's receives took, given back; its books, when ep was their last
 * user, for the caller to free after the lock. */
static struct vcq *rx_room_back_locked(struct vbackend *vb, struct nic_endpoint *ep) {
  struct vcq *v = ep->recv_room;
  if (!v) return NULL;
  v->room += (int)ep->rx_reserved;
  ep->recv_room = NULL;
  ep->rx_reserved = 0;
  return vcq_leave_locked(vb, v);
}

/* As many of count receives as the receive CQ has room for, taken from it: 0 when none. */
static unsigned rx_room_take_locked(struct vbackend *vb, struct nic_endpoint *ep, unsigned count,
                                    struct vcq **spare) {
  struct vcq *v = vcq_use_locked(vb, ep->qp->recv_cq, spare);
  const unsigned n = v->room <= 0 ? 0 : (unsigned)v->room < count ? (unsigned)v->room : count;
  v->room -= (int)n;
  ep->recv_room = v;
  ep->rx_reserved = n;
  return n;
}

static int v_endpoint_receive(struct nic_backend *b, struct nic_endpoint *ep, nic_endpoint_rx_fn fn,
                              void *arg) {
  struct vbackend *vb = vb_of(b);
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  const char *why = NULL;
  unsigned count = 0;
  int rc = 0;
  if (!ep || !fn) return -EINVAL;
  if (!vb->rx_mem.alloc) {
    nic_plugin_api_error(NIC_PLUGIN_API_ENDPOINT,
                         "verbs receive: no dataplane memory was handed to the backend (an "
                         "endpoint made outside nic_verbs_endpoint_create?)");
    return -EOPNOTSUPP;
  }
  struct vcq *spare = nic_plugin_calloc(1, sizeof *spare), *gone = NULL;
  if (!spare) return -ENOMEM;
  pthread_mutex_lock(&vb->lock);
  if (!ep_listed_locked(vb, ep))
    rc = -EINVAL, why = "not an endpoint of the verbs backend";
  else if (ep->rx || ep->rx_starting)
    rc = -EALREADY, why = "the endpoint receives already";
  else if (ibv_query_qp(ep->qp, &attr, IBV_QP_STATE | IBV_QP_CAP, &init))
    rc = errno ? -errno : -EIO, why = "ibv_query_qp failed on its queue pair";
  else {
    struct nic_verbs_rx_qp q = rx_qp_locked(vb, ep, &attr, &init);
    rc = nic_verbs_rx_check(&q, &count, &why);
  }
  /* Each buffer has one receive posted at most: count of them never overrun the CQ. */
  if (!rc && !(count = rx_room_take_locked(vb, ep, count, &spare))) {
    gone = rx_room_back_locked(vb, ep);
    rc = -ENOSPC, why = "its receive CQ has no room left: the receives of other endpoints fill it";
  }
  if (!rc) ep->rx_starting = true; /* the endpoint stays while it is set: close says -EBUSY */
  pthread_mutex_unlock(&vb->lock);
  nic_plugin_free(spare);
  nic_plugin_free(gone);
  if (rc) {
    nic_plugin_api_error(NIC_PLUGIN_API_ENDPOINT, "verbs receive on endpoint %p: %s", (void *)ep,
                         why);
    return rc;
  }
  /* Memory and registration outside the lock: making a chunk's registration may wait for
   * completions, which poll() reaps under it. */
  const size_t len = nic_verbs_rx_block_bytes(count);
  uint32_t lkey = 0;
  uint64_t handle = 0;
  struct nic_verbs_rx *r = nic_plugin_calloc(1, nic_verbs_rx_ring_bytes(count));
  void *block = r ? vb->rx_mem.alloc(len, NIC_VERBS_RX_ALIGN, &lkey, &handle) : NULL;
  ep->rx_slot = -1;
  rc = !block ? -ENOMEM : nic_verbs_rx_init(r, block, count);
  if (!rc) rc = rx_register(vb, ep, block, len, lkey, handle);
  unsigned posted = 0;
  pthread_mutex_lock(&vb->lock);
  if (!rc) {
    ep->rx = r;
    ep->rx_fn = fn;
    ep->rx_arg = arg;
    ep->rcq = ep->qp->recv_cq;
    /* A receive queue the application filled partly itself takes fewer: those posted serve. */
    int err = 0;
    while (posted < count && !(err = post_recv(ep, posted)))
      nic_verbs_rx_posted(r, posted++);
    if (!posted) {
      rc = err ? -err : -EIO;
      ep->rx = NULL;
    }
  }
  if (rc) gone = rx_room_back_locked(vb, ep);
  ep->rx_starting = false;
  pthread_mutex_unlock(&vb->lock);
  nic_plugin_free(gone);
  if (rc) {
    rx_unregister(vb, ep);
    if (block) vb->rx_mem.free(block);
    nic_plugin_free(r);
    nic_plugin_api_error(NIC_PLUGIN_API_ENDPOINT, "verbs receive on endpoint %p: %s", (void *)ep,
                         strerror(-rc));
    return rc;
  }
  if (posted < count)
    nic_plugin_info("verbs receive: %u of %u receive buffers fit the queue pair's receive queue",
                    posted, count);
  return 0;
}

/* The QP's max_send_sge where it is below the device's (vpost refuses more with -E2BIG). */
static unsigned v_endpoint_max_entries(struct nic_backend *b, const struct nic_endpoint *ep) {
  return ep->max_sge < b->caps.max_sge ? ep->max_sge : b->caps.max_sge;
}

/* Gives buffer token back to the NIC. When the QP broke meanwhile and nothing else is posted,
 * that is the end of receiving (no completion will come to say it): kept in the books and told
 * by the next poll, as everything the receiver hears (this runs inside nic_release, a destroy,
 * or another thread's receive function). */
static void v_rx_recycle(struct nic_backend *b, struct nic_endpoint *ep, uint64_t token) {
  struct vbackend *vb = vb_of(b);
  bool bad = false;
  pthread_mutex_lock(&vb->lock);
  if (!ep_listed_locked(vb, ep) || !ep->rx) {
    bad = true;
  } else {
    switch (nic_verbs_rx_recycle(ep->rx, token)) {
    case NIC_VERBS_RX_REPOST: {
      const int err = post_recv(ep, (unsigned)token);
      if (!err)
        nic_verbs_rx_posted(ep->rx, (unsigned)token);
      else
        nic_verbs_rx_repost_failed(ep->rx, (unsigned)token, -err);
      break;
    }
    case NIC_VERBS_RX_KEEP:
      break;
    case NIC_VERBS_RX_BAD_TOKEN:
      bad = true;
      break;
    }
  }
  pthread_mutex_unlock(&vb->lock);
  if (bad) {
    static const char once;
    nic_plugin_log(NIC_PLUGIN_LOG_WARN, &once,
                   "verbs receive: a buffer given back (token %llu) is not out; ignored",
                   (unsigned long long)token);
  }
}

/* The receiving endpoint whose buffer a receive completion names. NULL for a work request that
 * is not nicmalloc's (the application's own receive on that CQ, against verbs.h): it is dropped
 * rather than followed as a pointer. */
static struct nic_endpoint *rx_owner_locked(struct vbackend *vb, uint64_t wr_id) {
  for (struct nic_endpoint *e = vb->eps; e; e = e->next) {
    if (!e->rx) continue;
    const uintptr_t lo = (uintptr_t)e->rx->bufs, hi = (uintptr_t)(e->rx->bufs + e->rx->count);
    if (wr_id >= lo && wr_id < hi && (wr_id - lo) % sizeof e->rx->bufs[0] == 0) return e;
  }
  return NULL;
}

/* A receive completion into its endpoint's books: a message queued for the receiver, the end
 * kept, or a buffer without data posted again. */
static void book_locked(struct vbackend *vb, const struct ibv_wc *wc) {
  struct nic_endpoint *owner = rx_owner_locked(vb, wc->wr_id); /* CQs may be shared */
  /* Not the flushes of the receives a close takes back: they are no error. */
  if (wc->status != IBV_WC_SUCCESS &&
      !(owner && owner->rx_flushing && wc->status == IBV_WC_WR_FLUSH_ERR))
    completion_error(wc);
  if (!owner) {
    static const char once;
    nic_plugin_log(NIC_PLUGIN_LOG_WARN, &once,
                   "verbs receive: a completion on a receive CQ of nicmalloc's names no buffer "
                   "of it (the application's own receive?); the CQ must carry only "
                   "nicmalloc's receives. Dropped");
    return;
  }
  struct nic_verbs_rx_buf *buf = (struct nic_verbs_rx_buf *)(uintptr_t)wc->wr_id;
  const int status = nic_verbs_wc_errno(wc->status);
  if (nic_verbs_rx_complete(buf->ring, buf->index, status) != NIC_VERBS_RX_DELIVER) return;
  if (wc->opcode == IBV_WC_RECV) {
    nic_verbs_rx_queue(buf->ring, buf->index, wc->byte_len);
    return;
  }
  /* An RDMA write with immediate takes a receive but leaves no data in it. */
  nic_verbs_rx_recycle(buf->ring, buf->index);
  const int err = post_recv(owner, buf->index);
  if (!err)
    nic_verbs_rx_posted(buf->ring, buf->index);
  else
    nic_verbs_rx_repost_failed(buf->ring, buf->index, -err);
}

/* Tells ep's receiver what its books hold, up to max calls, each outside the lock (the receiver
 * gives buffers back, v_rx_recycle, from inside its call). One thread at a time per endpoint,
 * so that the receiver runs on one thread at a time and hears its messages in the order they
 * came: a thread that finds another telling leaves the books to it, and the teller looks at
 * them again before it stops. Bounded, so that it returns while other threads keep the books
 * full: the next poll tells the rest. Returns the calls made. */
static int tell_locked(struct vbackend *vb, struct nic_endpoint *ep, int max) {
  struct nic_verbs_rx *r = ep->rx;
  if (!r || r->delivering || !nic_verbs_rx_news_due(r)) return 0;
  r->delivering = true; /* a close says -EBUSY meanwhile: ep and r stay */
  int calls = 0;
  unsigned i;
  uint32_t len;
  int status;
  enum nic_verbs_rx_news what;
  while (calls < max && (unsigned)calls < r->count + 2 &&
         (what = nic_verbs_rx_next(r, &i, &len, &status)) != NIC_VERBS_RX_NO_NEWS) {
    pthread_mutex_unlock(&vb->lock);
    if (what == NIC_VERBS_RX_MESSAGE)
      ep->rx_fn(ep->rx_arg, nic_verbs_rx_addr(r, i), len, 0, i);
    else
      ep->rx_fn(ep->rx_arg, NULL, 0, status, 0);
    calls++;
    pthread_mutex_lock(&vb->lock);
  }
  r->delivering = false;
  return calls;
}

/* Reaps the receive CQs into the endpoints' books (*reaped: how many completions), then tells
 * each receiver what its books hold. Returns the receiver calls made. */
static int poll_recv(struct vbackend *vb, int max, int *reaped) {
  struct ibv_wc wc[32];
  const int limit = 32 < max ? 32 : max;
  int got = 0, calls = 0;
  pthread_mutex_lock(&vb->lock);
  for (struct nic_endpoint *ep = vb->eps; ep && got < limit; ep = ep->next) {
    if (!ep->rx) continue;
    const int k = ibv_poll_cq(ep->rcq, limit - got, wc + got);
    for (int i = got; i < got + (k > 0 ? k : 0); i++)
      book_locked(vb, &wc[i]);
    got += k > 0 ? k : 0;
  }
  *reaped = got;
  /* tell_locked lets go of the lock, but the endpoint it tells stays listed (its close says
   * -EBUSY meanwhile), so the walk goes on from it. */
  for (struct nic_endpoint *ep = vb->eps; ep && calls < max; ep = ep->next)
    calls += tell_locked(vb, ep, max - calls);
  pthread_mutex_unlock(&vb->lock);
  return calls;
}

/* Frees what receiving held; the endpoint is off the list or the backend is closing. */
static void rx_teardown(struct vbackend *vb, struct nic_endpoint *ep, bool free_block) {
  if (!ep->rx) return;
  rx_unregister(vb, ep);
  if (free_block && vb->rx_mem.free) vb->rx_mem.free(ep->rx->block);
  nic_plugin_free(ep->rx);
  ep->rx = NULL;
}

NIC_EXPORT void nic_verbs_set_rx_memory(struct nic_backend *b,
                                        const struct nic_verbs_rx_memory *m) {
  if (b && m) vb_of(b)->rx_mem = *m;
}

static void vclose(struct nic_backend *b) {
  struct vbackend *vb = vb_of(b);
  if (!vb) return;
  /* The receive blocks stay the allocator's: at close it may be going away itself. */
  for (struct nic_endpoint *ep = vb->eps; ep; ep = ep->next)
    rx_teardown(vb, ep, false);
  for (uint32_t i = 0; i < VERBS_MAX_REGS; i++)
    if (vb->regs[i].mr) ibv_dereg_mr(vb->regs[i].mr);
  while (vb->eps) {
    struct nic_endpoint *next = vb->eps->next;
    nic_plugin_free(vb->eps);
    vb->eps = next;
  }
  while (vb->cqs) {
    struct vcq *next = vb->cqs->next;
    nic_plugin_free(vb->cqs);
    vb->cqs = next;
  }
  if (vb->pd) ibv_dealloc_pd(vb->pd);
  if (vb->ctx) ibv_close_device(vb->ctx);
  nic_plugin_free(vb->live);
  pthread_mutex_destroy(&vb->lock);
  pthread_mutex_destroy(&vb->reg_lock);
  pthread_mutex_destroy(&vb->use_lock);
  nic_plugin_free(vb);
}

NIC_EXPORT struct ibv_context *nic_verbs_context(struct nic_backend *b) {
  return b ? vb_of(b)->ctx : NULL;
}
NIC_EXPORT struct ibv_pd *nic_verbs_pd(struct nic_backend *b) {
  return b ? vb_of(b)->pd : NULL;
}

/* Under reg_lock, as registrations read it, and the backend's lock, as endpoints do. */
NIC_EXPORT int nic_verbs_set_odp(struct nic_backend *b, bool on) {
  struct vbackend *vb = vb_of(b);
  if (on && !(vb->odp_rc & IBV_ODP_SUPPORT_SEND)) return -EOPNOTSUPP;
  if (!on && b->caps.pages_follow) return -EBUSY; /* the heap gives pages back under the MRs */
  int rc = 0;
  pthread_mutex_lock(&vb->reg_lock);
  pthread_mutex_lock(&vb->lock);
  for (const struct nic_endpoint *e = vb->eps; on && !uc_serves_odp(vb) && e; e = e->next)
    if (e->qp->qp_type == IBV_QPT_UC) rc = -EBUSY; /* it could not use the memory */
  if (!rc) vb->odp = on;
  pthread_mutex_unlock(&vb->lock);
  pthread_mutex_unlock(&vb->reg_lock);
  return rc;
}

NIC_EXPORT struct nic_endpoint *nic_verbs_endpoint(struct nic_backend *b, struct ibv_qp *qp,
                                                   struct ibv_cq *send_cq) {
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  if (!b || !qp || qp->pd != vb_of(b)->pd) {
    errno = EINVAL; /* a QP in another PD could not use our lkeys */
    return NULL;
  }
  /* A post is a bare IBV_WR_SEND: no address handle, remote QP number, Q_Key or remote SRQ
   * number, which UD and XRC sends need (a provider reads a UD send's handle: mlx5 faults on a
   * NULL one), and no frame header for a raw packet QP. */
  if (qp->qp_type != IBV_QPT_RC && qp->qp_type != IBV_QPT_UC) {
    static const char once;
    nic_plugin_log(NIC_PLUGIN_LOG_ERROR, &once,
                   "verbs endpoint: queue pair type %d refused; only RC and UC queue pairs can "
                   "send through nicmalloc",
                   (int)qp->qp_type);
    errno = EOPNOTSUPP;
    return NULL;
  }
  if (!send_cq) send_cq = qp->send_cq;
  struct nic_endpoint *ep = nic_plugin_calloc(1, sizeof *ep);
  struct vcq *spare = ep ? nic_plugin_calloc(1, sizeof *spare) : NULL;
  if (!spare) {
    nic_plugin_free(ep);
    return NULL;
  }
  *ep = (struct nic_endpoint){.qp = qp, .cq = send_cq, .max_sge = b->caps.max_sge, .rx_slot = -1};
  if (!ibv_query_qp(qp, &attr, IBV_QP_CAP, &init) && init.cap.max_send_sge < ep->max_sge)
    ep->max_sge = init.cap.max_send_sge;
  pthread_mutex_lock(&vb_of(b)->lock);
  /* poll() takes every completion of a send CQ as a send's: not a CQ receives complete on. */
  bool shared = false;
  for (const struct nic_endpoint *e = vb_of(b)->eps; e; e = e->next)
    shared |= e->rx && e->rcq == send_cq;
  /* A UC QP cannot reach memory that pages on demand where the device offers no UC ODP. */
  const bool uc_odp = qp->qp_type == IBV_QPT_UC && !uc_serves_odp(vb_of(b)) &&
                      (vb_of(b)->odp || atomic_load(&vb_of(b)->odp_mrs));
  if (!shared && !uc_odp) {
    ep->send_room = vcq_use_locked(vb_of(b), send_cq, &spare);
    ep->next = vb_of(b)->eps;
    vb_of(b)->eps = ep;
  }
  pthread_mutex_unlock(&vb_of(b)->lock);
  nic_plugin_free(spare);
  if (uc_odp && !shared) {
    static const char once;
    nic_plugin_log(NIC_PLUGIN_LOG_ERROR, &once,
                   "verbs endpoint: a UC queue pair refused: registrations page on demand "
                   "(NICMALLOC_VERBS_ODP) and the device offers no on-demand paging for UC");
    nic_plugin_free(ep);
    errno = EOPNOTSUPP;
    return NULL;
  }
  if (shared) {
    nic_plugin_free(ep);
    errno = EINVAL;
    return NULL;
  }
  return ep;
}

NIC_EXPORT int nic_verbs_endpoint_close(struct nic_backend *b, struct nic_endpoint *ep) {
  struct vbackend *vb = vb_of(b);
  struct vcq *gone[2] = {NULL, NULL};
  int rc = -EINVAL;
  pthread_mutex_lock(&vb->lock);
  for (struct nic_endpoint **pp = &vb->eps; *pp; pp = &(*pp)->next) {
    if (*pp != ep) continue;
    /* The receiver hears everything its books hold before the endpoint goes (the end too). */
    rc = atomic_load(&ep->inflight) || ep->rx_starting ||
                 (ep->rx && (ep->rx->delivering || nic_verbs_rx_news_due(ep->rx)))
             ? -EBUSY
             : 0;
    if (!rc && ep->rx && nic_verbs_rx_out(ep->rx)) {
      rc = -EBUSY; /* the program holds a buffer: nic_release gives it back */
    } else if (!rc && ep->rx && nic_verbs_rx_posted_any(ep->rx)) {
      /* The NIC keeps posted receives until the QP flushes them: only the error state makes it
       * give the buffers back (as completions poll() reaps), so that they can be freed. */
      struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
      int err = ep->rx_flushing ? 0 : ibv_modify_qp(ep->qp, &a, IBV_QP_STATE);
      if (err) {
        static const char once;
        nic_plugin_log(NIC_PLUGIN_LOG_WARN, &once,
                       "verbs endpoint close: cannot move its queue pair to the error state (%s), "
                       "so its posted receive buffers stay the NIC's; it stays open",
                       strerror(err));
      }
      ep->rx_flushing = !err;
      rc = -EBUSY;
    }
    if (!rc) {
      *pp = ep->next;
      gone[0] = vcq_leave_locked(vb, ep->send_room);
      gone[1] = rx_room_back_locked(vb, ep);
    }
    break;
  }
  pthread_mutex_unlock(&vb->lock);
  if (!rc) {
    rx_teardown(vb, ep, true);
    nic_plugin_free(ep);
    nic_plugin_free(gone[0]);
    nic_plugin_free(gone[1]);
  }
  return rc;
}

static struct ibv_device *choose_device(struct ibv_device **list, int n) {
  const char *want = settings.verbs_device;
  if (!want || !*want) return list[0];
  for (int i = 0; i < n; i++)
    if (!strcmp(ibv_get_device_name(list[i]), want)) return list[i];
  nic_plugin_warn("NICMALLOC_VERBS_DEVICE=%s: no such RDMA device", want);
  return NULL;
}

/* Completions from the queue pair's own send CQ. */
static struct nic_endpoint *v_endpoint_create(struct nic_backend *b,
                                              const struct nic_endpoint_params *p) {
  return nic_verbs_endpoint(b, (struct ibv_qp *)p->qp, NULL);
}

/* Opens the device and PD and fills the caps. Returns 0 or an errno value. */
static int setup(struct vbackend *vb, struct ibv_device *dev) {
  struct ibv_device_attr_ex attr;
  if (!(vb->ctx = ibv_open_device(dev)) || !(vb->pd = ibv_alloc_pd(vb->ctx)))
    return errno ? errno : EIO;
  int err = ibv_query_device_ex(vb->ctx, NULL, &attr);
  if (err) return err;
  vb->async_events = nic_plugin_verbs_async_events();
  const struct ibv_odp_caps *odp = &attr.odp_caps;
  if (odp->general_caps & IBV_ODP_SUPPORT) {
    vb->odp_rc = odp->per_transport_caps.rc_odp_caps;
    vb->odp_uc = odp->per_transport_caps.uc_odp_caps;
  }
  int max_sge = attr.orig_attr.max_sge, max_mr = attr.orig_attr.max_mr;
  /* The longest message: the least that a port carries (a QP may be on any of them). */
  size_t max_message = 0;
  for (uint8_t port = 1; port <= attr.orig_attr.phys_port_cnt; port++) {
    struct ibv_port_attr pa;
    if (!ibv_query_port(vb->ctx, port, &pa) && pa.max_msg_sz &&
        (!max_message || pa.max_msg_sz < max_message))
      max_message = pa.max_msg_sz;
  }
  vb->pub = (struct nic_backend){
      .name = "verbs",
      .caps = {.max_sge = max_sge < VERBS_MAX_SGE ? (uint32_t)max_sge : VERBS_MAX_SGE,
               .max_region_bytes = (size_t)attr.orig_attr.max_mr_size,
               .max_regions = max_mr < VERBS_MAX_REGS ? (uint32_t)max_mr : VERBS_MAX_REGS,
               .zero_copy = true,
               .max_message = max_message},
      .reg = vreg,
      .dereg = vdereg,
      .post = vpost,
      .poll = vpoll,
      .close = vclose,
      .endpoint_create = v_endpoint_create,
      .endpoint_destroy = nic_verbs_endpoint_close,
      .endpoint_receive = v_endpoint_receive,
      .rx_recycle = v_rx_recycle,
      .endpoint_max_entries = v_endpoint_max_entries};
  vb->live_free = VERBS_LIVE_NONE;
  pthread_mutex_init(&vb->reg_lock, NULL);
  pthread_mutex_init(&vb->use_lock, NULL);
  return pthread_mutex_init(&vb->lock, NULL);
}

NIC_EXPORT struct nic_backend *nic_backend_verbs_open(const struct nic_plugin_host *host) {
  if (!nic_plugin_attach(host)) return NULL;
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  nic_plugin_quiet_env(); /* the providers it loaded for devices: before they open one */
  /* rdma-core says ENOSYS without kernel support; auto selection only needs "no device". */
  struct ibv_device *dev = list && n > 0 ? choose_device(list, n) : NULL;
  struct vbackend *vb = dev ? nic_plugin_calloc(1, sizeof *vb) : NULL;
  int err = !dev ? ENODEV : !vb ? ENOMEM : setup(vb, dev);
  if (!err) {
    if (settings.verbs_odp && nic_verbs_set_odp(&vb->pub, true))
      nic_plugin_warn("NICMALLOC_VERBS_ODP=1 but %s reports no ODP for RC sends; pinning instead",
                      ibv_get_device_name(dev));
    /* Every MR follows the address when RC ODP covers every use a registration can have: then
     * the heap may give pages back under them (caps.pages_follow), and ODP stays on. */
    const uint32_t all =
        IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_WRITE;
    vb->pub.caps.pages_follow = vb->odp && (vb->odp_rc & all) == all;
    nic_plugin_info("verbs backend on %s", ibv_get_device_name(dev));
  } else if (vb) {
    if (vb->pd) ibv_dealloc_pd(vb->pd);
    if (vb->ctx) ibv_close_device(vb->ctx);
    nic_plugin_free(vb);
    vb = NULL;
  }
  if (list) ibv_free_device_list(list);
  errno = err ? err : errno;
  return vb ? &vb->pub : NULL;
}
