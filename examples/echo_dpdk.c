/* A zero-copy echo server and its client over DPDK net_ring: two ports of the program's own,
 * wired to each other, in one process. The client posts each request from dataplane memory on
 * port a; the server receives it on port b (nic_endpoint_receive) in that very memory, reads it
 * where it landed, writes the reply's header (sequence number, length, checksum) over the
 * request's and posts the same buffer back: nic_hold keeps the buffer while the reply is in
 * flight, and the reply's completion releases it. The client, an ordinary DPDK receiver
 * (rte_eth_rx_burst on port a), finds each reply in the memory it sent the request from and
 * checks every byte; freeing the reply's mbuf completes the server's post.
 *
 *   echo_dpdk [--check] [--copy] [requests]
 *
 * in any order; requests (default 20000) is a count from 1 up, and anything else is refused
 * (exit 2).
 * Runs with NICMALLOC_BACKEND=dpdk (EAL starts when the backend opens; nothing else to set).
 * The reply is one segment: a separate header segment would make net_ring hand over a
 * scattered chain, which a receiver must gather (nicmalloc's receive copies it into one of its
 * 4 KiB buffers, and drops a longer one). The client does not receive through nicmalloc:
 * receive buffers are kept per page (safety/receive.c), so a reply received by nicmalloc in the
 * pages the server holds would wait for the server's release, which waits for the reply.
 * --check also checks the zero-copy claim and exits 1 when it does not hold: every request
 * arrived in dataplane memory and every reply in the request's own memory while the server
 * still held it (the request's post had not completed), no entry went
 * through the registration cache, nothing was copied, and every receive buffer went back.
 * --copy answers from a malloc'd copy of the request, as a server without nic_endpoint_receive
 * would, and checks too: the check then fails, which shows it can tell. A check that received
 * nothing fails. Exits 77 (a skip) when DPDK cannot start here. */
#define ALLOW_EXPERIMENTAL_API
#include "example_args.h"

#include <nicmalloc.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

enum { kRequest = 0x72657175, kReply = 0x7265706c, kWindow = 16, kMaxPayload = 16384 };

/* The request's header and the reply's are the same size, so that the reply's is written over
 * the request's in place. */
struct header {
  uint32_t magic, seq, len, sum;
};

static bool copy_mode;

struct server {
  struct nic_endpoint *ep;
  unsigned long requests, requests_dp, posted, done, post_errors;
};

struct client {
  struct nic_endpoint *ep;
  unsigned long sent, send_errors, requests_done, replies, good, bad, in_request_memory;
  void *outstanding[kWindow]; /* the request blocks in flight, by seq % kWindow */
  bool completed[kWindow];    /* their posts completed: the server let go of them */
  unsigned long while_held;   /* replies that came while the server held the request */
};

static uint32_t checksum(const unsigned char *p, size_t n) {
  uint32_t s = 2166136261u;
  for (size_t i = 0; i < n; i++)
    s = (s ^ p[i]) * 16777619u;
  return s;
}

static unsigned char payload_byte(uint32_t seq, uint32_t i) {
  return (unsigned char)(seq * 131 + i * 7 + 1);
}

/* Over NICMALLOC_COPY_THRESHOLD's default (512) with its header, so that no request or reply is
 * copied for being short. */
static uint32_t payload_len(uint32_t seq) {
  return 512 + (seq * 2654435761u) % (kMaxPayload - 511);
}

/* One reply in flight: what to let go of at its completion. */
struct reply {
  struct server *s;
  void *held;   /* the request's receive buffer, nic_hold()ed */
  void *copied; /* --copy: the reply built in malloc'd memory */
};

static void reply_done(void *arg, int status) {
  struct reply *r = arg;
  if (status) r->s->post_errors++;
  if (r->held) nic_release(r->held);
  free(r->copied);
  r->s->done++;
  free(r);
}

/* The server's receive function, from nic_poll: data is a request in a receive buffer. */
static void on_request(void *arg, void *data, size_t len) {
  struct server *s = arg;
  if (!data) return;
  s->requests++;
  s->requests_dp += nic_is_dataplane(data) == 1;
  struct header *h = data; /* read in place */
  if (len < sizeof *h || h->magic != kRequest || h->len != len - sizeof *h) return;
  struct reply *r = calloc(1, sizeof *r);
  if (!r) return;
  r->s = s;
  unsigned char *out = data;
  if (copy_mode) {
    out = r->copied = malloc(len);
    if (out) memcpy(out, data, len);
  } else if (nic_hold(data) == 0) {
    r->held = data; /* the buffer stays ours until reply_done */
  } else {
    out = NULL;
  }
  int rc = -ENOMEM;
  struct nic_sga sga;
  if (out) {
    const struct header reply = {kReply, h->seq, h->len, checksum(out + sizeof *h, h->len)};
    memcpy(out, &reply, sizeof reply); /* the new fields, over the request's */
    rc = nic_sga_init(&sga, 0);
    if (!rc) rc = nic_sga_add(&sga, out, len);
    if (!rc) rc = nic_sga_post(&sga, s->ep, reply_done, r);
    if (rc) nic_sga_reset(&sga);
  }
  if (rc) {
    reply_done(r, rc);
    return;
  }
  s->posted++;
}

