/* The io_uring backend's own API, beyond the ops table in backend.h.
 *
 * Registrations are io_uring fixed buffers in a sparse table (up to 16384 slots, each at most
 * 1 GiB): handle = slot index, lkey = slot + 1, rkey = 0 (io_uring has no remote access, so
 * NIC_ACCESS_REMOTE_* is refused with -EOPNOTSUPP).
 *
 * Posting on an endpoint (a connected TCP, UDP or UDP-Lite socket):
 *  - one entry: IORING_OP_SEND_ZC from the fixed buffer (the kernel checks the range too);
 *  - several entries in one slot: IORING_OP_SENDMSG_ZC with IORING_RECVSEND_FIXED_BUF, where the
 *    kernel accepts it (probed at open; 6.18 does); otherwise, or when the entries span slots,
 *    a plain SENDMSG_ZC: the kernel pins the pages for that send and the registration serves
 *    only validation and in-flight accounting.
 * Every entry is checked against its registration before anything is submitted; a post with an
 * entry outside its registration sends nothing and completes with -EFAULT, from poll().
 * Completion runs after the kernel's notification (IORING_CQE_F_NOTIF), i.e. once the kernel
 * no longer reads the memory; the status is 0 when every byte was queued to the socket.
 * Posts on one endpoint reach the socket in post order (see uring_send.c). On a datagram
 * socket each post is one datagram: one longer than the socket takes (65507 bytes for IPv4
 * UDP without GSO) completes with -EMSGSIZE, and a failed post does not fail later ones.
 *
 * Receiving (endpoint_receive, uring_recv.c): one multishot receive per endpoint into a ring of
 * provided buffers carved from one dataplane block (NICMALLOC_RECV_BUFFERS of
 * NICMALLOC_RECV_BUFFER_SIZE, page-aligned), handed to the receiver from poll() in the order
 * the socket gave them; a buffer goes back to the ring at rx_recycle. */
#ifndef NIC_URING_H
#define NIC_URING_H

#include "backend.h"

#include <stdbool.h>
#include <stdint.h>

/* True when b is the io_uring backend. */
bool nic_uring_is(struct nic_backend *b);

/* A connected TCP, UDP or UDP-Lite socket of AF_INET or AF_INET6 (those the kernel sends
 * zero-copy from). Returns NULL with errno: EINVAL (b is not the uring backend), ENOTSOCK,
 * EPROTOTYPE (neither stream nor datagram), EOPNOTSUPP (a socket SEND_ZC rejects:
 * nic_uring_socket_refusal says why), ENOTCONN, ENOMEM, EMFILE (the ring's file table is full). The
 * endpoint does not own sockfd: close the endpoint first, then the socket. The ring keeps its own
 * reference to the socket until then (uring_files.c). */
struct nic_endpoint *nic_uring_endpoint_open(struct nic_backend *b, int sockfd);

/* Why the kernel's zero-copy send refuses sockfd, a stream or datagram socket (another family,
 * another protocol, kernel TLS): a sentence, or NULL when it takes it. */
const char *nic_uring_socket_refusal(int sockfd);

/* Returns 0, or -EBUSY while posts on it have not completed (poll until they have). */
int nic_uring_endpoint_close(struct nic_endpoint *ep);

/* reg() into a chosen slot (e.g. chunk i in slot i, so that a handle is known in advance).
 * Returns 0, -EINVAL (slot out of range, or what reg() rejects), -EBUSY (slot taken), or what
 * reg() returns. */
int nic_uring_reg_at(struct nic_backend *b, uint32_t slot, void *base, size_t len, unsigned access,
                     struct nic_registration *out);

struct nic_uring_stats {
  uint64_t posts; /* accepted by post() */
  /* Sends submitted (a resumed post submits again), by kind: */
  uint64_t send_zc_fixed;       /* one entry left: SEND_ZC from a fixed buffer */
  uint64_t sendmsg_zc_fixed;    /* several entries in one slot: SENDMSG_ZC, fixed buffer */
  uint64_t sendmsg_zc_plain;    /* several entries: SENDMSG_ZC, pages pinned per send */
  uint64_t dgram_copied;        /* a datagram on more pages than zero-copy takes: SENDMSG, copied */
  uint64_t protection_errors;   /* completed with -EFAULT before submission */
  uint64_t send_errors;         /* completed with another -errno */
  uint64_t resubmits;           /* sends cut short and resumed (see uring_send.c) */
  uint64_t torn;                /* connection failed part-way through a message */
  uint64_t notifications;       /* F_NOTIF CQEs: the kernel let go of a send's pages */
  uint64_t cq_overflows;        /* reapings that found CQEs the kernel kept past a full completion
                                   queue, and moved them in (a GETEVENTS enter) */
  uint64_t copied, zero_copied; /* notifications saying the kernel copied, or did not (6.2+) */
  uint64_t completions;         /* done() calls made */
  /* Receiving (uring_recv.c): */
  uint64_t recv_messages;      /* receive buffers handed to receivers */
  uint64_t recv_truncated;     /* datagrams longer than a receive buffer: dropped, never cut */
  uint64_t recv_empty_dropped; /* empty datagrams past twice the buffers waiting: dropped */
  uint64_t recv_rearms;        /* multishot receives submitted again (buffers back, thread gone) */
  uint64_t progress_wakeups;   /* rounds of the backend's thread: reap, submit (uring_progress.c) */
  uint32_t slots, slots_used;
  uint32_t pending;    /* accepted posts whose done() has not run */
  bool vectored_fixed; /* SENDMSG_ZC takes fixed buffers on this kernel (6.15+) */
  bool reports_copies; /* notifications say whether the kernel copied (6.2+) */
};

/* Returns false when b is not the uring backend. */
bool nic_uring_get_stats(struct nic_backend *b, struct nic_uring_stats *out);

#endif
