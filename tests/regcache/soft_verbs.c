/* A software RDMA device behind the rdma-core calls the verbs backend makes (soft_verbs.h). */
#include "soft_verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define SOFT_Q 256 /* work requests or completions a queue holds */
#define SOFT_MRS 64

struct soft_cq {
  struct ibv_cq cq; /* cq.cqe: the completions it holds */
  struct ibv_wc wc[SOFT_Q];
  unsigned head, n;
  unsigned overrun; /* 1 once a completion found it full */
};

struct soft_send {
  uint64_t wr_id;
  bool signaled; /* IBV_SEND_SIGNALED: a success completes it too */
  unsigned n;
  struct ibv_sge sge[8];
};

struct soft_qp {
  struct ibv_qp qp;
  uint32_t max_recv_wr, max_recv_sge, max_send_sge, max_send_wr;
  struct ibv_recv_wr rq[SOFT_Q]; /* with sg_list pointing into rq_sge */
  struct ibv_sge rq_sge[SOFT_Q];
  unsigned rq_head, rq_n;
  struct soft_send waiting[SOFT_Q]; /* sends finding no receive posted (RNR, retried) */
  unsigned w_head, w_n;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Asynchronous events not yet read (one context at a time is enough for the tests), and that
 * context's descriptor, readable while one is (an eventfd counting them, as a semaphore). */
static struct ibv_async_event events[SOFT_Q];
static unsigned events_n;
static int events_fd = -1;
static struct ibv_device device;
static struct ibv_device *devices[2] = {&device, NULL};
static struct ibv_mr *mrs[SOFT_MRS];
static uint32_t next_key = 0x100;
static int devices_listed = 1;
static uint32_t max_msg_sz = 1u << 30; /* what mlx5 ports report */
static struct ibv_odp_caps odp_caps;   /* none unless a test sets them */

void soft_verbs_set_devices(int n) {
  devices_listed = n;
}

void soft_verbs_set_max_msg(uint32_t bytes) {
  max_msg_sz = bytes;
}

void soft_verbs_set_odp(uint64_t general, uint32_t rc, uint32_t uc) {
  odp_caps = (struct ibv_odp_caps){.general_caps = general,
                                   .per_transport_caps = {.rc_odp_caps = rc, .uc_odp_caps = uc}};
}

static void event_locked(struct ibv_async_event ev) {
  if (events_n == SOFT_Q) return;
  events[events_n++] = ev;
  const uint64_t one = 1;
  if (events_fd >= 0 && write(events_fd, &one, sizeof one) != sizeof one) abort();
}

/* A completion into a full CQ overruns it, as on a NIC: the CQ is in error, the completion and
 * every later one are lost (their posts never complete) and IBV_EVENT_CQ_ERR is raised. */
static void push(struct ibv_cq *cq, struct ibv_wc wc) {
  struct soft_cq *c = (struct soft_cq *)cq;
  if (!c->overrun && c->n == (unsigned)c->cq.cqe) {
    c->overrun = 1;
    event_locked((struct ibv_async_event){.element.cq = cq, .event_type = IBV_EVENT_CQ_ERR});
  }
  if (c->overrun) return;
  c->wc[(c->head + c->n++) % SOFT_Q] = wc;
}

static int soft_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc) {
  struct soft_cq *c = (struct soft_cq *)cq;
  pthread_mutex_lock(&lock);
  int k = 0;
  for (; k < num && c->n; k++, c->n--, c->head = (c->head + 1) % SOFT_Q)
    wc[k] = c->wc[c->head];
  pthread_mutex_unlock(&lock);
  return k;
}

/* Whether the MR that lkey names is in the QP's protection domain and covers the entry. */
static bool covered(const struct ibv_qp *qp, const struct ibv_sge *s, bool write) {
  for (int i = 0; i < SOFT_MRS; i++) {
    const struct ibv_mr *m = mrs[i];
    if (!m || m->lkey != s->lkey) continue;
    if (m->pd != qp->pd) return false;
    const uintptr_t lo = (uintptr_t)m->addr;
    if (write && !(m->handle & IBV_ACCESS_LOCAL_WRITE)) return false;
    return s->addr >= lo && s->addr + s->length <= lo + m->length;
  }
  return false;
}

