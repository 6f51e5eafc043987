/* Posting and completions.
 *
 * Order: io_uring does not keep two sends on one socket in order (one that finds the socket
 * full waits for POLLOUT while a later one may go first: measured), which would interleave
 * bytes on a stream. So each endpoint has at most one batch of sends in the kernel at a time,
 * linked (IOSQE_IO_LINK) so that they run one after another; posts arriving meanwhile wait in
 * the endpoint's backlog and go as the next batch once every send of the current one has
 * reported (its first CQE: the bytes are in the socket; the notification may come later).
 *
 * Sends cut short are resumed. Every send carries MSG_WAITALL, so the kernel itself keeps
 * sending until the message is queued, unless the send is cancelled or the connection fails.
 * Cancellation is ordinary: io_uring runs a send that waits for socket space in the task that
 * submitted it, and cancels it (reporting the bytes done) when that thread exits; a failed
 * link cancels the rest of its batch. So a post that comes back short, or -ECANCELED, goes back
 * into the backlog in post order and its remaining bytes are sent by the next batch, from
 * whichever thread polls. When a send fails outright the post completes with that error. The
 * endpoint is then broken, and every later post on it completes with -EPIPE unsent, if part of
 * the message had gone out (the peer holds a torn message) or the connection is gone
 * (-EPIPE, -ECONNRESET...: resending each queued post only to fail again is pointless).
 *
 * A datagram endpoint keeps the batches (posts stay in order) but is never resumed or broken:
 * each post is one datagram, sent whole or failed on its own.
 *
 * Nothing here waits for poll(): the backend's thread (uring_progress.c) reaps and submits the
 * next batches too, through nic_uring_advance_locked, so a reaping must never call the program.
 *
 * Completion: done(arg, status) runs from poll() once the post's final send has reported and
 * every notification (one per send that pinned memory, F_NOTIF) has arrived: only then does
 * the kernel hold no reference to the pages. Until then the slots count the post in flight and
 * dereg() says -EBUSY. status: 0 (every byte queued to the socket), -EFAULT (an entry outside
 * its registration: nothing was submitted), -EPIPE (broken endpoint) or the send's -errno.
 * MSG_NOSIGNAL: a dead peer is an error, not SIGPIPE.
 *
 * Cost: one mutex around every ring access and one io_uring_enter per post (and per poll that
 * resumes a batch): posting threads serialise on submission. A ring per thread would remove
 * that, at the price of reaping completions per thread. */
#define _GNU_SOURCE
#include "uring_internal.h"

#include <errno.h>
#include <limits.h>

#define SEND_FLAGS (MSG_WAITALL | MSG_NOSIGNAL)
#define MAX_CANCELS 16 /* a batch's first send cancelled this often in a row: give up */

static void kick_locked(struct uring_backend *ub, struct nic_endpoint *ep) {
  if (ep->kicked) return;
  ep->kicked = true;
  ep->kick_next = ub->kick;
  ub->kick = ep;
}

/* The kernel is done with the memory: release the slots, queue done() for poll(). */
static void finish_locked(struct uring_backend *ub, struct uring_req *req) {
  for (unsigned i = 0; i < req->n; i++)
    ub->slots[req->slot[i]].inflight--;
  if (req->ep) req->ep->inflight--;
  req->ep = NULL;
  if (req->status == -EFAULT && !req->n)
    ub->stats.protection_errors++;
  else if (req->status < 0)
    ub->stats.send_errors++;
  nic_uring_push(&ub->ready, req);
  nic_uring_work_signal_locked(ub);
}

/* No more sends for this post; it finishes once its last notification is in. */
static void end_sends_locked(struct uring_backend *ub, struct uring_req *req, int status) {
  req->status = status;
  req->sent = true;
  if (!req->notifs) finish_locked(ub, req);
}

static void advance(struct uring_req *req, size_t bytes) {
  req->off += bytes;
  while (bytes && req->first < req->n) {
    struct iovec *v = &req->iov[req->first];
    size_t step = bytes < v->iov_len ? bytes : v->iov_len;
    v->iov_base = (char *)v->iov_base + step;
    v->iov_len -= step;
    bytes -= step;
    if (!v->iov_len) req->first++;
  }
}

