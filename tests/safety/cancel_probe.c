/* cancel_probe: program threads cancelled (pthread_cancel) inside nicmalloc's API, each scenario
 * in a fresh process. A victim thread either has a cancel pending when it calls in (the first
 * cancellation point it reaches acts on it) or is cancelled while it waits; afterwards the main
 * thread uses the same paths, which must not find a lock the victim took with it. Prints
 * key=value lines; alarm() turns a deadlock into SIGALRM. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "warm_up_cancel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEADLOCK_S 30

/* Runs fn on a thread that cancels itself first; says whether it was cancelled. */
static int run_victim(void *(*fn)(void *), void *arg) {
  pthread_t t;
  void *r = NULL;
  pthread_create(&t, NULL, fn, arg);
  pthread_join(t, &r);
  return r == PTHREAD_CANCELED;
}

static const char *backend_name(void) {
  static struct nic_stats s;
  s = (struct nic_stats)NIC_STATS_INIT;
  nic_get_stats(&s);
  return s.backend;
}

/* A connected TCP pair on 127.0.0.1 with small buffers, so that a post of a few MiB waits for the
 * reader. */
struct pair {
  int tx, rx;
};

static int loopback_pair(struct pair *p) {
  const int small = 256 << 10;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
      getsockname(l, (struct sockaddr *)&a, &alen))
    return -errno;
  p->tx = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(p->tx, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  if (connect(p->tx, (struct sockaddr *)&a, sizeof a)) return -errno;
  p->rx = accept(l, NULL, NULL);
  close(l);
  return p->rx < 0 ? -errno : 0;
}

static size_t drain(int fd, size_t want) {
  static char sink[1 << 16];
  size_t got = 0;
  while (got < want) {
    const ssize_t n = read(fd, sink, sizeof sink);
    if (n <= 0) break;
    got += (size_t)n;
  }
  return got;
}

static void count_done(void *arg, int status) {
  (void)status;
  __atomic_add_fetch((int *)arg, 1, __ATOMIC_RELEASE);
}

static int post_block(struct nic_endpoint *ep, void *p, size_t len, int *done) {
  struct nic_sga sga;
  int rc = nic_sga_init(&sga, 0);
  if (!rc) rc = nic_sga_add(&sga, p, len);
  if (!rc) rc = nic_sga_post(&sga, ep, count_done, done);
  return rc;
}

/* Polls until *done reaches want, for at most ms. */
static int wait_done(const int *done, int want, int ms) {
  for (int i = 0; i < ms && __atomic_load_n(done, __ATOMIC_ACQUIRE) < want; i++)
    nic_wait(1);
  return __atomic_load_n(done, __ATOMIC_ACQUIRE) >= want;
}

/* open: the victim's registration opens the backend (NICMALLOC_BACKEND). DPDK's EAL, the sim's
 * set-up and rdma-core read files under the lock every registration takes. */
struct open_victim {
  int past, rc;
};

static void *open_victim(void *arg) {
  struct open_victim *v = arg;
  pthread_cancel(pthread_self());
  void *p = nic_malloc(4096);
  struct nic_region_ref r;
  v->rc = nic_register(p, 4096, 0, &r);
  v->past = 1;
  pthread_testcancel();
  return NULL;
}

static int cmd_open(void) {
  struct open_victim v = {0, 1};
  const int cancelled = run_victim(open_victim, &v);
  void *p = nic_malloc(4096);
  struct nic_region_ref r;
  const int rc = nic_register(p, 4096, 0, &r);
  printf("backend=%s\nvictim_cancelled=%d\nvictim_past=%d\nvictim_rc=%d\nmain_rc=%d\n",
         backend_name(), cancelled, v.past, v.rc, rc);
  return 0;
}

/* post-poll: the victim posts and polls until its completion ran; the backend's event descriptor
 * is written and cleared under its lock on the way. */