static void flush_locked(struct soft_qp *q) {
  for (; q->rq_n; q->rq_n--, q->rq_head = (q->rq_head + 1) % SOFT_Q)
    push(q->qp.recv_cq, (struct ibv_wc){.wr_id = q->rq[q->rq_head].wr_id,
                                        .status = IBV_WC_WR_FLUSH_ERR,
                                        .qp_num = q->qp.qp_num});
  for (; q->w_n; q->w_n--, q->w_head = (q->w_head + 1) % SOFT_Q)
    push(q->qp.send_cq, (struct ibv_wc){.wr_id = q->waiting[q->w_head].wr_id,
                                        .status = IBV_WC_WR_FLUSH_ERR,
                                        .qp_num = q->qp.qp_num});
}

static void to_error_locked(struct soft_qp *q) {
  q->qp.state = IBV_QPS_ERR;
  flush_locked(q);
}

/* The oldest waiting send off the queue, with a completion of status unless it succeeded
 * unsignaled (an error always completes). */
static void send_done_locked(struct soft_qp *q, enum ibv_wc_status status) {
  const struct soft_send *s = &q->waiting[q->w_head];
  if (s->signaled || status != IBV_WC_SUCCESS)
    push(q->qp.send_cq,
         (struct ibv_wc){
             .wr_id = s->wr_id, .status = status, .opcode = IBV_WC_SEND, .qp_num = q->qp.qp_num});
  q->w_n--, q->w_head = (q->w_head + 1) % SOFT_Q;
}

/* Whether the MRs cover a send's entries now: the requester reads them as it sends (and again
 * at each retry), not when the work request was posted. */
static bool send_covered_locked(const struct soft_qp *q, const struct soft_send *s) {
  for (unsigned i = 0; i < s->n; i++)
    if (!covered(&q->qp, &s->sge[i], false)) return false;
  return true;
}

/* The responder fails the oldest receive with status and answers the oldest send with a NAK,
 * which completes it send_status; the QP goes to error. */
static void receive_fails_locked(struct soft_qp *q, enum ibv_wc_status status,
                                 enum ibv_wc_status send_status) {
  push(q->qp.recv_cq,
       (struct ibv_wc){.wr_id = q->rq[q->rq_head].wr_id, .status = status, .qp_num = q->qp.qp_num});
  q->rq_n--, q->rq_head = (q->rq_head + 1) % SOFT_Q;
  send_done_locked(q, send_status);
  to_error_locked(q);
}

/* The oldest waiting send into the oldest posted receive (the QP is connected to itself). Each
 * entry is checked against the MRs as the data moves: an MR deregistered since the post fails the
 * send IBV_WC_LOC_PROT_ERR, and the QP goes to error, as on a NIC. */
static void deliver_locked(struct soft_qp *q) {
  while (q->qp.state == IBV_QPS_RTS && q->w_n) {
    struct soft_send *s = &q->waiting[q->w_head];
    if (!send_covered_locked(q, s)) {
      send_done_locked(q, IBV_WC_LOC_PROT_ERR);
      to_error_locked(q);
      return;
    }
    if (!q->rq_n) return; /* receiver not ready: the sender retries */
    struct ibv_recv_wr *r = &q->rq[q->rq_head];
    if (!covered(&q->qp, &r->sg_list[0], true)) { /* a responder's own error: Remote Op NAK */
      receive_fails_locked(q, IBV_WC_LOC_PROT_ERR, IBV_WC_REM_OP_ERR);
      return;
    }
    size_t total = 0;
    for (unsigned i = 0; i < s->n; i++)
      total += s->sge[i].length;
    if (total > r->sg_list[0].length) { /* the responder NAKs it: Invalid Request */
      receive_fails_locked(q, IBV_WC_LOC_LEN_ERR, IBV_WC_REM_INV_REQ_ERR);
      return;
    }
    char *to = (char *)(uintptr_t)r->sg_list[0].addr;
    for (unsigned i = 0; i < s->n; i++) {
      memcpy(to, (const void *)(uintptr_t)s->sge[i].addr, s->sge[i].length);
      to += s->sge[i].length;
    }
    push(q->qp.recv_cq, (struct ibv_wc){.wr_id = r->wr_id,
                                        .status = IBV_WC_SUCCESS,
                                        .opcode = IBV_WC_RECV,
                                        .byte_len = (uint32_t)total,
                                        .qp_num = q->qp.qp_num});
    q->rq_n--, q->rq_head = (q->rq_head + 1) % SOFT_Q;
    send_done_locked(q, IBV_WC_SUCCESS);
  }
}

