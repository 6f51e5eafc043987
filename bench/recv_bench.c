/* Receive throughput and per-message cost: copying received bytes into malloc'd memory against
 * reading them where nic_endpoint_receive put them, side by side in one process.
 *
 *   recv_bench udp|tcp|ring [--sizes 64,256,...] [--reps N] [--bytes B] [--max-messages N]
 *              [--csv FILE]
 *
 * udp, tcp: io_uring loopback (NICMALLOC_BACKEND=uring); a sender thread on a plain socket.
 * ring: DPDK net_ring (NICMALLOC_BACKEND=dpdk NICMALLOC_DPDK_VDEV=net_ring0); one thread posts
 * from dataplane blocks on the port, which loops back to itself, and receives.
 * Modes, interleaved within each repetition (the order rotates):
 *   recv     (udp, tcp) recv() on a plain socket into one malloc'd buffer, then deserialize
 *   copy     nic_endpoint_receive, copy each received buffer into malloc'd memory, deserialize
 *            the copy, free it
 *   inplace  nic_endpoint_receive, deserialize the received buffer where it is
 * "Deserialize" is the same everywhere: read the 16-byte header (a copy of its bytes, so that
 * a header split across two stream reads is read the same way) and read every payload byte once
 * into a sum; a stream (tcp) is parsed across buffer boundaries without copying payload bytes.
 * Each run moves about B bytes (default 32M; at least 500 and at most N messages, default
 * 50000). Prints one markdown table: per size and mode the median wall time per message, its
 * spread (min-max over the repetitions), the throughput that median gives, the CPU time per
 * message (socket transports: the process's less the sender thread's, i.e. the receiver and
 * nicmalloc's io_uring thread; ring: the one thread, posting and receiving), minor page faults,
 * and each copying mode's medians over inplace's. --csv writes every run. Timings are not
 * judged: a run fails only when a message is lost or malformed. */
#define _GNU_SOURCE
#include "bench_median.h"

#include <nicmalloc.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { kMagic = 0x72656376, kHeader = 16, kMaxSizes = 16, kMaxReps = 64, kUdpMax = 65507 };
enum transport { UDP, TCP, RING };
enum mode { RECV, COPY, INPLACE, kModes };
static const char *const mode_names[kModes] = {"recv", "copy", "inplace"};

struct header {
  uint32_t magic, seq, len, pad;
};

