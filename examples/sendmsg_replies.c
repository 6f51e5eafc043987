/* A server that sends replies with sendmsg(2) over loopback TCP: each reply is an iovec of a
 * small header on the stack and a payload kept in a reply cache. The cache's payload buffers
 * come from a wrapper, buffer_alloc(), that other code also uses for scratch memory; built with
 * the LLVM pass (examples/CMakeLists.txt), the payload allocations, whose objects reach sendmsg
 * through msghdr -> iovec -> iov_base, become dataplane memory, and the scratch ones do not.
 *
 *   sendmsg_replies [--check] [replies]
 *
 * replies (default 5000) is a count from 1 up, and anything else is refused (exit 2).
 * A reader thread checks every byte that arrives. nicmalloc counts the bytes handed to sendmsg
 * by where they lie; with --check the program exits 1 unless every payload byte was sent from
 * dataplane memory and only the headers from elsewhere. */
#include "example_args.h"

#include <nicmalloc.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

struct reply_header {
  uint32_t magic, id, len, pad;
};
enum { kMagic = 0x72706c79, kPayloads = 64 };

static void *buffer_alloc(size_t n) { /* a wrapper used on both paths */
  void *p = malloc(n);
  if (!p) abort();
  return p;
}

struct reader {
  int fd;
  unsigned long expect_replies, replies, bad;
};

static char payload_byte(uint32_t id, uint32_t i) {
  return (char)(id * 17 + i * 3);
}

static bool read_all(int fd, void *p, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, (char *)p + got, n - got);
    if (r <= 0) return false;
    got += (size_t)r;
  }
  return true;
}

static void *read_replies(void *arg) {
  struct reader *rd = arg;
  char *buf = buffer_alloc(1 << 16); /* scratch: never sent */
  struct reply_header h;
  while (rd->replies < rd->expect_replies && read_all(rd->fd, &h, sizeof h)) {
    if (h.magic != kMagic || h.len > (1 << 16) || !read_all(rd->fd, buf, h.len)) {
      rd->bad++;
      break;
    }
    for (uint32_t i = 0; i < h.len; i++)
      if (buf[i] != payload_byte(h.id % kPayloads, i)) {
        rd->bad++;
        break;
      }
    rd->replies++;
  }
  free(buf);
  return NULL;
}

static int connected_pair(int *tx, int *rx) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
      getsockname(l, (struct sockaddr *)&a, &alen))
    return -1;
  *tx = socket(AF_INET, SOCK_STREAM, 0);
  if (*tx < 0 || connect(*tx, (struct sockaddr *)&a, sizeof a)) return -1;
  *rx = accept(l, NULL, NULL);
  close(l);
  return *rx < 0 ? -1 : 0;
}

static bool send_reply(int fd, uint32_t id, const char *payload, uint32_t len) {
  struct reply_header h = {kMagic, id, len, 0};
  struct iovec iov[2] = {{&h, sizeof h}, {(void *)payload, len}};
  struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
  size_t want = sizeof h + len, sent = 0;
  while (sent < want) { /* a short send: the rest goes again */
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += (size_t)n;
    for (size_t skip = (size_t)n; skip && msg.msg_iovlen;) {
      size_t step = skip < msg.msg_iov->iov_len ? skip : msg.msg_iov->iov_len;
      msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + step;
      msg.msg_iov->iov_len -= step;
      skip -= step;
      if (!msg.msg_iov->iov_len) msg.msg_iov++, msg.msg_iovlen--;
    }
  }
  return true;
}

int main(int argc, char **argv) {
  bool check = false;
  unsigned long replies = 5000;
  const struct example_arg args[] = {{"--check", &check, NULL, 0},
                                     {NULL, NULL, &replies, UINT32_MAX}};
  const int refused = example_args(argc, argv, "sendmsg_replies [--check] [replies]", args,
                                   sizeof args / sizeof args[0]);
  if (refused) return refused;
  int tx, rx;
  if (connected_pair(&tx, &rx)) {
    perror("sendmsg_replies: loopback TCP");
    return 2;
  }
  char *payload[kPayloads];
  uint32_t len[kPayloads];
  for (uint32_t p = 0; p < kPayloads; p++) {
    len[p] = 700 + p * 613;
    payload[p] = buffer_alloc(len[p]);
    for (uint32_t i = 0; i < len[p]; i++)
      payload[p][i] = payload_byte(p, i);
  }
  char *scratch = buffer_alloc(4096); /* the same wrapper, a path that never sends */
  memset(scratch, 0, 4096);
  struct reader rd = {.fd = rx, .expect_replies = replies};
  pthread_t t;
  pthread_create(&t, NULL, read_replies, &rd);
  struct nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  unsigned long payload_bytes = 0, header_bytes = 0;
  for (unsigned long r = 0; r < replies; r++) {
    uint32_t p = (uint32_t)(r % kPayloads);
    if (!send_reply(tx, (uint32_t)r, payload[p], len[p])) break;
    payload_bytes += len[p];
    header_bytes += sizeof(struct reply_header);
  }
  nic_get_stats(&after);
  pthread_join(t, NULL);
  uint64_t dp = after.sent_dataplane_bytes - before.sent_dataplane_bytes;
  uint64_t other = after.sent_other_bytes - before.sent_other_bytes;
  uint32_t payload_dp = 0;
  for (uint32_t p = 0; p < kPayloads; p++)
    payload_dp += nic_is_dataplane(payload[p]);
  printf("sendmsg_replies: %lu replies received of %lu, %lu bad\n", rd.replies, replies, rd.bad);
  printf("sendmsg_replies: payload buffers in dataplane memory %u of %u; scratch %s\n", payload_dp,
         kPayloads, nic_is_dataplane(scratch) ? "dataplane" : "control");
  printf("sendmsg_replies: sent %llu bytes from dataplane memory (payloads: %lu), %llu from "
         "elsewhere (headers: %lu)\n",
         (unsigned long long)dp, payload_bytes, (unsigned long long)other, header_bytes);
  bool ok = rd.replies == replies && !rd.bad;
  if (check) {
    /* Nothing sent is nothing checked: a failure, not an "ok". */
    bool whole = payload_bytes > 0 && payload_dp == kPayloads && !nic_is_dataplane(scratch) &&
                 dp == payload_bytes && other == header_bytes;
    printf("sendmsg_replies: whole-program check %s\n", whole ? "ok" : "FAILED");
    ok = ok && whole;
  }
  for (uint32_t p = 0; p < kPayloads; p++)
    free(payload[p]);
  free(scratch);
  close(tx);
  close(rx);
  return ok ? 0 : 1;
}