static int soft_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  struct soft_qp *q = (struct soft_qp *)qp;
  int rc = 0;
  pthread_mutex_lock(&lock);
  for (; wr && !rc; wr = wr->next) {
    if (qp->state == IBV_QPS_RESET || wr->num_sge != 1 || wr->num_sge > (int)q->max_recv_sge)
      rc = EINVAL;
    else if (q->rq_n == q->max_recv_wr)
      rc = ENOMEM; /* the entry's MR is checked when data arrives, as on a NIC */
    if (rc) {
      *bad = wr;
      break;
    }
    const unsigned at = (q->rq_head + q->rq_n++) % SOFT_Q;
    q->rq_sge[at] = wr->sg_list[0];
    q->rq[at] = (struct ibv_recv_wr){.wr_id = wr->wr_id, .sg_list = &q->rq_sge[at], .num_sge = 1};
    if (qp->state == IBV_QPS_ERR) flush_locked(q);
  }
  deliver_locked(q);
  pthread_mutex_unlock(&lock);
  return rc;
}

/* What a send of qp's type needs beyond its entries, as a NIC's provider reads it: 0, or the
 * errno of a post the soft device refuses. A UD send is a datagram to an address handle that the
 * provider reads while it builds the work queue entry (mlx5: set_datagram_seg), so one without
 * dies in ibv_post_send, as here. */
static int send_type_check(const struct ibv_qp *qp, const struct ibv_send_wr *wr) {
  switch (qp->qp_type) {
  case IBV_QPT_RC:
  case IBV_QPT_UC:
    return 0;
  case IBV_QPT_UD:
    if (!wr->wr.ud.ah) {
      fprintf(stderr, "soft verbs: a UD send without an address handle: a NIC's provider reads "
                      "through it (SIGSEGV)\n");
      abort();
    }
    return EOPNOTSUPP; /* datagrams are not modelled */
  case IBV_QPT_XRC_SEND:
    return wr->qp_type.xrc.remote_srqn ? EOPNOTSUPP : EINVAL; /* no target SRQ: no message */
  default:
    return EOPNOTSUPP; /* raw Ethernet frames, XRC receive QPs (no send queue) */
  }
}

static int soft_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  struct soft_qp *q = (struct soft_qp *)qp;
  int rc = 0;
  pthread_mutex_lock(&lock);
  for (; wr && !rc; wr = wr->next) {
    /* mlx5 takes sends in the error state too: they flush. */
    if ((qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) ||
        wr->num_sge > (int)q->max_send_sge)
      rc = EINVAL;
    else if (q->w_n >= q->max_send_wr)
      rc = ENOMEM; /* the send queue is full, as mlx5 says it */
    else
      rc = send_type_check(qp, wr);
    if (rc) {
      *bad = wr;
      break;
    }
    if (qp->state == IBV_QPS_ERR) {
      push(
          qp->send_cq,
          (struct ibv_wc){.wr_id = wr->wr_id, .status = IBV_WC_WR_FLUSH_ERR, .qp_num = qp->qp_num});
      continue;
    }
    uint64_t total = 0;
    for (int i = 0; i < wr->num_sge; i++)
      total += wr->sg_list[i].length;
    if (total > max_msg_sz) { /* the send queue stops at it: the QP goes to error */
      push(qp->send_cq,
           (struct ibv_wc){.wr_id = wr->wr_id, .status = IBV_WC_LOC_LEN_ERR, .qp_num = qp->qp_num});
      to_error_locked(q);
      continue;
    }
    struct soft_send *s = &q->waiting[(q->w_head + q->w_n++) % SOFT_Q];
    *s = (struct soft_send){.wr_id = wr->wr_id,
                            .signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0,
                            .n = (unsigned)wr->num_sge};
    memcpy(s->sge, wr->sg_list, (size_t)wr->num_sge * sizeof s->sge[0]);
  }
  deliver_locked(q);
  pthread_mutex_unlock(&lock);
  return rc;
}

