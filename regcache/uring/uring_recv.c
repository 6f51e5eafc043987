/* Receiving on an io_uring endpoint (backend.h endpoint_receive, rx_recycle).
 *
 * Each receiving endpoint has a ring of provided buffers (io_uring_register_buf_ring) carved
 * from one dataplane block, page-aligned so that a nic_hold on one buffer keeps no other, and
 * one multishot receive (IORING_RECV_MULTISHOT, IOSQE_BUFFER_SELECT) on its socket: the kernel
 * picks a buffer per message (a datagram, or what a stream had ready, up to a buffer) and posts
 * a CQE naming it. A buffer is out from that CQE until rx_recycle puts it back in the ring.
 *
 * Delivery: CQEs are reaped under the backend lock, but the receiver runs program code (which
 * posts, holds, recycles: all take the lock), so the reaping side only queues each message on
 * its endpoint, and poll() hands the queue over unlocked. One thread at a time delivers an
 * endpoint's queue, so a stream's pieces reach the receiver in the socket's order whichever
 * threads poll.
 *
 * The multishot receive ends, without IORING_CQE_F_MORE, for these reasons:
 *  - every buffer is out (-ENOBUFS): the endpoint is stalled and the transport pushes back (TCP
 *    closes its window; the socket drops datagrams past its buffer). Said to the receiver as
 *    status -ENOBUFS once the buffers are all with it (not while some wait to be delivered);
 *    the next rx_recycle submits the receive again;
 *  - cancelled (-ECANCELED): io_uring cancels a request when the thread that submitted it
 *    exits; the receive goes again from whichever thread reaps, unless that keeps happening;
 *  - the kernel's own reasons (a full CQ ring, say) with a message: it goes again;
 *  - the end of a stream (0 on TCP: status 1) or an error (-errno): final, said after the
 *    messages queued before it; but on a datagram socket an ICMP error for an earlier send
 *    (ECONNREFUSED from a peer not listening yet, EHOSTUNREACH...) is reported once by the
 *    receive and the socket goes on: said once on stderr, and the receive goes again.
 * A UDP datagram of 0 bytes takes no buffer (the kernel gives it back and names none): it is
 * queued as a message without one, handed over as 0 bytes at the receive area's start, and its
 * token names no buffer. Past twice as many waiting as there are buffers, one is dropped
 * (recv_empty_dropped, said once): the queue keeps room for a message in every buffer besides.
 * A datagram longer than a buffer is received with MSG_TRUNC, so the kernel reports its real
 * length: it is dropped (counted in recv_truncated, said once), never handed over cut.
 *
 * Stopping (endpoint close): -EBUSY while a buffer is with the program or its receiver runs
 * (from here; a message it handed over that waited in the receive layer for the cap on held
 * bytes, an end call or an empty datagram too, is handed over from there later, and that layer
 * answers -EBUSY for it before the close comes here: safety/receive.c); otherwise the receive is
 * cancelled and its last CQE awaited (bounded: a receive that does not end in time leaves the
 * endpoint receiving nothing and closable by a later call), then the ring is unregistered and the
 * block freed. Messages that come meanwhile wait, undelivered: a post that came while the close
 * waited (it lets go of the lock) makes it -EBUSY, and the endpoint goes on receiving, those
 * messages first; else they go with the ring. A child of fork shares the ring with its parent and
 * never polls it (the backend is marked the parent's, cache/backend.c): it receives none of the
 * parent's messages. */
#define _GNU_SOURCE
#include "uring_internal.h"

#include "alloc.h"
#include "chunks.h"
#include "log.h"
#include "nocancel.h"
#include "settings.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define PAGE 4096ul
#define MAX_CANCELS 16           /* cancelled this often in a row with nothing received: end */
#define STOP_WAIT_NS 2000000000  /* how long a close waits for the cancelled receive to end */
#define CANCEL_AGAIN_NS 50000000 /* a receive the cancel missed (not yet armed): cancel again */

