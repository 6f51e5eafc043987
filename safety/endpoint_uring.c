/* nic_uring_endpoint_create: the io_uring backend's public endpoint, a connected TCP, UDP or
 * UDP-Lite socket. Posting and completion are the backend's (regcache/uring/uring_send.c): SEND_ZC
 * or SENDMSG_ZC from the fixed buffers, done() after the kernel's notification. */
#include "api_errors.h"
#include "endpoint_common.h"
#include "log.h"
#include "nicmalloc.h"
#include "nocancel.h"
#include "thread.h"
#include "uring.h"

#include <errno.h>
#include <string.h>

static const char *why_not(int err, int sockfd) {
  const char *refusal;
  switch (err) {
  case EBADF:
    return "not an open file descriptor";
  case ENOTSOCK:
    return "not a socket";
  case EPROTOTYPE:
    return "neither a stream nor a datagram socket";
  case EOPNOTSUPP:
    refusal = nic_uring_socket_refusal(sockfd);
    return refusal ? refusal : "the kernel has no zero-copy send for it";
  case ENOTCONN:
    return "not connected (datagram sockets too: posts carry no address)";
  default:
    return strerror(err);
  }
}

NIC_EXPORT struct nic_endpoint *nic_uring_endpoint_create(int sockfd) {
  NIC_CANCEL_OFF_SCOPE(); /* endpoints are made and ended under locks */
  NIC_INTERNAL_SCOPE();
  static const char who[] = "nic_uring_endpoint_create";
  struct nic_backend *b =
      nic_ep_backend(who, NIC_BACKEND_URING, "it needs io_uring with zero-copy send");
  if (!b) return NULL;
  struct nic_endpoint *ep = b->endpoint_create(b, &(struct nic_endpoint_params){.sockfd = sockfd});
  int err = errno;
  if (ep && !nic_ep_track(ep, "uring", b)) {
    b->endpoint_destroy(b, ep);
    ep = NULL;
    err = ENOMEM;
  }
  if (!ep) {
    const char *why = why_not(err, sockfd); /* each reason said once */
    nic_api_error_by(endpoint, err, why, "%s(%d): %s", who, sockfd, why);
    errno = err;
  }
  return ep;
}

NIC_EXPORT int nic_uring_endpoint_destroy(struct nic_endpoint *ep) {
  NIC_CANCEL_OFF_SCOPE(); /* endpoints are made and ended under locks */
  NIC_INTERNAL_SCOPE();
  return nic_ep_untrack(ep, "uring", "nic_uring_endpoint_destroy");
}