struct poll_victim {
  struct nic_endpoint *ep;
  void *block;
  size_t len;
  int done, past, rc;
};

static void *poll_victim(void *arg) {
  struct poll_victim *v = arg;
  pthread_cancel(pthread_self());
  v->rc = post_block(v->ep, v->block, v->len, &v->done);
  for (int i = 0; !v->rc && i < 20000 && !__atomic_load_n(&v->done, __ATOMIC_ACQUIRE); i++)
    nic_poll(0);
  nic_poll(0); /* the one that finds nothing left clears the event descriptor */
  v->past = 1;
  pthread_testcancel();
  return NULL;
}

static void sink_receive(void *arg, void *data, size_t len) {
  (void)arg;
  (void)data;
  (void)len;
}

static int cmd_post_poll(void) {
  struct pair pr = {-1, -1};
  struct nic_endpoint *ep = NULL;
  const char *want = getenv("NICMALLOC_BACKEND");
  if (want && !strcmp(want, "uring")) {
    if (loopback_pair(&pr)) return 2;
    ep = nic_uring_endpoint_create(pr.tx);
  } else {
    ep = nic_sim_endpoint_create(sink_receive, NULL, 0);
  }
  if (!ep) {
    printf("endpoint=none\n");
    return 0;
  }
  const size_t len = 64 << 10;
  struct poll_victim v = {ep, nic_malloc(len), len, 0, 0, 1};
  memset(v.block, 'v', len);
  const int cancelled = run_victim(poll_victim, &v);
  if (pr.rx >= 0) drain(pr.rx, len);
  int done = 0;
  void *mine = nic_malloc(len);
  memset(mine, 'm', len);
  const int rc = post_block(ep, mine, len, &done);
  if (pr.rx >= 0) drain(pr.rx, len);
  printf("backend=%s\nvictim_cancelled=%d\nvictim_past=%d\nvictim_rc=%d\nvictim_done=%d\n"
         "main_rc=%d\nmain_done=%d\n",
         backend_name(), cancelled, v.past, v.rc, v.done, rc, wait_done(&done, 1, 10000));
  return 0;
}

/* send-behind-post: on io_uring, a plain send on a socket waits behind the posts on it; the
 * victim is cancelled in that wait (send is a cancellation point). Then the main thread sends
 * and posts on the same socket. */
struct send_victim {
  int fd;
  int entered;
  ssize_t sent;
};

static void *send_victim(void *arg) {
  struct send_victim *v = arg;
  __atomic_store_n(&v->entered, 1, __ATOMIC_RELEASE);
  v->sent = send(v->fd, "xyz", 3, 0);
  return NULL;
}

static int cmd_send_behind_post(void) {
  struct pair pr;
  if (loopback_pair(&pr)) return 2;
  struct nic_endpoint *ep = nic_uring_endpoint_create(pr.tx);
  if (!ep) {
    printf("endpoint=none\n");
    return 0;
  }
  const size_t len = 4 << 20; /* far more than both socket buffers: the post waits */
  char *block = nic_malloc(len);
  memset(block, 'p', len);
  int done = 0;
  const int post_rc = post_block(ep, block, len, &done);
  struct send_victim v = {pr.tx, 0, -2};
  pthread_t t;
  pthread_create(&t, NULL, send_victim, &v);
  while (!__atomic_load_n(&v.entered, __ATOMIC_ACQUIRE))
    usleep(1000);
  usleep(200 * 1000); /* into the wait */
  pthread_cancel(t);
  void *r = NULL;
  pthread_join(t, &r);
  const size_t got = drain(pr.rx, len);
  const ssize_t sent = send(pr.tx, "end", 3, 0);
  const int posted = wait_done(&done, 1, 10000);
  char tail[8] = {0};
  const ssize_t tail_len = recv(pr.rx, tail, sizeof tail - 1, 0);
  printf("post_rc=%d\nvictim_cancelled=%d\nvictim_sent=%zd\npeer_got=%zu\nmain_sent=%zd\n"
         "post_done=%d\ntail=%.*s\n",
         post_rc, r == PTHREAD_CANCELED, v.sent, got, sent, posted,
         (int)(tail_len > 0 ? tail_len : 0), tail);
  return 0;
}