struct ibv_device **ibv_get_device_list(int *num) {
  if (num) *num = devices_listed;
  struct ibv_device **list = calloc(2, sizeof *list);
  if (list && devices_listed) list[0] = devices[0];
  return list;
}
void ibv_free_device_list(struct ibv_device **list) {
  free(list);
}
const char *ibv_get_device_name(struct ibv_device *dev) {
  (void)dev;
  return "soft0";
}
static int soft_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr,
                           size_t len) {
  (void)ctx;
  if (port != 1) return EINVAL;
  struct ibv_port_attr a = {.state = IBV_PORT_ACTIVE,
                            .max_mtu = IBV_MTU_4096,
                            .active_mtu = IBV_MTU_4096,
                            .max_msg_sz = max_msg_sz,
                            .link_layer = IBV_LINK_LAYER_ETHERNET};
  memcpy(attr, &a, len < sizeof a ? len : sizeof a);
  return 0;
}

static int soft_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
                                struct ibv_device_attr_ex *attr, size_t len) {
  (void)in;
  struct ibv_device_attr_ex a = {.odp_caps = odp_caps};
  ibv_query_device(ctx, &a.orig_attr);
  memcpy(attr, &a, len < sizeof a ? len : sizeof a);
  return 0;
}

/* The legacy entry the inline ibv_query_port falls back on; the extended context never takes it. */
#undef ibv_query_port
int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr) {
  /* The legacy struct is the current one without the fields added since (the first of them). */
  return soft_query_port(ctx, port, (struct ibv_port_attr *)attr,
                         offsetof(struct ibv_port_attr, port_cap_flags2));
}

/* An extended context, as rdma-core's providers make: the inline queries take its operations. */
struct ibv_context *ibv_open_device(struct ibv_device *dev) {
  struct verbs_context *v = calloc(1, sizeof *v);
  if (!v) return NULL;
  struct ibv_context *ctx = &v->context;
  v->sz = sizeof *v;
  v->query_port = soft_query_port;
  v->query_device_ex = soft_query_device_ex;
  ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
  if ((ctx->async_fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE)) < 0) {
    free(v);
    return NULL;
  }
  pthread_mutex_lock(&lock);
  events_fd = ctx->async_fd;
  pthread_mutex_unlock(&lock);
  ctx->device = dev;
  ctx->ops.poll_cq = soft_poll_cq;
  ctx->ops.post_send = soft_post_send;
  ctx->ops.post_recv = soft_post_recv;
  return ctx;
}
int ibv_close_device(struct ibv_context *ctx) {
  pthread_mutex_lock(&lock);
  events_n = 0;
  if (events_fd == ctx->async_fd) events_fd = -1;
  pthread_mutex_unlock(&lock);
  close(ctx->async_fd);
  free(verbs_get_ctx(ctx));
  return 0;
}
struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx) {
  struct ibv_pd *pd = calloc(1, sizeof *pd);
  if (pd) pd->context = ctx;
  return pd;
}
int ibv_dealloc_pd(struct ibv_pd *pd) {
  for (int i = 0; i < SOFT_MRS; i++)
    if (mrs[i] && mrs[i]->pd == pd) return EBUSY;
  free(pd);
  return 0;
}
int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr) {
  (void)ctx;
  memset(attr, 0, sizeof *attr);
  attr->max_sge = 8;
  attr->max_mr = SOFT_MRS;
  attr->max_mr_size = (uint64_t)1 << 40;
  attr->max_qp_wr = SOFT_Q;
  attr->phys_port_cnt = 1;
  return 0;
}

