/* The verbs backend's receive buffers (verbs_rx.c): which queue pairs it can receive on, how a
 * dataplane block is carved into buffers, the life of each buffer (posted on the QP's receive
 * queue, waiting to be told, out with the program, back), and what the receiver is to be told
 * next (messages in the order they came, then the end, or a stall). No rdma-core call is made
 * here: verbs.c makes them and follows what this says, so all of it is tested without a device
 * (tests/regcache/test_verbs_rx.cc). The caller serialises calls on one ring. */
#ifndef NIC_VERBS_RX_H
#define NIC_VERBS_RX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NIC_VERBS_RX_BUFS 32 /* at most, per endpoint (fewer if the RQ is short) */
#define NIC_VERBS_RX_BUF_BYTES ((size_t)64 << 10) /* a longer message ends receiving: -EMSGSIZE */
#define NIC_VERBS_RX_ALIGN ((size_t)4096)         /* holds count per 4 KiB page (receive.c) */

/* What verbs.c learns of a queue pair (ibv_query_qp) and its endpoint. */
struct nic_verbs_rx_qp {
  int qp_type;          /* enum ibv_qp_type */
  int state;            /* enum ibv_qp_state */
  bool srq;             /* it takes its receives from a shared receive queue */
  bool recv_cq;         /* it has a receive CQ */
  bool recv_cq_is_send; /* that CQ is one a nicmalloc endpoint polls for sends */
  uint32_t max_recv_wr; /* its receive queue's depth */
  uint32_t max_recv_sge;
};

/* 0 and the number of buffers to give the QP, or -errno with why (a static string): -EOPNOTSUPP
 * (a shared receive queue; a QP type other than RC or UC), -EINVAL (no receive queue or CQ, a
 * receive CQ shared with sends, a QP still in RESET), -ENOTCONN (a QP in the error state). */
int nic_verbs_rx_check(const struct nic_verbs_rx_qp *q, unsigned *count, const char **why);

enum nic_verbs_rx_state { NIC_VERBS_RX_IDLE = 0, NIC_VERBS_RX_POSTED, NIC_VERBS_RX_OUT };

struct nic_verbs_rx;
/* One buffer; the address of it is the receive's wr_id. */
struct nic_verbs_rx_buf {
  struct nic_verbs_rx *ring;
  uint32_t index; /* the token handed to the layer above */
  uint32_t len;   /* what its completion wrote, while it waits to be told */
  uint8_t state;  /* enum nic_verbs_rx_state */
};

struct nic_verbs_rx {
  char *block; /* page-aligned, count * buf_bytes long */
  size_t buf_bytes;
  unsigned count, posted, out; /* out: with the program, or waiting to be told */
  bool stall_said;             /* this stall was told; cleared when a buffer is posted again */
  bool ended;      /* receiving ended (end_status): nothing is posted or queued after it */
  bool end_said;   /* the end was told: nothing is told after it */
  bool delivering; /* a thread tells the receiver (verbs.c): no other thread does meanwhile */
  int end_status;
  /* Buffers waiting to be told, in the order their completions came: each is out, so it is
   * here at most once. */
  unsigned q_head, queued;
  uint8_t q[NIC_VERBS_RX_BUFS];
  struct nic_verbs_rx_buf bufs[];
};

/* Bytes of the ring itself (control memory) and of the block it carves (dataplane). */
size_t nic_verbs_rx_ring_bytes(unsigned count);
size_t nic_verbs_rx_block_bytes(unsigned count);
/* Carves block (page-aligned, nic_verbs_rx_block_bytes long) into count idle buffers. -EINVAL for
 * a block not page-aligned or a count of 0 or over NIC_VERBS_RX_BUFS. */
int nic_verbs_rx_init(struct nic_verbs_rx *r, void *block, unsigned count);
static inline void *nic_verbs_rx_addr(const struct nic_verbs_rx *r, unsigned i) {
  return r->block + (size_t)i * r->buf_bytes;
}

/* The buffer was posted on the receive queue (ibv_post_recv said 0). */
void nic_verbs_rx_posted(struct nic_verbs_rx *r, unsigned i);

enum nic_verbs_rx_event {
  NIC_VERBS_RX_NONE = 0, /* nothing to tell the layer above */
  NIC_VERBS_RX_DELIVER,  /* the buffer holds a message: out until recycled (queue it) */
  NIC_VERBS_RX_FINAL,    /* receiving ended with this status, kept to be told once */
};
/* A completion of buffer i, status 0 or -errno (flushed, too long...). */
enum nic_verbs_rx_event nic_verbs_rx_complete(struct nic_verbs_rx *r, unsigned i, int status);
/* Buffer i (DELIVER) holds a message of len bytes for the receiver: it waits behind the others. */
void nic_verbs_rx_queue(struct nic_verbs_rx *r, unsigned i, uint32_t len);
/* After a delivery: true once when every buffer is out (the endpoint stalls: -ENOBUFS). */
bool nic_verbs_rx_stall_due(struct nic_verbs_rx *r);

enum nic_verbs_rx_news {
  NIC_VERBS_RX_NO_NEWS = 0,
  NIC_VERBS_RX_MESSAGE, /* buffer *i, *len bytes */
  NIC_VERBS_RX_END,     /* receiving ended: *status; nothing follows */
  NIC_VERBS_RX_STALL,   /* every buffer is out: *status -ENOBUFS */
};
/* What the receiver is to be told next, taken off the books: the queued messages first, in
 * order, then the end, or else a stall. */
enum nic_verbs_rx_news nic_verbs_rx_next(struct nic_verbs_rx *r, unsigned *i, uint32_t *len,
                                         int *status);
/* Whether nic_verbs_rx_next has something to tell (it changes nothing). */
bool nic_verbs_rx_news_due(const struct nic_verbs_rx *r);

enum nic_verbs_rx_recycle {
  NIC_VERBS_RX_REPOST = 0, /* post it again, then nic_verbs_rx_posted (or _repost_failed) */
  NIC_VERBS_RX_KEEP,       /* receiving ended: the buffer stays idle */
  NIC_VERBS_RX_BAD_TOKEN,  /* not a buffer that is out: nothing changed */
};
/* Buffer token comes back from the layer above. */
enum nic_verbs_rx_recycle nic_verbs_rx_recycle(struct nic_verbs_rx *r, uint64_t token);
/* ibv_post_recv refused it with status (-errno; the QP broke meanwhile): it stays idle. FINAL
 * when no buffer is posted any more (no completion would come to end receiving: the end, with
 * status, is kept to be told), else NONE. */
enum nic_verbs_rx_event nic_verbs_rx_repost_failed(struct nic_verbs_rx *r, unsigned i, int status);

/* Buffers with the program, and ones the NIC still has. */
static inline bool nic_verbs_rx_out(const struct nic_verbs_rx *r) {
  return r->out != 0;
}
static inline bool nic_verbs_rx_posted_any(const struct nic_verbs_rx *r) {
  return r->posted != 0;
}

#ifdef __cplusplus
}
#endif
#endif