/* realloc-in-flight: NICMALLOC_REALLOC_INFLIGHT=wait, a block the NIC reads (slow sim DMA): the
 * victim's realloc waits for the DMA, and realloc is no cancellation point. */
struct realloc_victim {
  void *block;
  size_t len;
  void *moved;
  int past;
};

static void *realloc_victim(void *arg) {
  struct realloc_victim *v = arg;
  pthread_cancel(pthread_self());
  v->moved = realloc(v->block, v->len + 16);
  v->past = 1;
  pthread_testcancel();
  return NULL;
}

/* A 64 KiB dataplane block posted on a sim endpoint; the post's status in *rc. */
#define SIM_BLOCK (64 << 10)
static void *sim_posted_block(int *done, int *rc) {
  struct nic_endpoint *ep = nic_sim_endpoint_create(sink_receive, NULL, 0);
  void *block = nic_malloc(SIM_BLOCK);
  if (!ep || !block) {
    *rc = -ENODEV;
    return block;
  }
  memset(block, 'b', SIM_BLOCK);
  *rc = post_block(ep, block, SIM_BLOCK, done);
  return block;
}

static int cmd_realloc_in_flight(void) {
  int done = 0, rc;
  struct realloc_victim v = {sim_posted_block(&done, &rc), SIM_BLOCK, NULL, 0};
  const int in_flight = !__atomic_load_n(&done, __ATOMIC_ACQUIRE);
  const int cancelled = run_victim(realloc_victim, &v);
  const int completed = wait_done(&done, 1, 10000);
  free(v.moved);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("post_rc=%d\nin_flight=%d\nvictim_cancelled=%d\nvictim_past=%d\nvictim_block=%d\n"
         "completed=%d\nfence_waits=%llu\n",
         rc, in_flight, cancelled, v.past, v.moved != NULL, completed,
         (unsigned long long)s.fence_waits);
  return 0;
}

/* fork-pending: a thread with a cancel pending forks (fork is no cancellation point), after a
 * post under NICMALLOC_FENCE=protect started the userfaultfd handler, whose descriptor the
 * child's fork hook closes. The child must come back from fork. */
static void *fork_victim(void *arg) {
  pthread_cancel(pthread_self());
  const pid_t c = fork();
  if (c == 0) _exit(42);
  *(pid_t *)arg = c;
  pthread_testcancel();
  return NULL;
}

static int cmd_fork_pending(void) {
  int done = 0, rc;
  sim_posted_block(&done, &rc);
  const int completed = wait_done(&done, 1, 10000);
  pid_t child = 0;
  const int cancelled = run_victim(fork_victim, &child);
  int st = 0;
  const int status = child > 0 && waitpid(child, &st, 0) == child
                         ? (WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st))
                         : -1;
  printf("post_rc=%d\ncompleted=%d\nvictim_cancelled=%d\nchild_status=%d\n", rc, completed,
         cancelled, status);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  alarm(DEADLOCK_S);
  nic_warm_up_cancel();
  const char *cmd = argc > 1 ? argv[1] : "";
  if (!strcmp(cmd, "open")) return cmd_open();
  if (!strcmp(cmd, "post-poll")) return cmd_post_poll();
  if (!strcmp(cmd, "send-behind-post")) return cmd_send_behind_post();
  if (!strcmp(cmd, "realloc-in-flight")) return cmd_realloc_in_flight();
  if (!strcmp(cmd, "fork-pending")) return cmd_fork_pending();
  fprintf(stderr,
          "usage: %s open | post-poll | send-behind-post | realloc-in-flight | fork-pending\n",
          argv[0]);
  return 2;
}
