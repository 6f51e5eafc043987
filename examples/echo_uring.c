/* A zero-copy echo server and its client over io_uring on loopback UDP. The server receives
 * each request into dataplane memory (nic_endpoint_receive), reads it where it landed, and
 * answers with a new header (sequence number, length, checksum) followed by the request's
 * payload posted straight from the receive buffer: nic_hold keeps the buffer out of the NIC's
 * hands while the reply is in flight, and the reply's completion releases it. The client, a
 * thread on an ordinary socket, keeps a window of requests out and checks every reply byte.
 *
 *   echo_uring [--check] [--copy] [--workers N] [requests]
 *
 * in any order; requests (default 20000) and N are counts from 1 up, and anything else is
 * refused (exit 2). --workers N runs it as a prefork server would: the parent opens its io_uring
 * backend and registers a dataplane block, then forks N workers, each of which serves its own
 * client on its own socket through an io_uring instance of its own (a child of fork never uses its
 * parent's: README, fork), with the same checks; the parent exits 0 when every worker did.
 *
 * Runs with NICMALLOC_BACKEND=uring. --check also checks the zero-copy claim and exits 1 when
 * it does not hold: every request arrived in dataplane memory, no entry went through the
 * registration cache, only the reply headers were copied, and every receive buffer went back.
 * --copy answers from a malloc'd copy of the payload instead, as a server without
 * nic_endpoint_receive would, and checks too: the check then fails, which shows it can tell. A
 * check that received nothing fails. */
#include "example_args.h"

#include <nicmalloc.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

enum { kMagic = 0x6563686f, kWindow = 1, kMaxPayload = 16384 };
static const char kUsage[] = "echo_uring [--check] [--copy] [--workers N] [requests]";

struct request_header {
  uint32_t magic, seq, len;
};
struct reply_header {
  uint32_t magic, seq, len, sum;
};

/* One reply in flight: its header (copied at nic_sga_add, being short) and what to let go of
 * at its completion. */
struct reply {
  struct reply_header header;
  void *held;   /* the receive buffer, nic_hold()ed */
  void *copied; /* --copy: the payload's copy */
};

static bool copy_mode;
static unsigned long requests_seen, requests_dp, replies_posted, replies_done, post_errors;
static bool ended;

static uint32_t checksum(const unsigned char *p, size_t n) {
  uint32_t s = 2166136261u;
  for (size_t i = 0; i < n; i++)
    s = (s ^ p[i]) * 16777619u;
  return s;
}

static unsigned char payload_byte(uint32_t seq, uint32_t i) {
  return (unsigned char)(seq * 131 + i * 7 + 1);
}

/* At least NICMALLOC_COPY_THRESHOLD's default (512), so that no payload is copied for being
 * short: only the headers are. */
static uint32_t payload_len(uint32_t seq) {
  return 512 + (seq * 2654435761u) % (kMaxPayload - 511);
}

static void reply_done(void *arg, int status) {
  struct reply *r = arg;
  if (status) post_errors++;
  if (r->held) nic_release(r->held);
  free(r->copied);
  free(r);
  replies_done++;
}

/* The server's receive function, from nic_poll: data lies in a receive buffer of the NIC's. */
static void on_request(void *arg, void *data, size_t len) {
  struct nic_endpoint *ep = arg;
  if (!data) {
    ended = true;
    return;
  }
  requests_seen++;
  requests_dp += nic_is_dataplane(data) ? 1 : 0;
  const struct request_header *rq = data; /* read in place */
  if (len < sizeof *rq || rq->magic != kMagic || rq->len != len - sizeof *rq) return;
  struct reply *r = calloc(1, sizeof *r);
  if (!r) return;
  const unsigned char *payload = (const unsigned char *)data + sizeof *rq;
  r->header = (struct reply_header){kMagic, rq->seq, rq->len, checksum(payload, rq->len)};
  if (copy_mode) {
    r->copied = malloc(rq->len);
    if (r->copied) memcpy(r->copied, payload, rq->len);
    payload = r->copied;
  } else if (nic_hold(data) == 0) {
    r->held = data; /* the buffer stays ours until reply_done */
  }
  struct nic_sga sga;
  int rc = payload ? nic_sga_init(&sga, 0) : -ENOMEM;
  if (!rc) rc = nic_sga_add(&sga, &r->header, sizeof r->header);
  if (!rc) rc = nic_sga_add(&sga, payload, rq->len);
  if (!rc) rc = nic_sga_post(&sga, ep, reply_done, r);
  if (rc) {
    nic_sga_reset(&sga);
    reply_done(r, rc);
    return;
  }
  replies_posted++;
}