/* The access flags are kept in handle: the test's lookups need them, nothing else reads it. */
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                unsigned int access) {
  (void)iova;
  /* ibv_reg_mr refuses on-demand paging the device does not offer, and remote write without
   * local write, as the kernel does. */
  if (((access & IBV_ACCESS_ON_DEMAND) && !(odp_caps.general_caps & IBV_ODP_SUPPORT)) ||
      ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
    errno = EINVAL;
    return NULL;
  }
  struct ibv_mr *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  pthread_mutex_lock(&lock);
  int i = 0;
  while (i < SOFT_MRS && mrs[i])
    i++;
  if (i == SOFT_MRS) {
    pthread_mutex_unlock(&lock);
    free(m);
    errno = ENOMEM;
    return NULL;
  }
  *m = (struct ibv_mr){.context = pd->context,
                       .pd = pd,
                       .addr = addr,
                       .length = length,
                       .handle = access,
                       .lkey = next_key,
                       .rkey = next_key + 1};
  next_key += 2;
  mrs[i] = m;
  pthread_mutex_unlock(&lock);
  return m;
}
#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}
static void (*dereg_hook)(void);

void soft_verbs_on_dereg(void (*hook)(void)) {
  dereg_hook = hook;
}

int ibv_dereg_mr(struct ibv_mr *mr) {
  if (dereg_hook) dereg_hook(); /* the MR is still there: the kernel is tearing it down */
  pthread_mutex_lock(&lock);
  for (int i = 0; i < SOFT_MRS; i++)
    if (mrs[i] == mr) mrs[i] = NULL;
  pthread_mutex_unlock(&lock);
  free(mr);
  return 0;
}

int soft_verbs_mr_access(uint32_t lkey) {
  int access = -1;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < SOFT_MRS; i++)
    if (mrs[i] && mrs[i]->lkey == lkey) access = (int)mrs[i]->handle;
  pthread_mutex_unlock(&lock);
  return access;
}

/* The oldest event not read. Blocking on none would hang the caller for good here (no NIC
 * raises one later): the device aborts instead, saying so. */
int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev) {
  pthread_mutex_lock(&lock);
  const bool any = events_n > 0;
  uint64_t one;
  if (any) {
    *ev = events[0];
    memmove(events, events + 1, --events_n * sizeof events[0]);
    if (read(ctx->async_fd, &one, sizeof one) != sizeof one) abort();
  }
  pthread_mutex_unlock(&lock);
  if (any) return 0;
  if (!(fcntl(ctx->async_fd, F_GETFL) & O_NONBLOCK)) {
    fprintf(stderr, "soft verbs: ibv_get_async_event blocks on a context with no event\n");
    abort();
  }
  errno = EAGAIN;
  return -1;
}
void ibv_ack_async_event(struct ibv_async_event *ev) {
  (void)ev;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
                 struct ibv_qp_init_attr *init) {
  (void)mask;
  struct soft_qp *q = (struct soft_qp *)qp;
  memset(attr, 0, sizeof *attr);
  memset(init, 0, sizeof *init);
  pthread_mutex_lock(&lock);
  attr->qp_state = qp->state;
  attr->cap.max_send_sge = q->max_send_sge;
  attr->cap.max_send_wr = q->max_send_wr;
  attr->cap.max_recv_wr = q->max_recv_wr;
  attr->cap.max_recv_sge = q->max_recv_sge;
  init->cap = attr->cap;
  init->send_cq = qp->send_cq;
  init->recv_cq = qp->recv_cq;
  init->srq = qp->srq;
  init->qp_type = qp->qp_type;
  pthread_mutex_unlock(&lock);
  return 0;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) {
  if (!(mask & IBV_QP_STATE)) return 0;
  pthread_mutex_lock(&lock);
  if (attr->qp_state == IBV_QPS_ERR)
    to_error_locked((struct soft_qp *)qp);
  else
    qp->state = attr->qp_state;
  deliver_locked((struct soft_qp *)qp);
  pthread_mutex_unlock(&lock);
  return 0;
}

