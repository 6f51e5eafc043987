/* Sinks: the calls that hand bytes to the network. Exported, like alloc/os/interpose.c's mmap
 * family, so that a preloaded (or linked) nicmalloc sees them in unmodified programs. Every
 * mode counts the bytes actually sent (the return value, walked over the iovecs in order) from
 * dataplane memory and from elsewhere (struct nic_stats sent_*); while profiling, bytes are
 * credited to the site of the sampled block they lie in (blocks that are dataplane only because
 * NICMALLOC_SITES routed them are sampled too, see profile.c).
 * Each call forwards to the C library's own function, found once with dlsym(RTLD_NEXT) from the
 * constructor, so cancellation points and errno stay as the program expects; before that (other
 * libraries' constructors) it makes the system call itself.
 * write/writev count only on sockets. Whether an fd is a socket is cached per fd (fstat once)
 * and forgotten by close/dup2/dup3; an fd reused through a path we do not see (the C library's
 * internal closes, close_range) may be counted by its old kind.
 * Before sending, each asks send_order.h whether posts on the fd must go first (one load when no
 * endpoint exists); stdio and the C library's own writes reach the kernel without passing here. */
#define _GNU_SOURCE
#include "chunks.h"
#include "export.h"
#include "forklock.h"
#include "log.h"
#include "profile.h"
#include "send_order.h"

#include <dlfcn.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define FD_CACHE 65536

static uint64_t sent_dp, sent_other;
static unsigned char fd_kind[FD_CACHE]; /* 0 unknown, 1 socket, 2 other */

static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
static int (*real_sendmmsg)(int, struct mmsghdr *, unsigned, int);
static ssize_t (*real_sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static int (*real_close)(int);

void nic_sink_init(void) {
  real_sendmsg = dlsym(RTLD_NEXT, "sendmsg");
  real_sendmmsg = dlsym(RTLD_NEXT, "sendmmsg");
  real_sendto = dlsym(RTLD_NEXT, "sendto");
  real_write = dlsym(RTLD_NEXT, "write");
  real_writev = dlsym(RTLD_NEXT, "writev");
  real_close = dlsym(RTLD_NEXT, "close");
}

void nic_sink_range(const void *p, size_t len) {
  if (!len) return;
  __atomic_add_fetch(nic_in_dp(p) ? &sent_dp : &sent_other, len, __ATOMIC_RELAXED);
  /* Dataplane blocks are in the table only when NICMALLOC_SITES routed them (profile.c). */
  if (__atomic_load_n(&nic_profile_flags, __ATOMIC_RELAXED) & NIC_PROF_SAMPLE)
    nic_prof_table_sent(p, len);
}

/* The child's profile is added to its parent's: it counts from zero. */
static void after_fork_child(void) {
  sent_dp = sent_other = 0;
}
NIC_FORK_CHILD(profile_sink, NIC_FORK_PROFILE_SINK, after_fork_child);

void nic_sink_totals(struct nic_sink_totals *out) {
  out->dataplane = __atomic_load_n(&sent_dp, __ATOMIC_RELAXED);
  out->other = __atomic_load_n(&sent_other, __ATOMIC_RELAXED);
}

static void sink_iov(const struct iovec *iov, size_t n, ssize_t sent) {
  for (size_t i = 0; i < n && sent > 0; i++) {
    size_t len = iov[i].iov_len < (size_t)sent ? iov[i].iov_len : (size_t)sent;
    nic_sink_range(iov[i].iov_base, len);
    sent -= (ssize_t)len;
  }
}

/* Whether the send must wait for, or give way to, posts on fd (send_order.h); true with errno
 * set when it may not go. Each call below tests nic_send_order_active() first and leaves for
 * its *_ordered twin only when an endpoint exists, so that its own path gains one load. */
static bool held_back(int fd, int flags) {
  int rc = nic_send_order(fd, flags);
  if (rc == 0) return false;
  errno = -rc;
  return true;
}

static bool is_socket(int fd) {
  unsigned char kind = fd >= 0 && fd < FD_CACHE ? __atomic_load_n(&fd_kind[fd], 0) : 0;
  if (kind) return kind == 1;
  struct stat st;
  bool sock = fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
  if (fd >= 0 && fd < FD_CACHE) __atomic_store_n(&fd_kind[fd], sock ? 1 : 2, 0);
  return sock;
}

static void forget_fd(int fd) {
  if (fd >= 0 && fd < FD_CACHE) __atomic_store_n(&fd_kind[fd], 0, 0);
}

static inline ssize_t sendmsg_now(int fd, const struct msghdr *msg, int flags) {
  ssize_t r = real_sendmsg ? real_sendmsg(fd, msg, flags) : syscall(SYS_sendmsg, fd, msg, flags);
  if (r > 0) sink_iov(msg->msg_iov, msg->msg_iovlen, r);
  return r;
}
static __attribute__((noinline, cold)) ssize_t sendmsg_ordered(int fd, const struct msghdr *msg,
                                                               int flags) {
  return held_back(fd, flags) ? -1 : sendmsg_now(fd, msg, flags);
}
NIC_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
  if (nic_send_order_active()) return sendmsg_ordered(fd, msg, flags);
  return sendmsg_now(fd, msg, flags);
}