struct client {
  int fd;
  uint32_t requests;
  unsigned long good, bad;
  bool finished; /* set last, atomically */
};

/* Keeps kWindow requests out and checks each reply against what it sent; a lost reply ends the
 * run at the socket's receive timeout. One at a time: with 8 out, a few zero-copy replies in
 * 2000 overflowed the client's UDP socket buffer on loopback (RcvbufErrors), even at 4 MiB, when
 * the chunks are on huge pages; never with NICMALLOC_PAGE_KIND=4k, nor from copies in control
 * memory. */
static void *client_run(void *arg) {
  struct client *c = arg;
  static unsigned char out[sizeof(struct request_header) + kMaxPayload];
  static unsigned char in[sizeof(struct reply_header) + kMaxPayload + 1];
  uint32_t sent = 0, got = 0;
  while (got < c->requests) {
    while (sent < c->requests && sent - got < kWindow) {
      const uint32_t n = payload_len(sent);
      struct request_header h = {kMagic, sent, n};
      memcpy(out, &h, sizeof h);
      for (uint32_t i = 0; i < n; i++)
        out[sizeof h + i] = payload_byte(sent, i);
      if (send(c->fd, out, sizeof h + n, 0) != (ssize_t)(sizeof h + n)) {
        perror("echo_uring: client send");
        goto out;
      }
      sent++;
    }
    const ssize_t r = recv(c->fd, in, sizeof in, 0);
    if (r < 0) {
      perror("echo_uring: client recv (a reply missing)");
      goto out;
    }
    struct reply_header h;
    memcpy(&h, in, sizeof h < (size_t)r ? sizeof h : (size_t)r);
    bool ok = (size_t)r >= sizeof h && h.magic == kMagic && h.seq == got &&
              h.len == payload_len(got) && (size_t)r == sizeof h + h.len &&
              h.sum == checksum(in + sizeof h, h.len);
    for (uint32_t i = 0; ok && i < h.len; i++)
      ok = in[sizeof h + i] == payload_byte(got, i);
    if (ok)
      c->good++;
    else
      c->bad++;
    got++;
  }
out:
  __atomic_store_n(&c->finished, true, __ATOMIC_RELEASE);
  return NULL;
}