struct ibv_cq *soft_verbs_cq_depth(struct ibv_context *ctx, int cqe) {
  struct soft_cq *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->cq.context = ctx;
  c->cq.cqe = cqe > 0 && cqe < SOFT_Q ? cqe : SOFT_Q;
  return &c->cq;
}

struct ibv_cq *soft_verbs_cq(struct ibv_context *ctx) {
  return soft_verbs_cq_depth(ctx, SOFT_Q);
}

/* A count of the device's state, read under its lock. */
static unsigned read_locked(const unsigned *count) {
  pthread_mutex_lock(&lock);
  const unsigned n = *count;
  pthread_mutex_unlock(&lock);
  return n;
}

bool soft_verbs_cq_overrun(struct ibv_cq *cq) {
  return read_locked(&((struct soft_cq *)cq)->overrun) != 0;
}

void soft_verbs_qp_fatal(struct ibv_qp *qp) {
  pthread_mutex_lock(&lock);
  to_error_locked((struct soft_qp *)qp);
  event_locked((struct ibv_async_event){.element.qp = qp, .event_type = IBV_EVENT_QP_FATAL});
  pthread_mutex_unlock(&lock);
}

void soft_verbs_qp_event(struct ibv_qp *qp, enum ibv_event_type type) {
  pthread_mutex_lock(&lock);
  event_locked((struct ibv_async_event){.element.qp = qp, .event_type = type});
  pthread_mutex_unlock(&lock);
}

struct ibv_qp *soft_verbs_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
                             enum ibv_qp_type type, uint32_t max_recv_wr, struct ibv_srq *srq) {
  static uint32_t qpn = 0x10;
  struct soft_qp *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  q->qp = (struct ibv_qp){.context = pd->context,
                          .pd = pd,
                          .send_cq = scq,
                          .recv_cq = rcq,
                          .srq = srq,
                          .qp_num = qpn++,
                          .state = IBV_QPS_RESET,
                          .qp_type = type};
  q->max_recv_wr = max_recv_wr < SOFT_Q ? max_recv_wr : SOFT_Q;
  q->max_recv_sge = 1;
  q->max_send_sge = 8;
  q->max_send_wr = SOFT_Q;
  return &q->qp;
}

void soft_verbs_qp_send_sge(struct ibv_qp *qp, uint32_t max_send_sge) {
  pthread_mutex_lock(&lock);
  ((struct soft_qp *)qp)->max_send_sge = max_send_sge < 8 ? max_send_sge : 8;
  pthread_mutex_unlock(&lock);
}

void soft_verbs_qp_send_wr(struct ibv_qp *qp, uint32_t max_send_wr) {
  pthread_mutex_lock(&lock);
  ((struct soft_qp *)qp)->max_send_wr =
      max_send_wr >= 1 && max_send_wr < SOFT_Q ? max_send_wr : SOFT_Q;
  pthread_mutex_unlock(&lock);
}

unsigned soft_verbs_rq_posted(struct ibv_qp *qp) {
  return read_locked(&((struct soft_qp *)qp)->rq_n);
}

unsigned soft_verbs_sends_waiting(struct ibv_qp *qp) {
  return read_locked(&((struct soft_qp *)qp)->w_n);
}

bool soft_verbs_write_with_imm(struct ibv_qp *qp, uint32_t len) {
  struct soft_qp *q = (struct soft_qp *)qp;
  pthread_mutex_lock(&lock);
  const bool posted = q->rq_n && qp->state == IBV_QPS_RTS;
  if (posted) {
    push(qp->recv_cq, (struct ibv_wc){.wr_id = q->rq[q->rq_head].wr_id,
                                      .status = IBV_WC_SUCCESS,
                                      .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
                                      .wc_flags = IBV_WC_WITH_IMM,
                                      .byte_len = len,
                                      .qp_num = qp->qp_num});
    q->rq_n--, q->rq_head = (q->rq_head + 1) % SOFT_Q;
  }
  pthread_mutex_unlock(&lock);
  return posted;
}

void soft_verbs_free(void *p) {
  free(p);
}