/* What the receiver is to be told next: a message in buffer bid, or an empty datagram. */
struct rx_msg {
  uint32_t bid, len;
};
#define EMPTY_BID UINT32_MAX
#define EMPTY_TOKEN UINT64_MAX
#define EMPTIES_PER_BUFFER 2 /* empty datagrams that may wait, per buffer */

struct uring_rx {
  struct nic_endpoint *ep;
  nic_endpoint_rx_fn fn;
  void *arg;
  struct io_uring_buf_ring *br;
  size_t br_bytes;
  unsigned entries; /* of the ring: count rounded up to a power of two */
  char *block;
  size_t stride; /* bytes of a buffer, whole pages */
  unsigned count;
  uint16_t bgid;
  unsigned out;     /* buffers the kernel filled that are not back in the ring */
  unsigned queued;  /* messages waiting in q for the receiver */
  unsigned empties; /* of those, empty datagrams (no buffer) */
  unsigned q_head;
  struct rx_msg *q;  /* q_slots(): each buffer once, and as many empties as are let wait */
  uint64_t *out_map; /* bit set = buffer out: a token rx_recycle may give back */
  int end_status;    /* 1 or -errno once the receive ended for good */
  unsigned cancels;  /* -ECANCELED in a row */
  bool armed;        /* the multishot receive is in the kernel */
  bool stalled;      /* ended with -ENOBUFS: rx_recycle submits it again */
  bool stall_said;   /* the receiver was told of this stall */
  bool end_said;     /* the receiver was told of the end */
  bool closing;      /* the endpoint is being closed: nothing more is delivered */
  bool cancel_sent;  /* the close's cancel is in the kernel */
  bool delivering;   /* a thread runs the receiver (uring_rx_deliver) */
  bool ready;        /* on ub->rx_ready */
  bool rearm;        /* a submission is owed (the queue was full) */
  struct uring_rx *ready_next, *all_next;
};

static unsigned q_slots(const struct uring_rx *rx) {
  return (1 + EMPTIES_PER_BUFFER) * rx->count;
}

static uint64_t rx_user_data(const struct uring_rx *rx) {
  return (uint64_t)(uintptr_t)rx | URING_UD_RECV;
}

static char *buffer(const struct uring_rx *rx, unsigned bid) {
  return rx->block + (size_t)bid * rx->stride;
}

/* At the tail: endpoints take turns at the poll()s. */
static void mark_ready_locked(struct uring_backend *ub, struct uring_rx *rx) {
  if (rx->ready || rx->delivering) return; /* a deliverer looks again before it stops */
  rx->ready = true;
  rx->ready_next = NULL;
  if (ub->rx_ready)
    ub->rx_ready_tail->ready_next = rx;
  else
    __atomic_store_n(&ub->rx_ready, rx, __ATOMIC_RELAXED); /* poll() peeks at it unlocked */
  ub->rx_ready_tail = rx;
  nic_uring_work_signal_locked(ub); /* the event fd says poll() has something to hand over */
}

static struct uring_rx *pop_ready_locked(struct uring_backend *ub) {
  struct uring_rx *rx = ub->rx_ready;
  if (!rx) return NULL;
  __atomic_store_n(&ub->rx_ready, rx->ready_next, __ATOMIC_RELAXED);
  rx->ready = false;
  return rx;
}

static void unlink_ready_locked(struct uring_backend *ub, struct uring_rx *rx) {
  if (!rx->ready) return;
  struct uring_rx *prev = NULL;
  for (struct uring_rx *at = ub->rx_ready; at && at != rx; at = at->ready_next)
    prev = at;
  if (prev)
    prev->ready_next = rx->ready_next;
  else
    __atomic_store_n(&ub->rx_ready, rx->ready_next, __ATOMIC_RELAXED);
  if (ub->rx_ready_tail == rx) ub->rx_ready_tail = prev;
  rx->ready = false;
}