/* Two UDP sockets on 127.0.0.1 connected to each other. */
static int udp_pair(int *server, int *client) {
  struct sockaddr_in a = {.sin_family = AF_INET}, b = {.sin_family = AF_INET};
  a.sin_addr.s_addr = b.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t la = sizeof a, lb = sizeof b;
  *server = socket(AF_INET, SOCK_DGRAM, 0);
  *client = socket(AF_INET, SOCK_DGRAM, 0);
  if (*server < 0 || *client < 0 || bind(*server, (struct sockaddr *)&a, sizeof a) ||
      getsockname(*server, (struct sockaddr *)&a, &la) ||
      bind(*client, (struct sockaddr *)&b, sizeof b) ||
      getsockname(*client, (struct sockaddr *)&b, &lb) ||
      connect(*server, (struct sockaddr *)&b, sizeof b) ||
      connect(*client, (struct sockaddr *)&a, sizeof a))
    return -1;
  struct timeval limit = {.tv_sec = 10};
  return setsockopt(*client, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
}

static int serve(bool check, uint32_t requests) {
  struct client c = {.requests = requests};
  int server;
  if (udp_pair(&server, &c.fd)) {
    perror("echo_uring: loopback UDP");
    return 2;
  }
  struct nic_endpoint *ep = nic_uring_endpoint_create(server);
  if (!ep) {
    fprintf(stderr, "echo_uring: no io_uring endpoint (run with NICMALLOC_BACKEND=uring)\n");
    return 2;
  }
  int rc = nic_endpoint_receive(ep, on_request, ep);
  if (rc) {
    fprintf(stderr, "echo_uring: nic_endpoint_receive: %s\n", strerror(-rc));
    return 2;
  }
  pthread_t client;
  if (pthread_create(&client, NULL, client_run, &c)) return 2;
  /* The server's loop, asleep in its own epoll set until nicmalloc has work for this thread:
   * receive functions and reply completions (and the free pages another thread's malloc_trim
   * asks this one for) run from nic_poll. The timeout only looks at the client now and then. */
  const int work = nic_thread_event_fd();
  const int set = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ready = {.events = EPOLLIN};
  if (work < 0 || set < 0 || epoll_ctl(set, EPOLL_CTL_ADD, work, &ready)) {
    fprintf(stderr, "echo_uring: no event loop (%s)\n", strerror(work < 0 ? -work : errno));
    return 2;
  }
  while (!__atomic_load_n(&c.finished, __ATOMIC_ACQUIRE))
    if (epoll_wait(set, &ready, 1, 10) > 0) /* EINTR (io_uring's task work): round again */
      nic_poll(0);
  close(set);
  pthread_join(client, NULL);
  while (replies_done < replies_posted)
    nic_poll(0);
  while (nic_uring_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
  close(server);
  close(c.fd);

  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  const unsigned long header_bytes = replies_posted * sizeof(struct reply_header);
  printf("%s: %lu requests received (%lu in dataplane memory), %lu replies good, %lu bad, %lu "
         "post errors\n",
         copy_mode ? "echo_uring --copy" : "echo_uring", requests_seen, requests_dp, c.good, c.bad,
         post_errors);
  printf("%s: registration cache %llu hits %llu misses; %llu bytes copied (reply headers: %lu); "
         "%llu receive buffers held at the end\n",
         copy_mode ? "echo_uring --copy" : "echo_uring", (unsigned long long)s.rcache_hits,
         (unsigned long long)s.rcache_misses, (unsigned long long)s.bounce_bytes, header_bytes,
         (unsigned long long)s.recv_held_buffers);
  bool ok = c.good == c.requests && !c.bad && !post_errors && !ended;
  if (check || copy_mode) {
    /* Nothing received is nothing checked: a failure, not an "ok". */
    bool zero_copy = requests_seen > 0 && requests_dp == requests_seen &&
                     requests_seen == c.requests && s.rcache_hits + s.rcache_misses == 0 &&
                     s.bounce_bytes == header_bytes && s.recv_held_buffers == 0 &&
                     s.recv_messages == requests_seen;
    printf("%s: zero-copy check %s\n", copy_mode ? "echo_uring --copy" : "echo_uring",
           zero_copy ? "ok" : "FAILED");
    ok = ok && zero_copy;
  }
  return ok ? 0 : 1;
}

/* The parent's backend is open and holds a registration when the workers are forked: theirs
 * are their own all the same. */
static int prefork(bool check, uint32_t requests, int workers) {
  void *mine = nic_malloc(4096);
  struct nic_region_ref ref;
  /* The registration opens the backend; nic_event_fd then makes its set (it opens none). */
  if (!mine || nic_register(mine, 4096, 0, &ref) || nic_event_fd() < 0) {
    fprintf(stderr, "echo_uring: the parent's backend did not open (run with "
                    "NICMALLOC_BACKEND=uring)\n");
    return 2;
  }
  fflush(stdout);
  for (int w = 0; w < workers; w++) {
    const pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      const int rc = serve(check, requests);
      fflush(stdout);
      _exit(rc);
    }
  }
  int worst = 0;
  for (int w = 0; w < workers; w++) {
    int status = 0;
    if (wait(&status) < 0) return 2;
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 2;
    worst = rc > worst ? rc : worst;
  }
  printf("echo_uring: %d workers, %s\n", workers, worst ? "one or more FAILED" : "all ok");
  free(mine);
  return worst;
}

int main(int argc, char **argv) {
  bool check = false, workers_given = false;
  unsigned long requests = 20000, workers = 0;
  const struct example_arg args[] = {{"--check", &check, NULL, 0},
                                     {"--copy", &copy_mode, NULL, 0},
                                     {"--workers", &workers_given, &workers, 64},
                                     {NULL, NULL, &requests, UINT32_MAX}};
  const int refused = example_args(argc, argv, kUsage, args, sizeof args / sizeof args[0]);
  if (refused) return refused;
  return workers ? prefork(check, (uint32_t)requests, (int)workers)
                 : serve(check, (uint32_t)requests);
}
