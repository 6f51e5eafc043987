/* The io_uring backend: the ring, what the kernel supports, open and close, endpoints. The
 * fixed-buffer table is in uring_buffers.c, posting and completions in uring_send.c, receiving
 * in uring_recv.c, the progress thread and plain sends behind posts in uring_progress.c. */
#define _GNU_SOURCE
#include "uring_internal.h"

#include "config.h"
#include "log.h"
#include "settings.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

static void uring_close(struct nic_backend *b);

bool nic_uring_is(struct nic_backend *b) {
  return b && b->close == uring_close;
}

/* NICMALLOC_URING_ENTRIES: submission queue depth; each post takes one entry until submitted. */
static unsigned queue_entries(void) {
  return (unsigned)nic_setting_number(NIC_S_URING_ENTRIES); /* 1 to 32768 */
}

static bool has_send_zc(struct io_uring *ring) {
  struct io_uring_probe *probe = io_uring_get_probe_ring(ring);
  if (!probe) return false;
  bool ok = io_uring_opcode_supported(probe, IORING_OP_SEND_ZC) &&
            io_uring_opcode_supported(probe, IORING_OP_SENDMSG_ZC);
  io_uring_free_probe(probe);
  return ok;
}

/* Whether the kernel takes a zero-copy send with these flags: prep rejects what it does not
 * know with -EINVAL, while a send it accepts gets as far as the file and fails with -EBADF on
 * fd -1. Nothing is sent. Runs before any other use of the ring. */
static bool accepts(struct io_uring *ring, bool vectored, unsigned zc_flags) {
  static char byte;
  struct iovec iov = {&byte, 1};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
  if (!sqe) return false;
  if (vectored)
    io_uring_prep_sendmsg_zc(sqe, -1, &msg, 0);
  else
    io_uring_prep_send_zc(sqe, -1, &byte, 1, 0, 0);
  sqe->ioprio |= zc_flags;
  sqe->buf_index = 0;
  sqe->user_data = 0;
  if (io_uring_submit(ring) != 1) return false;
  int res = 0;
  for (bool more = true, first = true; more;) {
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = {.tv_sec = 1};
    if (io_uring_wait_cqe_timeout(ring, &cqe, &ts) != 0) return false;
    if (first) res = cqe->res;
    more = first && (cqe->flags & IORING_CQE_F_MORE);
    first = false;
    io_uring_cqe_seen(ring, cqe);
  }
  return res == -EBADF;
}

static struct nic_endpoint *uring_endpoint_create(struct nic_backend *b,
                                                  const struct nic_endpoint_params *p) {
  return nic_uring_endpoint_open(b, p->sockfd);
}

/* The most a UDP datagram carries over IPv4: 65535 less the IP and UDP headers. IPv6 carries 20
 * bytes more, but an AF_INET6 socket may have an IPv4 peer; one figure for both. */
#define UDP_MAX_PAYLOAD 65507ul

/* On a stream the kernel joins posts, each within one send; on a datagram socket a post is one
 * datagram, and a nicmalloc receiver drops a datagram longer than its receive buffer. */
static size_t uring_endpoint_max_message(struct nic_backend *b, const struct nic_endpoint *ep) {
  (void)b;
  if (!ep->dgram) return URING_MAX_MSG;
  const size_t buffer = nic_uring_rx_buffer_bytes();
  return buffer < UDP_MAX_PAYLOAD ? buffer : UDP_MAX_PAYLOAD;
}
static int uring_endpoint_destroy(struct nic_backend *b, struct nic_endpoint *ep) {
  (void)b;
  return nic_uring_endpoint_close(ep);
}