/* The buffer goes back into the ring, for the kernel to fill again. */
static void put_back_locked(struct uring_rx *rx, unsigned bid) {
  rx->out_map[bid / 64] &= ~(1ull << (bid % 64));
  io_uring_buf_ring_add(rx->br, buffer(rx, bid), (unsigned)rx->stride, (unsigned short)bid,
                        io_uring_buf_ring_mask(rx->entries), 0);
  io_uring_buf_ring_advance(rx->br, 1);
  rx->out--;
}

/* Queues the multishot receive for submission (the caller submits, or poll() does). */
static void arm_locked(struct uring_backend *ub, struct uring_rx *rx) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&ub->ring);
  if (!sqe) {
    io_uring_submit(&ub->ring); /* others' entries fill the queue: push them out */
    sqe = io_uring_get_sqe(&ub->ring);
  }
  if (!sqe) {
    rx->rearm = true;
    __atomic_store_n(&ub->rx_rearm, true, __ATOMIC_RELAXED); /* poll() peeks at it unlocked */
    return;
  }
  const struct nic_endpoint *ep = rx->ep;
  /* MSG_TRUNC: a datagram's real length, so that one cut short is seen. On a stream it would
   * throw the bytes away. */
  io_uring_prep_recv_multishot(sqe, ep->file >= 0 ? ep->file : ep->fd, NULL, 0,
                               ep->dgram ? MSG_TRUNC : 0);
  sqe->flags |= IOSQE_BUFFER_SELECT | (ep->file >= 0 ? IOSQE_FIXED_FILE : 0);
  sqe->buf_group = rx->bgid;
  sqe->user_data = rx_user_data(rx);
  rx->armed = true;
  rx->stalled = rx->stall_said = rx->rearm = false;
}

static void rearm_locked(struct uring_backend *ub, struct uring_rx *rx) {
  ub->stats.recv_rearms++;
  arm_locked(ub, rx);
}

static void end_locked(struct uring_backend *ub, struct uring_rx *rx, int status) {
  rx->end_status = status;
  mark_ready_locked(ub, rx);
}

/* A buffer the kernel filled: queued for the receiver, or straight back into the ring. */
static void got_buffer_locked(struct uring_backend *ub, struct uring_rx *rx, unsigned bid,
                              int res) {
  if (bid >= rx->count) return; /* not one of ours: the kernel names only what the ring held */
  rx->out++;
  rx->out_map[bid / 64] |= 1ull << (bid % 64);
  const bool message = res > 0 || (res == 0 && rx->ep->dgram);
  if ((size_t)res > rx->stride && message) {
    ub->stats.recv_truncated++;
    nic_log_warn_once("uring receive: a datagram of %d bytes is longer than a receive buffer "
                      "(%zu, NICMALLOC_RECV_BUFFER_SIZE): dropped, not handed out cut",
                      res, rx->stride);
  }
  /* A full queue cannot be (got_empty_locked keeps room for every buffer); written anyway, the
   * slot would be the oldest message's, handed over in the wrong place and given back twice. */
  const bool full = rx->queued == q_slots(rx);
  if (full && message) nic_log_warn_once("uring receive: no room to queue a message: dropped");
  if (!message || (size_t)res > rx->stride || full) {
    put_back_locked(rx, bid);
    return;
  }
  rx->q[(rx->q_head + rx->queued) % q_slots(rx)] = (struct rx_msg){bid, (uint32_t)res};
  rx->queued++;
  rx->cancels = 0;
  mark_ready_locked(ub, rx);
}

static void got_empty_locked(struct uring_backend *ub, struct uring_rx *rx) {
  if (rx->empties == EMPTIES_PER_BUFFER * rx->count) {
    ub->stats.recv_empty_dropped++;
    nic_log_warn_once("uring receive: an empty datagram came while %u empty ones wait for the "
                      "program's poll: dropped",
                      rx->empties);
    return;
  }
  rx->q[(rx->q_head + rx->queued) % q_slots(rx)] = (struct rx_msg){EMPTY_BID, 0};
  rx->queued++;
  rx->empties++;
  mark_ready_locked(ub, rx);
}