static uint64_t now_ns(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static long minor_faults(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

static uint64_t process_cpu_ns(void) {
  return now_ns(CLOCK_PROCESS_CPUTIME_ID);
}

/* ---- the deserializer, fed a stream or whole messages ---- */
struct parser {
  unsigned char hdr[kHeader];
  size_t have;        /* header bytes seen */
  uint32_t remaining; /* payload bytes of the current message still to come */
  uint64_t fold;
  unsigned long messages, bad;
};

/* Reads every byte once (a sum of words, which the compiler vectorises): the least any
 * deserializer does, so that the copy's share is not hidden behind slow parsing. */
static uint64_t fold_bytes(uint64_t f, const unsigned char *p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    f += w;
  }
  for (; i < n; i++)
    f += p[i];
  return f;
}

static void feed(struct parser *ps, const unsigned char *p, size_t n) {
  while (n) {
    if (!ps->remaining) {
      const size_t k = kHeader - ps->have < n ? kHeader - ps->have : n;
      memcpy(ps->hdr + ps->have, p, k);
      ps->have += k, p += k, n -= k;
      if (ps->have < kHeader) return;
      struct header h;
      memcpy(&h, ps->hdr, sizeof h);
      ps->have = 0;
      if (h.magic != kMagic) {
        ps->bad++;
        return;
      }
      ps->fold += h.seq;
      if (!(ps->remaining = h.len)) ps->messages++;
      continue;
    }
    const size_t k = ps->remaining < n ? ps->remaining : n;
    ps->fold = fold_bytes(ps->fold, p, k);
    ps->remaining -= (uint32_t)k, p += k, n -= k;
    if (!ps->remaining) ps->messages++;
  }
}

/* ---- one run ---- */
struct run {
  enum transport t;
  enum mode m;
  size_t size; /* bytes per message, header included */
  unsigned long messages;
  struct parser ps;
  atomic_ulong consumed;  /* udp: messages received, for the sender's window */
  atomic_bool stop;       /* the receiver is done (or gave up) */
  uint64_t sender_cpu_ns; /* the sender thread's CPU time */
  int send_fd;
  unsigned long window;           /* udp: datagrams the receiving socket's buffer takes for sure */
  unsigned long in_sender_memory; /* ring: messages received in the block they were sent from */
  bool failed;
};

static void fill_message(unsigned char *p, size_t size, uint32_t seq) {
  const struct header h = {kMagic, seq, (uint32_t)(size - kHeader), 0};
  memcpy(p, &h, sizeof h);
  for (size_t i = kHeader; i < size; i++)
    p[i] = (unsigned char)(i * 7 + 1);
}

/* udp: one datagram per message, at most window out beyond what the receiver consumed (so that
 * none is dropped for the socket buffer); tcp: messages back to back, many per send(). */
static void *sender(void *arg) {
  struct run *r = arg;
  const uint64_t t0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  if (r->t == UDP) {
    unsigned char *buf = malloc(r->size);
    fill_message(buf, r->size, 0);
    const unsigned long window = r->window;
    for (unsigned long i = 0; i < r->messages && !atomic_load(&r->stop);) {
      if (i - atomic_load_explicit(&r->consumed, memory_order_acquire) >= window) {
        sched_yield();
        continue;
      }
      memcpy(buf + 4, &(uint32_t){(uint32_t)i}, 4);
      if (send(r->send_fd, buf, r->size, 0) == (ssize_t)r->size)
        i++;
      else if (errno != EAGAIN && errno != ENOBUFS && errno != EINTR)
        break;
    }
    free(buf);
  } else {
    const size_t per = r->size >= 65536 ? 4 : (262144 / r->size ? 262144 / r->size : 1);
    unsigned char *buf = malloc(per * r->size);
    for (size_t i = 0; i < per; i++)
      fill_message(buf + i * r->size, r->size, (uint32_t)i);
    for (unsigned long sent = 0; sent < r->messages && !atomic_load(&r->stop);) {
      const size_t n = r->messages - sent < per ? r->messages - sent : per;
      size_t off = 0;
      while (off < n * r->size) {
        const ssize_t w = send(r->send_fd, buf + off, n * r->size - off, MSG_NOSIGNAL);
        if (w <= 0) {
          if (w < 0 && errno == EINTR) continue;
          goto out;
        }
        off += (size_t)w;
      }
      sent += n;
    }
  out:
    free(buf);
  }
  r->sender_cpu_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
  return NULL;
}

/* ring: the blocks the sender posts from, in turn; message i is block i % kRingWindow's. */
enum { kRingWindow = 32 };
static unsigned char *ring_blocks[kRingWindow];

static void on_receive(void *arg, void *data, size_t len) {
  struct run *r = arg;
  if (!data) { /* the stream ended */
    atomic_store(&r->stop, true);
    return;
  }
  /* Whether net_ring handed over the sender's very memory (its header's seq is its block). */
  if (r->t == RING && len >= kHeader) {
    uint32_t seq;
    memcpy(&seq, (const unsigned char *)data + 4, sizeof seq);
    r->in_sender_memory += seq < kRingWindow && data == ring_blocks[seq];
  }
  if (r->m == COPY) {
    unsigned char *c = malloc(len);
    if (!c) {
      r->failed = true;
      return;
    }
    memcpy(c, data, len);
    feed(&r->ps, c, len);
    free(c);
  } else {
    feed(&r->ps, data, len);
  }
  atomic_store_explicit(&r->consumed, r->ps.messages, memory_order_release);
}

static int socket_pair(enum transport t, int *rx, int *tx) {
  struct sockaddr_in a = {.sin_family = AF_INET}, b = {.sin_family = AF_INET};
  a.sin_addr.s_addr = b.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t la = sizeof a, lb = sizeof b;
  const int type = t == UDP ? SOCK_DGRAM : SOCK_STREAM;
  int s = socket(AF_INET, type, 0);
  *tx = socket(AF_INET, type, 0);
  if (s < 0 || *tx < 0 || bind(s, (struct sockaddr *)&a, sizeof a) ||
      getsockname(s, (struct sockaddr *)&a, &la))
    return -1;
  if (t == UDP) {
    *rx = s;
    const int big = 4 << 20; /* past rmem_max when allowed to (root), else up to it */
    if (setsockopt(*rx, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big))
      setsockopt(*rx, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    return bind(*tx, (struct sockaddr *)&b, sizeof b) ||
                   getsockname(*tx, (struct sockaddr *)&b, &lb) ||
                   connect(*rx, (struct sockaddr *)&b, sizeof b) ||
                   connect(*tx, (struct sockaddr *)&a, sizeof a)
               ? -1
               : 0;
  }
  if (listen(s, 1) || connect(*tx, (struct sockaddr *)&a, sizeof a)) return -1;
  *rx = accept(s, NULL, NULL);
  close(s);
  const int one = 1;
  setsockopt(*tx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return *rx < 0 ? -1 : 0;
}

/* Runs r; fills wall and cpu (nanoseconds for the whole run). false when it failed. */
static bool run_socket(struct run *r, uint64_t *wall, uint64_t *cpu) {
  int rx, tx;
  if (socket_pair(r->t, &rx, &tx)) {
    perror("recv_bench: loopback sockets");
    exit(2);
  }
  r->send_fd = tx;
  if (r->t == UDP) {
    /* Half the buffer (the kernel reports twice what it charges against) in datagrams of the
     * size's memory plus an skb's overhead: none is dropped, and more than one goes per wakeup. */
    int rcvbuf = 0;
    socklen_t l = sizeof rcvbuf;
    getsockopt(rx, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &l);
    r->window = (unsigned long)rcvbuf / 4 / (r->size + 1024);
    r->window = r->window < 1 ? 1 : r->window > 64 ? 64 : r->window;
  }
  struct nic_endpoint *ep = NULL;
  if (r->m != RECV) {
    ep = nic_uring_endpoint_create(rx);
    int rc = ep ? nic_endpoint_receive(ep, on_receive, r) : -errno;
    if (rc) {
      fprintf(stderr, "recv_bench: io_uring endpoint: %s (run with NICMALLOC_BACKEND=uring)\n",
              strerror(-rc));
      exit(2); /* every run would fail the same way */
    }
  }
  unsigned char *buf = r->m == RECV ? malloc(65536) : NULL;
  struct timeval limit = {.tv_sec = 10}; /* a lost message ends the run */
  setsockopt(rx, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  const uint64_t c0 = process_cpu_ns(), t0 = now_ns(CLOCK_MONOTONIC);
  pthread_t th;
  if (pthread_create(&th, NULL, sender, r)) exit(2);
  uint64_t last = t0;
  unsigned long seen = 0;
  while (r->ps.messages < r->messages && !atomic_load(&r->stop)) {
    if (r->m == RECV) {
      const ssize_t n = recv(rx, buf, 65536, 0);
      if (n <= 0) break;
      feed(&r->ps, buf, (size_t)n);
      atomic_store_explicit(&r->consumed, r->ps.messages, memory_order_release);
    } else if (nic_wait(100) < 0) {
      break;
    }
    const uint64_t t = now_ns(CLOCK_MONOTONIC);
    if (r->ps.messages != seen)
      seen = r->ps.messages, last = t;
    else if (t - last > 10000000000ull)
      break; /* 10 s without a message: one was lost */
  }
  const uint64_t t1 = now_ns(CLOCK_MONOTONIC);
  atomic_store(&r->stop, true);
  shutdown(tx, SHUT_RDWR);
  pthread_join(th, NULL);
  *wall = t1 - t0;
  *cpu = process_cpu_ns() - c0 - r->sender_cpu_ns;
  if (ep)
    while (nic_uring_endpoint_destroy(ep) == -EBUSY)
      nic_poll(0);
  free(buf);
  close(rx);
  close(tx);
  return r->ps.messages >= r->messages && !r->ps.bad && !r->failed;
}

/* ring: one thread posts from window dataplane blocks and receives on the same port. */
struct ring_state {
  unsigned long completed, errors;
};
static void ring_done(void *arg, int status) {
  struct ring_state *s = arg;
  s->completed++;
  s->errors += status != 0;
}

static struct nic_endpoint *ring_ep;

static bool run_ring(struct run *r, uint64_t *wall, uint64_t *cpu) {
  static size_t block_size;
  if (block_size != r->size) {
    for (int i = 0; i < kRingWindow; i++) {
      free(ring_blocks[i]);
      if (!(ring_blocks[i] = nic_aligned_alloc(4096, (r->size + 4095) & ~(size_t)4095)))
        return false;
      fill_message(ring_blocks[i], r->size, (uint32_t)i);
    }
    block_size = r->size;
  }
  int rc = nic_endpoint_receive(ring_ep, on_receive, r);
  if (rc) {
    fprintf(stderr, "recv_bench: nic_endpoint_receive: %s\n", strerror(-rc));
    return false;
  }
  struct ring_state s = {0};
  const uint64_t c0 = process_cpu_ns(), t0 = now_ns(CLOCK_MONOTONIC);
  uint64_t last = t0;
  unsigned long sent = 0, seen = 0;
  while (r->ps.messages < r->messages) {
    while (sent < r->messages && sent - s.completed < kRingWindow) {
      struct nic_sga sga;
      rc = nic_sga_init(&sga, 0);
      if (!rc) rc = nic_sga_add(&sga, ring_blocks[sent % kRingWindow], r->size);
      if (!rc) rc = nic_sga_post(&sga, ring_ep, ring_done, &s);
      if (rc) {
        nic_sga_reset(&sga);
        break;
      }
      sent++;
    }
    nic_poll(0);
    const uint64_t t = now_ns(CLOCK_MONOTONIC);
    if (r->ps.messages != seen)
      seen = r->ps.messages, last = t;
    else if (t - last > 10000000000ull)
      break;
  }
  *wall = now_ns(CLOCK_MONOTONIC) - t0;
  *cpu = process_cpu_ns() - c0;
  while (s.completed < sent)
    nic_poll(0);
  /* Receiving stops with the endpoint: make a fresh one for the next run's function. */
  while (nic_dpdk_endpoint_destroy(ring_ep) == -EBUSY)
    nic_poll(0);
  ring_ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  return r->ps.messages >= r->messages && !r->ps.bad && !r->failed && !s.errors && ring_ep;
}

/* ---- the table ---- */

/* A whole number with an optional K or M, at least min; 0 for anything else. */
static size_t parse_size(const char *s, size_t min) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  unsigned shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : 0;
  if (shift) end++;
  if (errno || end == s || *end || s[0] == '-' || v > (SIZE_MAX >> shift) || (v << shift) < min)
    return 0;
  return (size_t)(v << shift);
}

static _Noreturn void refuse(const char *option, const char *value, const char *wants) {
  fprintf(stderr, "recv_bench: %s wants %s, not '%s'\n", option, wants, value);
  exit(2);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr,
            "usage: %s udp|tcp|ring [--sizes 64,256,...] [--reps N] [--bytes B] "
            "[--max-messages N] [--csv FILE]\n",
            argv[0]);
    return 2;
  }
  const enum transport t =
      !strcmp(argv[1], "udp")   ? UDP
      : !strcmp(argv[1], "tcp") ? TCP
      : !strcmp(argv[1], "ring")
          ? RING
          : (fprintf(stderr, "recv_bench: transport udp, tcp or ring\n"), exit(2), UDP);
  const char *sizes_arg = "64,256,1K,4K,16K,64K", *csv_path = NULL;
  int reps = 5;
  size_t bytes = 32u << 20;
  unsigned long max_messages = 50000;
  for (int i = 2; i < argc; i += 2) {
    const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(opt, "--sizes") && strcmp(opt, "--reps") && strcmp(opt, "--bytes") &&
        strcmp(opt, "--max-messages") && strcmp(opt, "--csv")) {
      fprintf(stderr, "recv_bench: unknown argument '%s' (see the usage: %s with no argument)\n",
              opt, argv[0]);
      return 2;
    }
    if (!val) refuse(opt, "", "a value");
    if (!strcmp(opt, "--sizes")) {
      sizes_arg = val;
    } else if (!strcmp(opt, "--reps")) {
      size_t v = parse_size(val, 1);
      if (!v || v > kMaxReps) refuse(opt, val, "a whole number from 1 to 64");
      reps = (int)v;
    } else if (!strcmp(opt, "--bytes")) {
      if (!(bytes = parse_size(val, 1))) refuse(opt, val, "a size of at least 1 (K, M)");
    } else if (!strcmp(opt, "--max-messages")) {
      if (!(max_messages = parse_size(val, 1))) refuse(opt, val, "a whole number of at least 1");
    } else {
      csv_path = val;
    }
  }
  size_t sizes[kMaxSizes];
  int nsizes = 0;
  char *list = strdup(sizes_arg), *save = NULL;
  for (char *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
    if (nsizes == kMaxSizes) refuse("--sizes", sizes_arg, "at most 16 sizes");
    if (!(sizes[nsizes++] = parse_size(s, kHeader)))
      refuse("--sizes", s, "sizes of at least 16 bytes (the header), K or M");
  }
  if (!nsizes) refuse("--sizes", sizes_arg, "at least one size");
  FILE *csv = NULL;
  if (csv_path && !(csv = fopen(csv_path, "w"))) {
    fprintf(stderr, "recv_bench: cannot write --csv %s: %s\n", csv_path, strerror(errno));
    return 2;
  }
  if (csv) fprintf(csv, "transport,size,mode,rep,messages,wall_ns,cpu_ns,minor_faults,status\n");

  if (t == RING) {
    ring_ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
    struct nic_stats st = NIC_STATS_INIT;
    nic_get_stats(&st);
    if (!ring_ep || strcmp(st.backend, "dpdk")) {
      fprintf(stderr,
              "recv_bench ring: SKIPPED: no DPDK port (backend %s; run with "
              "NICMALLOC_BACKEND=dpdk NICMALLOC_DPDK_VDEV=net_ring0)\n",
              st.backend);
      return 77;
    }
  }
  const int first_mode = t == RING ? COPY : RECV;
  const char *tname = argv[1];
  printf("recv_bench %s: %d repetitions, %zu KiB per run (at least 500, at most %lu messages), "
         "modes interleaved\n\n",
         tname, reps, bytes >> 10, max_messages);
  printf("| size B | mode | wall ns/msg: median (min-max) | MB/s | %s ns/msg: median (min-max) | "
         "page faults per 1000 msgs | wall / inplace | CPU / inplace |%s\n"
         "|---|---|---|---|---|---|---|---|%s\n",
         t == RING ? "CPU (posting and receiving)" : "receiving side's CPU",
         t == RING ? " received in the sender's block |" : "", t == RING ? "---|" : "");
  bool all_ok = true;
  for (int si = 0; si < nsizes; si++) {
    size_t size = sizes[si];
    if (t == UDP && size > kUdpMax) size = kUdpMax; /* the largest IPv4 datagram */
    unsigned long messages = (unsigned long)(bytes / size);
    if (messages < 500) messages = 500;
    if (messages > max_messages) messages = max_messages;
    uint64_t wall[kModes][kMaxReps], cpu[kModes][kMaxReps], faults[kModes][kMaxReps];
    unsigned long in_sender[kModes] = {0};
    for (int rep = 0; rep < reps; rep++)
      for (int k = 0; k < kModes - first_mode; k++) {
        const enum mode m = (enum mode)(first_mode + (k + rep) % (kModes - first_mode));
        struct run *r = calloc(1, sizeof *r);
        *r = (struct run){.t = t, .m = m, .size = size, .messages = messages};
        const long f0 = minor_faults();
        const bool ok = t == RING ? run_ring(r, &wall[m][rep], &cpu[m][rep])
                                  : run_socket(r, &wall[m][rep], &cpu[m][rep]);
        faults[m][rep] = (uint64_t)(minor_faults() - f0);
        in_sender[m] += r->in_sender_memory;
        if (!ok) {
          fprintf(stderr, "recv_bench %s %zu %s: FAILED: %lu of %lu messages, %lu malformed\n",
                  tname, size, mode_names[m], r->ps.messages, messages, r->ps.bad);
          all_ok = false;
        }
        if (csv)
          fprintf(csv, "%s,%zu,%s,%d,%lu,%llu,%llu,%llu,%s\n", tname, size, mode_names[m], rep,
                  messages, (unsigned long long)wall[m][rep], (unsigned long long)cpu[m][rep],
                  (unsigned long long)faults[m][rep], ok ? "ok" : "FAILED");
        free(r);
      }
    double med[kModes][3] = {{0}}, lo[kModes][3] = {{0}}, hi[kModes][3] = {{0}};
    for (int m = first_mode; m < kModes; m++)
      for (int k = 0; k < 3; k++) {
        double per[kMaxReps];          /* whole units, as the table prints them */
        for (int i = 0; i < reps; i++) /* faults: per 1000 messages */
          per[i] =
              (double)(k == 2 ? faults[m][i] * 1000 / messages : (k ? cpu : wall)[m][i] / messages);
        med[m][k] = bench_median(per, (size_t)reps); /* sorts per */
        lo[m][k] = per[0], hi[m][k] = per[reps - 1];
      }
    for (int m = first_mode; m < kModes; m++) {
      printf("| %zu | %s | %.0f (%.0f-%.0f) | %.0f | %.0f (%.0f-%.0f) | %.0f |", size,
             mode_names[m], med[m][0], lo[m][0], hi[m][0], (double)size * 1e3 / med[m][0],
             med[m][1], lo[m][1], hi[m][1], med[m][2]);
      if (m == INPLACE)
        printf(" | |");
      else
        printf(" %.2f | %.2f |", med[m][0] / med[INPLACE][0], med[m][1] / med[INPLACE][1]);
      if (t == RING) printf(" %lu of %lu |", in_sender[m], messages * (unsigned long)reps);
      printf("\n");
    }
    fflush(stdout);
  }
  if (csv && (ferror(csv) | fclose(csv))) {
    fprintf(stderr, "recv_bench: writing --csv %s failed\n", csv_path);
    all_ok = false;
  }
  free(list);
  return all_ok ? 0 : 1;
}