static void prep_send(struct uring_backend *ub, struct uring_req *req, struct io_uring_sqe *sqe) {
  int fd = req->ep->file >= 0 ? req->ep->file : req->ep->fd;
  unsigned first = req->first, left = req->n - first;
  unsigned zc_flags = ub->report_usage ? IORING_SEND_ZC_REPORT_USAGE : 0;
  if (req->copying) { /* copied into the socket at the send: no notification follows */
    req->msg = (struct msghdr){.msg_iov = &req->iov[first], .msg_iovlen = left};
    io_uring_prep_sendmsg(sqe, fd, &req->msg, SEND_FLAGS);
    req->fixed_vec = false;
    ub->stats.dgram_copied++;
  } else if (left == 1) {
    io_uring_prep_send_zc_fixed(sqe, fd, req->iov[first].iov_base, req->iov[first].iov_len,
                                SEND_FLAGS, zc_flags, req->slot[first]);
    /* The rest of a vectored send cut short: -ENOMEM here is no sendmsg's mapping (on_sent). */
    req->fixed_vec = false;
    ub->stats.send_zc_fixed++;
  } else {
    req->msg = (struct msghdr){.msg_iov = &req->iov[first], .msg_iovlen = left};
    io_uring_prep_sendmsg_zc(sqe, fd, &req->msg, SEND_FLAGS);
    sqe->ioprio |= zc_flags;
    bool one_slot = ub->vectored_fixed && !req->unfixed;
    for (unsigned i = first + 1; i < req->n && one_slot; i++)
      one_slot = req->slot[i] == req->slot[first];
    /* A fixed-buffer sendmsg names one buffer for all its iovecs. */
    req->fixed_vec = one_slot;
    if (one_slot) {
      sqe->ioprio |= IORING_RECVSEND_FIXED_BUF;
      sqe->buf_index = (__u16)req->slot[first];
      ub->stats.sendmsg_zc_fixed++;
    } else {
      ub->stats.sendmsg_zc_plain++;
    }
  }
  if (req->ep->file >= 0) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data(sqe, req);
}

/* Submits the endpoint's backlog as one linked batch, if none is out. */
static void flush_locked(struct uring_backend *ub, struct nic_endpoint *ep) {
  if (ep->sending || !ep->backlog.head) return;
  if (ep->broken) {
    for (struct uring_req *req; (req = nic_uring_pop(&ep->backlog));)
      end_sends_locked(ub, req, -EPIPE);
    return;
  }
  struct io_uring_sqe *prev = NULL;
  while (ep->backlog.head) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ub->ring);
    if (!sqe && !prev) {
      io_uring_submit(&ub->ring); /* the queue holds others' entries: push them out */
      sqe = io_uring_get_sqe(&ub->ring);
    }
    if (!sqe) { /* a chain cannot span two submissions: the rest is the next batch */
      if (!prev) kick_locked(ub, ep);
      break;
    }
    struct uring_req *req = nic_uring_pop(&ep->backlog);
    req->lead = !prev;
    prep_send(ub, req, sqe);
    if (prev) prev->flags |= IOSQE_IO_LINK;
    prev = sqe;
    ep->sending++;
  }
  if (prev) io_uring_submit(&ub->ring); /* on failure the entries stay queued for poll() */
}

/* Errors after which nothing more can go out on the socket. */
static bool connection_gone(int res) {
  switch (-res) {
  case EPIPE:
  case ECONNRESET:
  case ENOTCONN:
  case ESHUTDOWN:
  case ECONNABORTED:
  case ETIMEDOUT:
  case EHOSTUNREACH:
  case ENETUNREACH:
  case ENETDOWN:
  case EBADF:
  case ENOTSOCK:
    return true;
  default:
    return false;
  }
}