/* What a UDP socket's receive reports of ICMP errors: once each, the socket goes on. */
static bool icmp_error(int res) {
  return res == -ECONNREFUSED || res == -EHOSTUNREACH || res == -ENETUNREACH || res == -EHOSTDOWN ||
         res == -ENETDOWN || res == -EPROTO || res == -EMSGSIZE;
}

bool nic_uring_rx_cqe_locked(struct uring_backend *ub, const struct io_uring_cqe *cqe) {
  const uint64_t tag = cqe->user_data & URING_UD_TAGS;
  if (tag == URING_UD_QUIET) return true;
  if (tag != URING_UD_RECV) return false;
  struct uring_rx *rx = (struct uring_rx *)(uintptr_t)(cqe->user_data & ~(uint64_t)URING_UD_TAGS);
  const int res = cqe->res;
  const bool more = cqe->flags & IORING_CQE_F_MORE;
  if (!more) rx->armed = false;
  if (cqe->flags & IORING_CQE_F_BUFFER)
    got_buffer_locked(ub, rx, cqe->flags >> IORING_CQE_BUFFER_SHIFT, res);
  else if (res == 0 && rx->ep->dgram)
    got_empty_locked(ub, rx);
  if (more || rx->closing || rx->end_status) return true;
  if (res > 0 || (res == 0 && rx->ep->dgram)) {
    rearm_locked(ub, rx); /* ended for the kernel's own reasons, with a message */
  } else if (res == 0) {
    end_locked(ub, rx, 1); /* the peer ended the stream */
  } else if (res == -ENOBUFS) {
    if (rx->out < rx->count) {
      rearm_locked(ub, rx); /* a buffer came back meanwhile; its rx_recycle saw us armed */
    } else {
      rx->stalled = true;
      if (!rx->queued) mark_ready_locked(ub, rx); /* else said once the queue is delivered */
    }
  } else if (res == -ECANCELED && ++rx->cancels < MAX_CANCELS) {
    rearm_locked(ub, rx); /* its thread exited */
  } else if (rx->ep->dgram && icmp_error(res)) {
    /* An ICMP error for an earlier send, reported once by the next receive: the peer not
     * listening yet, say. Later datagrams still come. */
    nic_log_warn_once("uring receive: a datagram socket reported %s (an ICMP error for an "
                      "earlier send); it goes on receiving",
                      strerror(-res));
    rearm_locked(ub, rx);
  } else {
    end_locked(ub, rx, res);
  }
  return true;
}

/* What rx's receiver is to be told next, taken off rx: a message (true, *data set), a stall or
 * the end (true, *data NULL, *status), or nothing (false). */
static bool next_locked(struct uring_rx *rx, void **data, size_t *len, int *status,
                        uint64_t *token) {
  *data = NULL;
  *len = 0;
  *token = 0;
  if (rx->closing) return false;
  if (rx->queued) {
    const struct rx_msg m = rx->q[rx->q_head];
    rx->q_head = (rx->q_head + 1) % q_slots(rx);
    rx->queued--;
    const bool empty = m.bid == EMPTY_BID;
    rx->empties -= empty;
    *data = buffer(rx, empty ? 0 : m.bid);
    *len = m.len;
    *status = 0;
    *token = empty ? EMPTY_TOKEN : m.bid;
    return true;
  }
  if (rx->end_status && !rx->end_said) {
    rx->end_said = true;
    *status = rx->end_status;
    return true;
  }
  if (rx->stalled && !rx->armed && !rx->stall_said) {
    rx->stall_said = true;
    *status = -ENOBUFS;
    return true;
  }
  return false;
}