/* The client's check of a reply: in the request's own memory unless the server copied. */
static void on_reply(struct client *c, void *data, size_t len) {
  c->replies++;
  struct header h;
  memcpy(&h, data, sizeof h < len ? sizeof h : len);
  const unsigned char *p = (const unsigned char *)data + sizeof h;
  bool ok = len >= sizeof h && h.magic == kReply && h.seq < c->sent &&
            h.len == payload_len(h.seq) && len == sizeof h + h.len && h.sum == checksum(p, h.len);
  for (uint32_t i = 0; ok && i < h.len; i++)
    ok = p[i] == payload_byte(h.seq, i);
  if (!ok) {
    c->bad++;
    return;
  }
  c->good++;
  c->in_request_memory += data == c->outstanding[h.seq % kWindow];
  c->while_held += !c->completed[h.seq % kWindow];
}

/* One request in flight: its block goes at the completion, once the server let go of it. */
struct request {
  struct client *c;
  void *block;
  uint32_t seq;
};

static void request_done(void *arg, int status) {
  struct request *r = arg;
  if (status) r->c->send_errors++;
  r->c->requests_done++;
  r->c->completed[r->seq % kWindow] = true;
  free(r->block);
  free(r);
}

static int send_request(struct client *c, uint32_t seq) {
  const uint32_t n = payload_len(seq);
  unsigned char *b = nic_malloc(sizeof(struct header) + n);
  struct request *r = malloc(sizeof *r);
  if (!b || !r) {
    free(b);
    free(r);
    return -ENOMEM;
  }
  *r = (struct request){c, b, seq};
  const struct header h = {kRequest, seq, n, 0};
  memcpy(b, &h, sizeof h);
  for (uint32_t i = 0; i < n; i++)
    b[sizeof h + i] = payload_byte(seq, i);
  c->outstanding[seq % kWindow] = b; /* seq - kWindow completed: the window */
  c->completed[seq % kWindow] = false;
  struct nic_sga sga;
  int rc = nic_sga_init(&sga, 0);
  if (!rc) rc = nic_sga_add(&sga, b, sizeof h + n);
  if (!rc) rc = nic_sga_post(&sga, c->ep, request_done, r);
  if (rc) {
    nic_sga_reset(&sga);
    free(b);
    free(r);
  }
  return rc;
}

/* Two net_ring ports wired to each other (what a sends, b receives), one queue each. Their
 * pool is never taken from on net_ring (the receiver gets the sender's mbufs), so it is small.
 * NULL, or what failed. */