/* A send's own CQE: how much of the rest of the message went into the socket. */
static void on_sent_locked(struct uring_backend *ub, struct uring_req *req, int res, bool more) {
  struct nic_endpoint *ep = req->ep;
  ep->sending--;
  /* Every send that got past its prep has a notification coming. A send cancelled because an
   * earlier one in its batch failed reports -ECANCELED without F_MORE, yet its notification
   * still arrives (measured on 6.18): counting only F_MORE left the post short by one for good,
   * never completed. A send that failed its own prep has another errno and no notification. */
  if (more || res == -ECANCELED) req->notifs++;
  if (res > 0) {
    advance(req, (size_t)res);
    req->cancels = 0;
  }
  bool cut_short = res > 0 && !ep->dgram; /* a datagram goes whole or not at all */
  /* The kernel maps a fixed-buffer SENDMSG_ZC's pages in one allocation, which it cannot make
   * for about 1 GiB of 4 KiB pages (measured on 6.18: -ENOMEM, nothing sent; the same send
   * of plain memory goes). The rest of the post goes again as plain memory, which it pins. */
  bool refused_fixed = res == -ENOMEM && req->fixed_vec && !req->unfixed;
  if (refused_fixed) req->unfixed = true;
  /* A datagram sent zero-copy takes at most MAX_SKB_FRAGS pages (17 by default): one of a legal
   * length over more (entries apart, each on its own pages) fails with -EMSGSIZE, which the
   * program cannot foresee. It goes again copied, as a plain send would; one too long for a
   * datagram fails that way too, the same error. */
  bool too_scattered = res == -EMSGSIZE && ep->dgram && !req->copying;
  if (too_scattered) req->copying = true;
  if (req->off == req->total) {
    end_sends_locked(ub, req, 0);
  } else if (refused_fixed || too_scattered) {
    nic_uring_requeue(&ep->backlog, req);
    ub->stats.resubmits++;
  } else if (cut_short || (res == -ECANCELED && (!req->lead || ++req->cancels < MAX_CANCELS))) {
    /* Cancelled behind a failed send, or itself (its thread exited): the rest goes again. */
    nic_uring_requeue(&ep->backlog, req);
    ub->stats.resubmits++;
  } else if (ep->dgram) {
    /* Datagrams stand alone: a refused or oversized one fails, the next may go. */
    end_sends_locked(ub, req, res < 0 ? res : -EMSGSIZE);
  } else {
    if (req->off) ub->stats.torn++;
    if (req->off || connection_gone(res)) ep->broken = true;
    end_sends_locked(ub, req, res < 0 ? res : -EPIPE);
  }
  if (!ep->sending && ep->backlog.head) kick_locked(ub, ep);
}

void nic_uring_reap_locked(struct uring_backend *ub) {
  for (int round = 0; round < 8; round++) { /* bounded: the next poll() goes on */
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ub->ring, head, cqe) {
      seen++;
      if (nic_uring_rx_cqe_locked(ub, cqe)) continue; /* a receive's (uring_recv.c) */
      struct uring_req *req = io_uring_cqe_get_data(cqe);
      if (!req) continue; /* open's probe */
      if (!(cqe->flags & IORING_CQE_F_NOTIF)) {
        on_sent_locked(ub, req, cqe->res, cqe->flags & IORING_CQE_F_MORE);
        continue;
      }
      ub->stats.notifications++;
      if (ub->report_usage) {
        if (cqe->res & IORING_NOTIF_USAGE_ZC_COPIED)
          ub->stats.copied++;
        else
          ub->stats.zero_copied++;
      }
      if (--req->notifs == 0 && req->sent) finish_locked(ub, req);
    }
    io_uring_cq_advance(&ub->ring, seen);
    /* CQEs that did not fit wait in the kernel until a GETEVENTS enter moves them in. */
    if (!io_uring_cq_has_overflow(&ub->ring)) return;
    ub->stats.cq_overflows++;
    if (io_uring_get_events(&ub->ring) < 0) return;
  }
}