void nic_uring_rx_rearm_locked(struct uring_backend *ub) {
  if (!ub->rx_rearm) return;
  __atomic_store_n(&ub->rx_rearm, false, __ATOMIC_RELAXED);
  for (struct uring_rx *rx = ub->rx_all; rx; rx = rx->all_next)
    if (rx->rearm && !rx->closing) arm_locked(ub, rx);
  if (io_uring_sq_ready(&ub->ring)) io_uring_submit(&ub->ring);
}

int nic_uring_rx_deliver(struct uring_backend *ub) {
  if (!__atomic_load_n(&ub->rx_ready, __ATOMIC_RELAXED) &&
      !__atomic_load_n(&ub->rx_rearm, __ATOMIC_RELAXED))
    return 0;
  int calls = 0;
  pthread_mutex_lock(&ub->lock);
  nic_uring_rx_rearm_locked(ub);
  /* One endpoint at a time off the list, under the lock: a close may take one off meanwhile. A
   * bounded number of turns, as endpoints with more to say go back at the tail. */
  for (unsigned turn = 0; turn < 64; turn++) {
    struct uring_rx *rx = pop_ready_locked(ub);
    if (!rx) break;
    rx->delivering = true;
    /* Bounded, so that a thread that polls returns while others keep the queue full; what is
     * left is put back on the ready list for the next poll. */
    for (unsigned n = 0;; n++) {
      void *data;
      size_t len;
      int status;
      uint64_t token;
      if (n >= rx->count + 2 || !next_locked(rx, &data, &len, &status, &token)) break;
      if (data) ub->stats.recv_messages++;
      pthread_mutex_unlock(&ub->lock);
      rx->fn(rx->arg, data, len, status, token);
      calls++;
      pthread_mutex_lock(&ub->lock);
    }
    rx->delivering = false;
    if (!rx->closing && (rx->queued || (rx->end_status && !rx->end_said) ||
                         (rx->stalled && !rx->armed && !rx->stall_said)))
      mark_ready_locked(ub, rx);
  }
  if (!ub->rx_ready && !ub->ready.head) nic_uring_work_clear_locked(ub);
  pthread_mutex_unlock(&ub->lock);
  return calls;
}

void nic_uring_rx_recycle(struct nic_backend *b, struct nic_endpoint *ep, uint64_t token) {
  if (token == EMPTY_TOKEN) return; /* an empty datagram: no buffer to give back */
  struct uring_backend *ub = uring_of(b);
  pthread_mutex_lock(&ub->lock);
  struct uring_rx *rx = ep ? ep->rx : NULL;
  const bool out = rx && token < rx->count && (rx->out_map[token / 64] >> (token % 64) & 1);
  if (out) {
    put_back_locked(rx, (unsigned)token);
    if (rx->stalled && !rx->armed && !rx->closing && !rx->end_status) {
      rearm_locked(ub, rx);
      if (io_uring_sq_ready(&ub->ring)) io_uring_submit(&ub->ring);
    }
  }
  pthread_mutex_unlock(&ub->lock);
  if (!out)
    nic_log_warn_once("uring receive: a buffer given back twice, or not one of the endpoint's "
                      "(token %llu): ignored",
                      (unsigned long long)token);
}

void nic_uring_rx_free(struct uring_rx *rx) {
  if (!rx) return;
  if (rx->br) munmap(rx->br, rx->br_bytes);
  if (rx->block) nic_free_named(rx->block, "uring receive");
  free(rx);
}

static unsigned pow2_at_least(unsigned n) {
  unsigned p = 1;
  while (p < n)
    p <<= 1;
  return p;
}

/* A provided-buffer group id no ring of this io_uring has: the kernel refuses a taken one. */
static int register_ring_locked(struct uring_backend *ub, struct uring_rx *rx) {
  for (unsigned tries = 0; tries <= UINT16_MAX; tries++) {
    struct io_uring_buf_reg reg = {
        .ring_addr = (uintptr_t)rx->br, .ring_entries = rx->entries, .bgid = ub->next_bgid};
    const int rc = io_uring_register_buf_ring(&ub->ring, &reg, 0);
    rx->bgid = ub->next_bgid++;
    if (rc != -EEXIST) return rc;
  }
  return -ENOSPC;
}

