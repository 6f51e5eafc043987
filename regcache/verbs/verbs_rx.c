/* Receive-buffer bookkeeping of the verbs backend: see verbs_rx.h. */
#include "verbs_rx.h"

#include <errno.h>
#include <infiniband/verbs.h> /* the enum values only: nothing here calls the device */
#include <string.h>

int nic_verbs_rx_check(const struct nic_verbs_rx_qp *q, unsigned *count, const char **why) {
  const char *no = NULL;
  int rc = 0;
  /* An SRQ's buffers are shared by every QP on it: whose endpoint a receive belongs to, and who
   * gives its buffers back, would be another design. */
  if (q->srq)
    rc = -EOPNOTSUPP, no = "the queue pair takes its receives from a shared receive queue (SRQ), "
                           "which nicmalloc does not fill; give it a receive queue of its own";
  /* UD puts a 40-byte GRH before each datagram and XRC receives through an SRQ. */
  else if (q->qp_type != IBV_QPT_RC && q->qp_type != IBV_QPT_UC)
    rc = -EOPNOTSUPP, no = "only RC and UC queue pairs can receive through nicmalloc";
  else if (!q->recv_cq || !q->max_recv_wr || !q->max_recv_sge)
    rc = -EINVAL, no = "the queue pair has no receive queue (max_recv_wr, max_recv_sge) or CQ";
  /* poll() takes every completion of a send CQ as one of its sends. */
  else if (q->recv_cq_is_send)
    rc = -EINVAL, no = "the queue pair's receive CQ is a send CQ of a nicmalloc endpoint; give "
                       "its receives a CQ of their own";
  else if (q->state == IBV_QPS_RESET)
    rc = -EINVAL, no = "the queue pair is in RESET, where receives cannot be posted; move it to "
                       "INIT first";
  else if (q->state == IBV_QPS_ERR)
    rc = -ENOTCONN, no = "the queue pair is in the error state";
  if (why) *why = no;
  if (!rc && count)
    *count = q->max_recv_wr < NIC_VERBS_RX_BUFS ? q->max_recv_wr : NIC_VERBS_RX_BUFS;
  return rc;
}

size_t nic_verbs_rx_ring_bytes(unsigned count) {
  return sizeof(struct nic_verbs_rx) + (size_t)count * sizeof(struct nic_verbs_rx_buf);
}

size_t nic_verbs_rx_block_bytes(unsigned count) {
  return (size_t)count * NIC_VERBS_RX_BUF_BYTES;
}

/* Each buffer starts on a page of its own: a hold on one (counted per page) never keeps another. */
_Static_assert(NIC_VERBS_RX_BUF_BYTES % NIC_VERBS_RX_ALIGN == 0, "buffers must be whole pages");

int nic_verbs_rx_init(struct nic_verbs_rx *r, void *block, unsigned count) {
  if (!r || !block || !count || count > NIC_VERBS_RX_BUFS || (uintptr_t)block % NIC_VERBS_RX_ALIGN)
    return -EINVAL;
  memset(r, 0, nic_verbs_rx_ring_bytes(count));
  r->block = block;
  r->buf_bytes = NIC_VERBS_RX_BUF_BYTES;
  r->count = count;
  for (unsigned i = 0; i < count; i++)
    r->bufs[i] = (struct nic_verbs_rx_buf){.ring = r, .index = i, .state = NIC_VERBS_RX_IDLE};
  return 0;
}

void nic_verbs_rx_posted(struct nic_verbs_rx *r, unsigned i) {
  r->bufs[i].state = NIC_VERBS_RX_POSTED;
  r->posted++;
  r->stall_said = false; /* a later stall is a new one */
}

enum nic_verbs_rx_event nic_verbs_rx_complete(struct nic_verbs_rx *r, unsigned i, int status) {
  if (i >= r->count || r->bufs[i].state != NIC_VERBS_RX_POSTED) return NIC_VERBS_RX_NONE;
  struct nic_verbs_rx_buf *b = &r->bufs[i];
  r->posted--;
  /* After an error the QP flushes every other receive; after the end, nothing is reported. */
  if (status || r->ended) {
    b->state = NIC_VERBS_RX_IDLE;
    if (r->ended) return NIC_VERBS_RX_NONE;
    r->ended = true;
    r->end_status = status;
    return NIC_VERBS_RX_FINAL;
  }
  b->state = NIC_VERBS_RX_OUT;
  r->out++;
  return NIC_VERBS_RX_DELIVER;
}

void nic_verbs_rx_queue(struct nic_verbs_rx *r, unsigned i, uint32_t len) {
  r->bufs[i].len = len;
  r->q[(r->q_head + r->queued++) % NIC_VERBS_RX_BUFS] = (uint8_t)i;
}

static bool stall_pending(const struct nic_verbs_rx *r) {
  return !r->ended && !r->posted && r->out && !r->stall_said;
}

bool nic_verbs_rx_stall_due(struct nic_verbs_rx *r) {
  if (!stall_pending(r)) return false;
  r->stall_said = true;
  return true;
}

bool nic_verbs_rx_news_due(const struct nic_verbs_rx *r) {
  return r->queued || (r->ended && !r->end_said) || stall_pending(r);
}

enum nic_verbs_rx_news nic_verbs_rx_next(struct nic_verbs_rx *r, unsigned *i, uint32_t *len,
                                         int *status) {
  *i = 0;
  *len = 0;
  *status = 0;
  if (r->queued) {
    *i = r->q[r->q_head];
    *len = r->bufs[*i].len;
    r->q_head = (r->q_head + 1) % NIC_VERBS_RX_BUFS;
    r->queued--;
    return NIC_VERBS_RX_MESSAGE;
  }
  if (r->ended && !r->end_said) {
    r->end_said = true;
    *status = r->end_status ? r->end_status : -EIO;
    return NIC_VERBS_RX_END;
  }
  if (nic_verbs_rx_stall_due(r)) {
    *status = -ENOBUFS;
    return NIC_VERBS_RX_STALL;
  }
  return NIC_VERBS_RX_NO_NEWS;
}

enum nic_verbs_rx_recycle nic_verbs_rx_recycle(struct nic_verbs_rx *r, uint64_t token) {
  if (token >= r->count || r->bufs[token].state != NIC_VERBS_RX_OUT) return NIC_VERBS_RX_BAD_TOKEN;
  struct nic_verbs_rx_buf *b = &r->bufs[token];
  r->out--;
  b->state = NIC_VERBS_RX_IDLE;
  return r->ended ? NIC_VERBS_RX_KEEP : NIC_VERBS_RX_REPOST;
}

enum nic_verbs_rx_event nic_verbs_rx_repost_failed(struct nic_verbs_rx *r, unsigned i, int status) {
  r->bufs[i].state = NIC_VERBS_RX_IDLE;
  /* With nothing posted no completion will come to end receiving: this failure ends it. */
  if (r->ended || r->posted) return NIC_VERBS_RX_NONE;
  r->ended = true;
  r->end_status = status;
  return NIC_VERBS_RX_FINAL;
}