static const char *ring_port_pair(uint16_t ports[2]) {
  struct rte_ring *ab =
      rte_ring_create("echo_ab", 1024, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  struct rte_ring *ba =
      rte_ring_create("echo_ba", 1024, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  struct rte_mempool *pool =
      rte_pktmbuf_pool_create("echo_rx", 63, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  if (!ab || !ba || !pool) return "rte_ring_create / rte_pktmbuf_pool_create";
  const int a = rte_eth_from_rings("echo_a", &ba, 1, &ab, 1, SOCKET_ID_ANY);
  const int b = rte_eth_from_rings("echo_b", &ab, 1, &ba, 1, SOCKET_ID_ANY);
  if (a < 0 || b < 0) return "rte_eth_from_rings";
  ports[0] = (uint16_t)a;
  ports[1] = (uint16_t)b;
  for (int i = 0; i < 2; i++) {
    struct rte_eth_conf conf = {0};
    if (rte_eth_dev_configure(ports[i], 1, 1, &conf) ||
        rte_eth_rx_queue_setup(ports[i], 0, 256, SOCKET_ID_ANY, NULL, pool) ||
        rte_eth_tx_queue_setup(ports[i], 0, 256, SOCKET_ID_ANY, NULL) ||
        rte_eth_dev_start(ports[i]))
      return "configuring or starting a port";
  }
  return NULL;
}

int main(int argc, char **argv) {
  bool check = false;
  unsigned long count = 20000;
  const struct example_arg args[] = {{"--check", &check, NULL, 0},
                                     {"--copy", &copy_mode, NULL, 0},
                                     {NULL, NULL, &count, UINT32_MAX}};
  const int refused = example_args(argc, argv, "echo_dpdk [--check] [--copy] [requests]", args,
                                   sizeof args / sizeof args[0]);
  if (refused) return refused;
  const uint32_t requests = (uint32_t)count;
  const char *me = copy_mode ? "echo_dpdk --copy" : "echo_dpdk";

  /* The backend opens, and EAL starts, at the first need. */
  struct nic_sga probe;
  nic_sga_init(&probe, 0);
  nic_sga_reset(&probe);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  if (strcmp(s.backend, "dpdk") != 0) {
    fprintf(stderr,
            "%s: SKIPPED: the dpdk backend did not open (backend %s; run with "
            "NICMALLOC_BACKEND=dpdk, and see the warning above)\n",
            me, s.backend);
    return 77;
  }
  uint16_t ports[2];
  const char *failed = ring_port_pair(ports);
  if (failed) {
    fprintf(stderr, "%s: net_ring port pair: %s failed (%s)\n", me, failed,
            rte_strerror(rte_errno));
    return 2;
  }
  struct client c = {.ep = nic_dpdk_endpoint_create(ports[0], 0)};
  struct server srv = {.ep = nic_dpdk_endpoint_create(ports[1], 0)};
  if (!c.ep || !srv.ep) {
    fprintf(stderr, "%s: nic_dpdk_endpoint_create: %s\n", me, strerror(errno));
    return 2;
  }
  int rc = nic_endpoint_receive(srv.ep, on_request, &srv);
  if (rc) {
    fprintf(stderr, "%s: nic_endpoint_receive: %s\n", me, strerror(-rc));
    return 2;
  }
  /* One thread plays both parts: receive functions and completions run from nic_poll. A run
   * that stops moving for 10 s (a lost packet) ends. */
  time_t last = time(NULL);
  uint32_t next = 0;
  while (c.requests_done < requests && time(NULL) - last < 10) {
    while (next < requests && next - c.requests_done < kWindow) {
      if ((rc = send_request(&c, next)) != 0) {
        fprintf(stderr, "%s: posting request %u: %s\n", me, next, strerror(-rc));
        return 1;
      }
      c.sent = ++next;
    }
    if (nic_poll(0) > 0) last = time(NULL);
    struct rte_mbuf *ms[32];
    const uint16_t got = rte_eth_rx_burst(ports[0], 0, ms, 32);
    /* Everything ready runs first: a request whose post completes now was let go of before
     * its reply was read, which the server's hold is there to prevent. */
    while (got && nic_poll(0) > 0)
      ;
    for (uint16_t i = 0; i < got; i++) {
      if (ms[i]->nb_segs == 1)
        on_reply(&c, rte_pktmbuf_mtod(ms[i], void *), ms[i]->pkt_len);
      else
        c.bad++;
      rte_pktmbuf_free(ms[i]); /* the server's reply completes */
    }
    if (got) last = time(NULL);
  }
  while (srv.done < srv.posted && time(NULL) - last < 10)
    nic_poll(0);
  for (int i = 0; i < 2; i++)
    while (nic_dpdk_endpoint_destroy(i ? c.ep : srv.ep) == -EBUSY && time(NULL) - last < 10)
      nic_poll(0);

  nic_get_stats(&s);
  printf("%s: %lu requests received (%lu in dataplane memory), %lu replies good (%lu in the "
         "request's own memory, %lu while it was held), %lu bad, %lu+%lu post errors\n",
         me, srv.requests, srv.requests_dp, c.good, c.in_request_memory, c.while_held, c.bad,
         srv.post_errors, c.send_errors);
  printf("%s: registration cache %llu hits %llu misses; %llu bytes copied; %llu receive buffers "
         "held at the end\n",
         me, (unsigned long long)s.rcache_hits, (unsigned long long)s.rcache_misses,
         (unsigned long long)s.bounce_bytes, (unsigned long long)s.recv_held_buffers);
  bool ok = c.good == requests && !c.bad && c.replies == requests && c.requests_done == requests &&
            srv.done == srv.posted && !srv.post_errors && !c.send_errors;
  if (check || copy_mode) {
    /* Nothing received is nothing checked: a failure, not an "ok". */
    const bool zero_copy = srv.requests > 0 && srv.requests == requests &&
                           srv.requests_dp == requests && c.in_request_memory == requests &&
                           c.while_held == requests && s.rcache_hits + s.rcache_misses == 0 &&
                           s.bounce_bytes == 0 && s.recv_held_buffers == 0 &&
                           s.recv_messages == requests;
    printf("%s: zero-copy check %s\n", me, zero_copy ? "ok" : "FAILED");
    ok = ok && zero_copy;
  }
  return ok ? 0 : 1;
}