struct nic_backend *nic_backend_uring_open(void) {
  struct uring_backend *ub = calloc(1, sizeof *ub);
  if (!ub) return NULL;
  ub->reqs.node_size = sizeof(struct uring_req);
  unsigned entries = queue_entries();
  /* Two CQEs per post (result, then notification); the kernel keeps overflow anyway. */
  struct io_uring_params params = {.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_CQSIZE |
                                            IORING_SETUP_CLAMP,
                                   .cq_entries = entries * 4};
  int rc = io_uring_queue_init_params(entries, &ub->ring, &params);
  if (rc < 0) {
    free(ub);
    errno = -rc; /* EPERM: io_uring_disabled; ENOSYS: not built in */
    return NULL;
  }
  /* A child of fork never uses this ring (regcache/cache/backend.h), and a mapping of it holds
   * the ring as a descriptor does: inherited, it kept this instance, and every step registered
   * with it pinned, for as long as any child lived. */
  rc = io_uring_ring_dontfork(&ub->ring);
  if (rc < 0)
    nic_log_warn_once("uring backend: its ring stays mapped in fork children (%s): while a child "
                      "lives, the steps registered with it stay pinned",
                      strerror(-rc));
  if (!has_send_zc(&ub->ring)) {
    io_uring_queue_exit(&ub->ring);
    free(ub);
    errno = ENOTSUP;
    return NULL;
  }
  rc = nic_uring_table_init(ub);
  if (rc < 0) {
    io_uring_queue_exit(&ub->ring);
    free(ub);
    errno = -rc;
    return NULL;
  }
  /* SENDMSG_ZC from a fixed buffer: vectored registered buffers, 6.15 (6.18 has them). */
  ub->vectored_fixed = accepts(&ub->ring, true, IORING_RECVSEND_FIXED_BUF);
  /* Notifications that say whether the kernel copied after all: 6.2. */
  ub->report_usage = accepts(&ub->ring, false, IORING_SEND_ZC_REPORT_USAGE);
  nic_uring_files_init(ub);
  pthread_mutex_init(&ub->lock, NULL);
  ub->pub = (struct nic_backend){
      .name = "uring",
      .caps = {.max_sge = URING_MAX_SGE,
               .max_region_bytes = URING_MAX_BYTES,
               .max_regions = ub->nslots,
               .max_message = URING_MAX_MSG,
               /* To a NIC; to a local receiver (loopback, veth) the kernel copies, which the
                * notifications report: stats.copied / stats.zero_copied. */
               .zero_copy = true},
      .reg = nic_uring_reg,
      .dereg = nic_uring_dereg,
      .post = nic_uring_post,
      .poll = nic_uring_poll,
      .event_fd = nic_uring_event_fd,
      .close = uring_close,
      .endpoint_create = uring_endpoint_create,
      .endpoint_destroy = uring_endpoint_destroy,
      .endpoint_receive = nic_uring_endpoint_receive,
      .rx_recycle = nic_uring_rx_recycle,
      .endpoint_max_message = uring_endpoint_max_message,
      .priv = ub,
  };
  rc = nic_uring_progress_start(ub);
  if (rc < 0) {
    pthread_mutex_destroy(&ub->lock);
    io_uring_queue_exit(&ub->ring);
    nic_uring_table_fini(ub);
    nic_uring_files_fini(ub);
    free(ub);
    errno = -rc;
    return NULL;
  }
  ub->stats.slots = ub->nslots;
  ub->stats.vectored_fixed = ub->vectored_fixed;
  ub->stats.reports_copies = ub->report_usage;
  nic_log_info("uring backend: %u entries, %u fixed-buffer slots, SENDMSG_ZC %s fixed buffers, "
               "copy reports %s",
               params.sq_entries, ub->nslots, ub->vectored_fixed ? "with" : "without",
               ub->report_usage ? "on" : "off");
  return &ub->pub;
}
NIC_BACKEND_BUILTIN(uring, nic_backend_uring_open);

/* Completions still pending are dropped: the ring's teardown waits for the kernel to let go of
 * the memory, but done() no longer runs. Endpoints must be closed first. */
static void uring_close(struct nic_backend *b) {
  struct uring_backend *ub = uring_of(b);
  if (ub->stats.pending || ub->endpoints)
    nic_log_warn("uring backend closed with %u posts pending and %u endpoints open",
                 ub->stats.pending, ub->endpoints);
  nic_uring_progress_stop(ub);
  io_uring_queue_exit(&ub->ring);
  nic_uring_table_fini(ub);
  nic_uring_files_fini(ub);
  nic_uring_requests_fini(ub);
  pthread_mutex_destroy(&ub->lock);
  free(ub);
}

static int sockopt_int(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof v;
  return getsockopt(fd, level, name, &v, &len) == 0 ? v : -1;
}

/* The kernel marks a socket able to send zero-copy (SOCK_SUPPORT_ZC, which SEND_ZC asks, failing
 * with EOPNOTSUPP) when it is made TCP, UDP or UDP-Lite, and unmarks it when a ULP replaces its
 * protocol: kernel TLS, or a BPF sockmap, which no option tells. MPTCP, SCTP, ping and AF_UNIX
 * sockets never have it: accepted, every post to them failed. */