size_t nic_uring_rx_buffer_bytes(void) {
  return (nic_setting_number(NIC_S_RECV_BUFFER_SIZE) + PAGE - 1) & ~(PAGE - 1); /* 4K to 16M */
}

int nic_uring_endpoint_receive(struct nic_backend *b, struct nic_endpoint *ep,
                               nic_endpoint_rx_fn fn, void *arg) {
  struct uring_backend *ub = uring_of(b);
  if (!ep || ep->ub != ub || !fn) return -EINVAL;
  const unsigned count = (unsigned)nic_setting_number(NIC_S_RECV_BUFFERS); /* 1 to 32768 */
  const size_t stride = nic_uring_rx_buffer_bytes();
  const size_t words = (count + 63) / 64;
  struct uring_rx *rx =
      calloc(1, sizeof *rx + (1 + EMPTIES_PER_BUFFER) * (size_t)count * sizeof(struct rx_msg) +
                    words * sizeof(uint64_t));
  if (!rx) return -ENOMEM;
  rx->out_map = (uint64_t *)(rx + 1);
  rx->q = (struct rx_msg *)(rx->out_map + words);
  *rx = (struct uring_rx){.ep = ep,
                          .fn = fn,
                          .arg = arg,
                          .entries = pow2_at_least(count),
                          .stride = stride,
                          .count = count,
                          .out_map = rx->out_map,
                          .q = rx->q};
  rx->br_bytes = (rx->entries * sizeof(struct io_uring_buf) + PAGE - 1) & ~(PAGE - 1);
  void *br = mmap(NULL, rx->br_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  rx->br = br == MAP_FAILED ? NULL : br;
  /* The kernel writes the messages there: dataplane memory, which the program may post from
   * without a copy. A block the dataplane could not give is refused, not used. */
  rx->block = rx->br ? nic_alloc(count * stride, PAGE, false, NIC_ROUTE_DATAPLANE) : NULL;
  if (rx->block && !nic_in_dp(rx->block)) {
    nic_free_named(rx->block, "uring receive");
    rx->block = NULL;
  }
  if (!rx->block) {
    /* The caller's error is ENOMEM; this is why, when the cause is the settings. */
    const size_t chunk = nic_dp_reserved_span() ? (size_t)1 << nic_dp.shift : 0;
    if (rx->br && chunk && (size_t)count * stride > chunk)
      nic_log_warn_once("uring receive: %u buffers of %zu bytes (NICMALLOC_RECV_BUFFERS, "
                        "NICMALLOC_RECV_BUFFER_SIZE) are one dataplane block of %zu bytes, "
                        "more than a chunk holds (%zu): no endpoint can receive",
                        count, stride, (size_t)count * stride, chunk);
    nic_uring_rx_free(rx);
    return -ENOMEM;
  }
  pthread_mutex_lock(&ub->lock);
  int rc = ep->rx ? -EALREADY : register_ring_locked(ub, rx);
  if (rc == 0) {
    io_uring_buf_ring_init(rx->br);
    for (unsigned i = 0; i < count; i++)
      io_uring_buf_ring_add(rx->br, buffer(rx, i), (unsigned)stride, (unsigned short)i,
                            io_uring_buf_ring_mask(rx->entries), (int)i);
    io_uring_buf_ring_advance(rx->br, (int)count);
    ep->rx = rx;
    rx->all_next = ub->rx_all;
    ub->rx_all = rx;
    arm_locked(ub, rx);
    if (io_uring_sq_ready(&ub->ring)) io_uring_submit(&ub->ring);
  }
  pthread_mutex_unlock(&ub->lock);
  if (rc) nic_uring_rx_free(rx);
  return rc;
}

static void cancel_locked(struct uring_backend *ub, struct uring_rx *rx) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&ub->ring);
  if (!sqe) {
    io_uring_submit(&ub->ring);
    sqe = io_uring_get_sqe(&ub->ring);
  }
  if (!sqe) return; /* the next round tries again */
  io_uring_prep_cancel64(sqe, rx_user_data(rx), 0);
  sqe->user_data = URING_UD_QUIET;
  rx->cancel_sent = true;
  io_uring_submit(&ub->ring);
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