void nic_uring_advance_locked(struct uring_backend *ub) {
  nic_uring_reap_locked(ub);
  nic_uring_rx_rearm_locked(ub);
  struct nic_endpoint *kicked = ub->kick; /* a flush may kick again: take the list first */
  ub->kick = NULL;
  for (struct nic_endpoint *ep; (ep = kicked);) {
    kicked = ep->kick_next;
    ep->kicked = false;
    flush_locked(ub, ep);
  }
  if (io_uring_sq_ready(&ub->ring)) io_uring_submit(&ub->ring);
}

bool nic_uring_unsent_locked(const struct nic_endpoint *ep) {
  return ep->sending || ep->backlog.head;
}

int nic_uring_post(struct nic_backend *b, struct nic_endpoint *ep, const struct nic_sge *sge,
                   unsigned n, nic_completion_fn done, void *arg) {
  struct uring_backend *ub = uring_of(b);
  if (!ep || ep->ub != ub || !sge || !done || n == 0) return -EINVAL;
  if (n > URING_MAX_SGE) return -E2BIG;
  size_t total = 0;
  for (unsigned i = 0; i < n; i++) {
    if (!sge[i].addr || sge[i].len == 0) return -EINVAL;
    total += sge[i].len;
  }
  if (total > URING_MAX_MSG) return -EMSGSIZE; /* one send would be cut short */
  pthread_mutex_lock(&ub->lock);
  struct uring_req *req = nic_uring_req_alloc_locked(ub);
  if (!req) {
    pthread_mutex_unlock(&ub->lock);
    return -ENOMEM;
  }
  *req = (struct uring_req){.done = done, .arg = arg, .total = total};
  bool covered = true;
  for (unsigned i = 0; i < n && covered; i++) {
    int64_t slot = nic_uring_check_locked(ub, &sge[i]);
    covered = slot >= 0;
    req->slot[i] = (uint32_t)slot;
    req->iov[i] = (struct iovec){(void *)sge[i].addr, sge[i].len};
  }
  ub->stats.posts++;
  ub->stats.pending++;
  if (!covered) { /* like a NIC's protection error: nothing leaves */
    end_sends_locked(ub, req, -EFAULT);
  } else {
    req->n = n;
    for (unsigned i = 0; i < n; i++)
      ub->slots[req->slot[i]].inflight++;
    req->ep = ep;
    req->seq = ep->next_seq++;
    ep->inflight++;
    nic_uring_push(&ep->backlog, req);
    flush_locked(ub, ep);
  }
  pthread_mutex_unlock(&ub->lock);
  return 0;
}

/* Reaps CQEs, resumes idle endpoints, and runs up to max done()s (all when max <= 0) outside
 * the lock (a done() may post or dereg). Finished posts are taken off the ready queue one at a
 * time: a done() that writes its own buffer may have to wait for another finished post on the
 * same page to let go of it (the fences wait on its page references), and only a post still on
 * the queue can be completed by the poll that wait makes, or by the fence's poller thread. */
int nic_uring_poll(struct nic_backend *b, int max) {
  struct uring_backend *ub = uring_of(b);
  enum { REAP_EVERY = 32 }; /* done()s run between reapings, as a done() may post more */
  int ran = 0;
  const bool receives = max != NIC_POLL_COMPLETIONS_ONLY;
  if (max <= 0) max = INT_MAX; /* backend.h: all of them */
  pthread_mutex_lock(&ub->lock);
  for (int since_reap = REAP_EVERY; ran < max; ran++, since_reap++) {
    if (since_reap == REAP_EVERY) {
      nic_uring_advance_locked(ub);
      since_reap = 0;
    }
    struct uring_req *req = nic_uring_pop(&ub->ready);
    if (!req) break;
    const nic_completion_fn done = req->done;
    void *const arg = req->arg;
    const int status = req->status;
    nic_uring_req_free_locked(ub, req);
    ub->stats.pending--;
    ub->stats.completions++;
    pthread_mutex_unlock(&ub->lock);
    done(arg, status);
    pthread_mutex_lock(&ub->lock);
  }
  if (!ub->ready.head && !ub->rx_ready) nic_uring_work_clear_locked(ub);
  pthread_mutex_unlock(&ub->lock);
  return receives ? ran + nic_uring_rx_deliver(ub) : ran;
}