const char *nic_uring_socket_refusal(int sockfd) {
  const int type = sockopt_int(sockfd, SOL_SOCKET, SO_TYPE),
            protocol = sockopt_int(sockfd, SOL_SOCKET, SO_PROTOCOL),
            domain = sockopt_int(sockfd, SOL_SOCKET, SO_DOMAIN);
  if (domain != AF_INET && domain != AF_INET6)
    return "not an AF_INET or AF_INET6 socket (zero-copy send needs TCP, UDP or UDP-Lite)";
  if (type == SOCK_STREAM && protocol == IPPROTO_MPTCP)
    return "an MPTCP socket: the kernel has no zero-copy send for MPTCP (it has for TCP, UDP "
           "and UDP-Lite)";
  if (!(type == SOCK_STREAM && protocol == IPPROTO_TCP) &&
      !(type == SOCK_DGRAM && (protocol == IPPROTO_UDP || protocol == IPPROTO_UDPLITE)))
    return "its protocol has no zero-copy send in the kernel (TCP, UDP and UDP-Lite have)";
  char ulp[16] = "";
  socklen_t len = sizeof ulp - 1;
  if (type == SOCK_STREAM && getsockopt(sockfd, IPPROTO_TCP, TCP_ULP, ulp, &len) == 0 &&
      strcmp(ulp, "tls") == 0)
    return "kernel TLS (TCP_ULP \"tls\"): the kernel has no zero-copy send for it";
  return NULL;
}

struct nic_endpoint *nic_uring_endpoint_open(struct nic_backend *b, int sockfd) {
  int type = 0;
  socklen_t len = sizeof type;
  struct sockaddr_storage peer;
  socklen_t peer_len = sizeof peer;
  if (!nic_uring_is(b)) {
    errno = EINVAL;
    return NULL;
  }
  if (getsockopt(sockfd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return NULL; /* ENOTSOCK */
  if (type != SOCK_STREAM && type != SOCK_DGRAM) { /* SEQPACKET: not TCP or UDP, no SEND_ZC */
    errno = EPROTOTYPE;
    return NULL;
  }
  if (nic_uring_socket_refusal(sockfd)) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  /* Posts carry no address: a datagram socket must be connected too. */
  if (getpeername(sockfd, (struct sockaddr *)&peer, &peer_len) != 0) return NULL; /* ENOTCONN */
  struct nic_endpoint *ep = calloc(1, sizeof *ep);
  if (!ep) return NULL;
  struct uring_backend *ub = uring_of(b);
  ep->ub = ub;
  ep->fd = sockfd;
  ep->dgram = type == SOCK_DGRAM;
  pthread_mutex_lock(&ub->lock);
  ep->file = nic_uring_file_add_locked(ub, sockfd);
  if (ep->file >= -1) {
    ub->endpoints++;
    nic_uring_ep_link_locked(ub, ep);
  }
  pthread_mutex_unlock(&ub->lock);
  if (ep->file < -1) {
    errno = -ep->file; /* EMFILE: as many endpoints open as the file table holds */
    free(ep);
    return NULL;
  }
  return ep;
}

int nic_uring_endpoint_close(struct nic_endpoint *ep) {
  if (!ep) return -EINVAL;
  struct uring_backend *ub = ep->ub;
  pthread_mutex_lock(&ub->lock);
  struct uring_rx *rx = NULL;
  /* The stop checks again for posts that came while it let go of the lock: on 0 none did. */
  int rc = ep->inflight ? -EBUSY : nic_uring_rx_stop_locked(ub, ep, &rx);
  if (rc) {
    pthread_mutex_unlock(&ub->lock);
    return rc;
  }
  for (struct nic_endpoint **at = &ub->kick; ep->kicked && *at; at = &(*at)->kick_next)
    if (*at == ep) { /* kicked, then emptied by a post's own flush: poll() would visit it */
      *at = ep->kick_next;
      break;
    }
  nic_uring_file_remove_locked(ub, ep->file);
  nic_uring_ep_unlink_locked(ub, ep);
  ub->endpoints--;
  pthread_mutex_unlock(&ub->lock);
  nic_uring_rx_free(rx); /* unlocked: freeing the block may deregister, which takes the lock */
  free(ep);
  return 0;
}

bool nic_uring_get_stats(struct nic_backend *b, struct nic_uring_stats *out) {
  if (!nic_uring_is(b)) return false;
  struct uring_backend *ub = uring_of(b);
  pthread_mutex_lock(&ub->lock);
  *out = ub->stats;
  pthread_mutex_unlock(&ub->lock);
  return true;
}