void (*nic_uring_rx_stop_hook)(struct nic_endpoint *ep);

/* A close that stopped the receive, then found a post that came while it waited: the endpoint
 * stays, and receives as before. A final status the receive gave meanwhile was not kept; the
 * receive submitted again finds it again (a stream's end, say). */
static void reopen_locked(struct uring_backend *ub, struct uring_rx *rx) {
  rx->closing = rx->cancel_sent = false;
  if (!rx->end_status) {
    rearm_locked(ub, rx);
    if (io_uring_sq_ready(&ub->ring)) io_uring_submit(&ub->ring);
  }
  if (rx->queued || (rx->end_status && !rx->end_said)) mark_ready_locked(ub, rx);
}

int nic_uring_rx_stop_locked(struct uring_backend *ub, struct nic_endpoint *ep,
                             struct uring_rx **out) {
  struct uring_rx *rx = ep->rx;
  *out = NULL;
  if (!rx) return 0;
  if (rx->delivering || rx->out > rx->queued - rx->empties) return -EBUSY; /* with the program */
  rx->closing = true; /* from here on nothing is delivered, nothing submitted again */
  rx->rearm = false;
  /* Its last CQE names rx: until it is reaped rx must stay, and the kernel may still write
   * into the block. */
  for (int64_t start = now_ns(), last = start; rx->armed;) {
    if (!rx->cancel_sent) {
      cancel_locked(ub, rx);
      last = now_ns();
      void (*hook)(struct nic_endpoint *) =
          __atomic_load_n(&nic_uring_rx_stop_hook, __ATOMIC_ACQUIRE);
      if (hook) {
        pthread_mutex_unlock(&ub->lock);
        hook(ep);
        pthread_mutex_lock(&ub->lock);
      }
    }
    nic_uring_reap_locked(ub);
    if (io_uring_sq_ready(&ub->ring)) io_uring_submit(&ub->ring);
    if (!rx->armed) break;
    const int64_t now = now_ns();
    if (now - last > CANCEL_AGAIN_NS) rx->cancel_sent = false; /* it may have found nothing yet */
    if (now - start > STOP_WAIT_NS) {
      rx->cancel_sent = false; /* the next close cancels again */
      nic_log_warn_once("uring receive: an endpoint's receive did not end within 2 s of its "
                        "cancellation; its destroy says -EBUSY until it has");
      return -EBUSY;
    }
    pthread_mutex_unlock(&ub->lock);
    /* The cancellation completes in the submitting thread's task work, which another thread's
     * return to user space runs: a pause, not a spin. */
    nic_pause_nocancel(20000);
    pthread_mutex_lock(&ub->lock);
  }
  if (ep->inflight) { /* posted while the lock was let go: the close cannot be */
    reopen_locked(ub, rx);
    return -EBUSY;
  }
  while (rx->queued) { /* never seen by the program */
    if (rx->q[rx->q_head].bid != EMPTY_BID) put_back_locked(rx, rx->q[rx->q_head].bid);
    rx->q_head = (rx->q_head + 1) % q_slots(rx);
    rx->queued--;
  }
  rx->empties = 0;
  io_uring_unregister_buf_ring(&ub->ring, rx->bgid);
  unlink_ready_locked(ub, rx);
  for (struct uring_rx **at = &ub->rx_all; *at; at = &(*at)->all_next)
    if (*at == rx) {
      *at = rx->all_next;
      break;
    }
  ep->rx = NULL;
  *out = rx;
  return 0;
}