static inline int sendmmsg_now(int fd, struct mmsghdr *vec, unsigned vlen, int flags) {
  int r = real_sendmmsg ? real_sendmmsg(fd, vec, vlen, flags)
                        : (int)syscall(SYS_sendmmsg, fd, vec, vlen, flags);
  for (int i = 0; i < r; i++)
    sink_iov(vec[i].msg_hdr.msg_iov, vec[i].msg_hdr.msg_iovlen, vec[i].msg_len);
  return r;
}
static __attribute__((noinline, cold)) int sendmmsg_ordered(int fd, struct mmsghdr *vec,
                                                            unsigned vlen, int flags) {
  return held_back(fd, flags) ? -1 : sendmmsg_now(fd, vec, vlen, flags);
}
NIC_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned vlen, int flags) {
  if (nic_send_order_active()) return sendmmsg_ordered(fd, vec, vlen, flags);
  return sendmmsg_now(fd, vec, vlen, flags);
}

static inline ssize_t sendto_now(int fd, const void *buf, size_t len, int flags,
                                 const struct sockaddr *addr, socklen_t alen) {
  ssize_t r = real_sendto ? real_sendto(fd, buf, len, flags, addr, alen)
                          : syscall(SYS_sendto, fd, buf, len, flags, addr, alen);
  if (r > 0) nic_sink_range(buf, (size_t)r);
  return r;
}
static __attribute__((noinline, cold)) ssize_t sendto_ordered(int fd, const void *buf, size_t len,
                                                              int flags,
                                                              const struct sockaddr *addr,
                                                              socklen_t alen) {
  return held_back(fd, flags) ? -1 : sendto_now(fd, buf, len, flags, addr, alen);
}
NIC_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
                          const struct sockaddr *addr, socklen_t alen) {
  if (nic_send_order_active()) return sendto_ordered(fd, buf, len, flags, addr, alen);
  return sendto_now(fd, buf, len, flags, addr, alen);
}

NIC_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags) {
  return sendto(fd, buf, len, flags, NULL, 0);
}

static inline ssize_t write_now(int fd, const void *buf, size_t len) {
  ssize_t r = real_write ? real_write(fd, buf, len) : syscall(SYS_write, fd, buf, len);
  if (r > 0 && is_socket(fd)) nic_sink_range(buf, (size_t)r);
  return r;
}
static __attribute__((noinline, cold)) ssize_t write_ordered(int fd, const void *buf, size_t len) {
  return held_back(fd, 0) ? -1 : write_now(fd, buf, len);
}
NIC_EXPORT ssize_t write(int fd, const void *buf, size_t len) {
  if (nic_send_order_active()) return write_ordered(fd, buf, len);
  return write_now(fd, buf, len);
}

static inline ssize_t writev_now(int fd, const struct iovec *iov, int n) {
  ssize_t r = real_writev ? real_writev(fd, iov, n) : syscall(SYS_writev, fd, iov, n);
  if (r > 0 && is_socket(fd)) sink_iov(iov, (size_t)n, r);
  return r;
}
static __attribute__((noinline, cold)) ssize_t writev_ordered(int fd, const struct iovec *iov,
                                                              int n) {
  return held_back(fd, 0) ? -1 : writev_now(fd, iov, n);
}
NIC_EXPORT ssize_t writev(int fd, const struct iovec *iov, int n) {
  if (nic_send_order_active()) return writev_ordered(fd, iov, n);
  return writev_now(fd, iov, n);
}

NIC_EXPORT int close(int fd) {
  forget_fd(fd);
  return real_close ? real_close(fd) : (int)syscall(SYS_close, fd);
}

/* dup2 and dup3 onto fd 2 also tell the log that stderr moved on purpose (log.c). */
NIC_EXPORT int dup2(int old, int new_fd) {
  forget_fd(new_fd);
  int rc = (int)syscall(SYS_dup2, old, new_fd);
  if (rc == STDERR_FILENO) nic_log_stderr_redirected();
  return rc;
}

NIC_EXPORT int dup3(int old, int new_fd, int flags) {
  forget_fd(new_fd);
  int rc = (int)syscall(SYS_dup3, old, new_fd, flags);
  if (rc == STDERR_FILENO) nic_log_stderr_redirected();
  return rc;
}
