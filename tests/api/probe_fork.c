/* nic_probe: fork with dataplane chunks live. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "probe_common.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* A child forked after dataplane chunks exist reads the parent's blocks, frees one and
 * allocates from both heaps; its first write to a chunk page is a copy-on-write fault. */
static int fork_child(size_t block) {
  unsigned char *a = nic_malloc(block), *b = nic_malloc(block);
  if (!a || !b) {
    printf("setup_failed=%d\n", errno);
    return 3;
  }
  memset(a, 0x11, block);
  memset(b, 0x22, block);
  print_stats("before_fork_");
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30); /* a deadlock becomes SIGALRM */
    int ok = a[0] == 0x11 && a[block - 1] == 0x11 && b[0] == 0x22;
    free(b);
    unsigned char *c = nic_malloc(block), *d = malloc(block);
    if (!c || !d) _exit(4);
    memset(c, 0x33, block);
    memset(d, 0x44, block);
    free(c);
    free(d);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) {
    printf("fork_failed=%d\n", errno);
    return 3;
  }
  printf("child_exit=%d\nchild_signal=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
         WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  int intact = a[0] == 0x11 && a[block - 1] == 0x11 && b[0] == 0x22 && b[block - 1] == 0x22;
  memset(a, 0x55, block); /* the parent still writes its own pages */
  printf("parent_intact=%d\n", intact);
  free(a);
  free(b);
  print_stats("");
  return 0;
}

/* A number from a sysfs file, or 0. */
static long read_long(const char *path) {
  FILE *f = fopen(path, "r");
  long v = 0;
  if (f && fscanf(f, "%ld", &v) != 1) v = 0;
  if (f) fclose(f);
  return v;
}

/* The race a fork handler in the child cannot close: right after each fork the parent writes
 * every 4 KiB page of its blocks (on hugetlb steps, a copy-on-write of each huge page the child
 * shares; with the pool empty the kernel takes the page from the child, which dies of SIGBUS at
 * its next touch), then tells the child, which reads every page (it must see the bytes of the
 * fork), frees and allocates. Counts the children that died or read wrong bytes. */
static int fork_write_race(unsigned rounds, size_t total, size_t block, bool register_first) {
  const size_t n = total / block, page = 4096;
  unsigned char **blocks = calloc(n, sizeof *blocks);
  if (!blocks) return 3;
  signal(SIGPIPE, SIG_IGN); /* a child that died before reading the pipe */
  for (size_t i = 0; i < n; i++) {
    blocks[i] = nic_malloc(block);
    if (!blocks[i]) {
      printf("setup_failed=%d\n", errno);
      return 3;
    }
    memset(blocks[i], 1, block);
  }
  if (register_first) { /* pins the step with the backend (io_uring: FOLL_PIN) */
    struct nic_region_ref ref;
    printf("register_rc=%d\n", nic_register(blocks[0], block, 0, &ref));
  }
  print_stats("before_fork_");
  /* The race needs the pool empty: the free pages of others are held meanwhile (not inherited,
   * so that only the blocks' pages are shared). */
  const size_t huge = 2ul << 20;
  const long avail = read_long("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages") -
                     read_long("/sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages");
  size_t ballast_len = avail > 0 ? (size_t)avail * huge : 0;
  void *ballast = ballast_len
                      ? mmap(NULL, ballast_len, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0)
                      : MAP_FAILED;
  if (ballast == MAP_FAILED)
    ballast_len = 0;
  else
    madvise(ballast, ballast_len, MADV_DONTFORK);
  printf("ballast_pages=%zu\n", ballast_len / huge);
  fflush(stdout);
  unsigned deaths = 0, sigbus = 0, wrong = 0, fork_failures = 0;
  unsigned char at_fork = 1;
  for (unsigned r = 0; r < rounds; r++, at_fork ^= 0xff) {
    int fds[2];
    if (pipe(fds)) return 3;
    pid_t pid = fork();
    if (pid == 0) {
      alarm(30); /* a deadlock becomes SIGALRM */
      close(fds[1]);
      char go;
      if (read(fds[0], &go, 1) != 1) _exit(5);
      int ok = 1;
      for (size_t i = 0; i < n; i++)
        for (size_t off = 0; off < block; off += page)
          ok &= blocks[i][off] == at_fork;
      free(blocks[0]);
      unsigned char *c = nic_malloc(block);
      if (!c) _exit(4);
      memset(c, 0x33, block);
      free(c);
      _exit(ok ? 0 : 1);
    }
    close(fds[0]);
    if (pid < 0) {
      fork_failures++;
      close(fds[1]);
      continue;
    }
    for (size_t i = 0; i < n; i++)
      for (size_t off = 0; off < block; off += page)
        blocks[i][off] = at_fork ^ 0xff;
    if (write(fds[1], "g", 1) != 1 && errno != EPIPE) return 3;
    close(fds[1]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status)) {
      deaths++;
      sigbus += WTERMSIG(status) == SIGBUS;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      wrong++;
    }
  }
  int intact = 1;
  for (size_t i = 0; i < n; i++)
    for (size_t off = 0; off < block; off += page)
      intact &= blocks[i][off] == at_fork;
  printf("rounds=%u\nchild_deaths=%u\nchild_sigbus=%u\nchild_wrong=%u\nfork_failures=%u\n"
         "parent_intact=%d\n",
         rounds, deaths, sigbus, wrong, fork_failures, intact);
  if (ballast_len) munmap(ballast, ballast_len);
  for (size_t i = 0; i < n; i++)
    free(blocks[i]);
  free(blocks);
  print_stats("");
  return 0;
}

/* A thread opening the default backend (the process's first registration): phase 1 just
 * before, 2 after. */
struct opener {
  int phase;
  int rc;
};

static void *open_default_backend(void *arg) {
  struct opener *o = arg;
  void *p = nic_malloc(4096);
  struct nic_region_ref ref;
  __atomic_store_n(&o->phase, 1, __ATOMIC_RELEASE);
  o->rc = p ? nic_register(p, 4096, 0, &ref) : -ENOMEM;
  __atomic_store_n(&o->phase, 2, __ATOMIC_RELEASE);
  free(p);
  return NULL;
}

/* Exit statuses of a child of fork-while-opening. */
enum {
  OPENING_PARENTS = 0,
  OPENING_OWN = 1,
  OPENING_OTHER = 2,
  OPENING_REFUSED = 3,
  OPENING_AFTER = 4,
  OPENING_KINDS
};

/* In a child forked while a backend may be opening: registers a block of its own and says
 * whose backend it sees: the parent's (none of its own), one it opened itself (the fork came
 * before the parent's open began), another one because the parent's open was over (a plugin
 * the parent started is not started again in a child: README, fork), or another than the one
 * asked for for any other reason. Which of the last two the warning says: the child reads its
 * own standard error. */
static int opening_child(const char *want) {
  alarm(30); /* a deadlock becomes SIGALRM */
  int err[2];
  const int stderr_fd = dup(2);
  if (stderr_fd < 0 || pipe(err) || dup2(err[1], 2) < 0) return OPENING_REFUSED;
  void *p = nic_malloc(4096);
  struct nic_region_ref ref;
  const int rc = p ? nic_register(p, 4096, 0, &ref) : -ENOMEM;
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  free(p);
  char said[4096] = {0};
  close(err[1]);
  dup2(stderr_fd, 2);
  const ssize_t n = read(err[0], said, sizeof said - 1);
  if (n > 0 && write(2, said, (size_t)n) != n) return OPENING_REFUSED; /* the test reads them */
  if (!strcmp(s.backend, "none"))
    return rc == 0 || rc == -ENODEV ? OPENING_PARENTS : OPENING_REFUSED;
  if (rc) return OPENING_REFUSED;
  if (!strcmp(s.backend, want)) return OPENING_OWN;
  return n > 0 && strstr(said, "a child of fork leaves it to the parent") ? OPENING_AFTER
                                                                          : OPENING_OTHER;
}

/* fork-while-opening BACKEND: forks every millisecond while another thread opens the backend
 * NICMALLOC_BACKEND names (DPDK's EAL takes a tenth of a second), and counts what the children
 * saw. */
static int fork_while_opening(const char *want) {
  free(nic_malloc(64)); /* the chunk exists: the thread's first block is quick */
  struct opener o = {0, 0};
  pthread_t t;
  if (pthread_create(&t, NULL, open_default_backend, &o)) return 3;
  while (!__atomic_load_n(&o.phase, __ATOMIC_ACQUIRE))
    sched_yield();
  usleep(5000); /* the open has begun: a fork before it would open the child's own */
  unsigned counts[OPENING_KINDS] = {0}, signaled = 0, other_exit = 0, children = 0;
  while (__atomic_load_n(&o.phase, __ATOMIC_ACQUIRE) != 2) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(opening_child(want));
    if (pid < 0) return 3;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    children++;
    if (WIFSIGNALED(status))
      signaled++;
    else if (WIFEXITED(status) && WEXITSTATUS(status) < OPENING_KINDS)
      counts[WEXITSTATUS(status)]++;
    else
      other_exit++;
    usleep(1000);
  }
  pthread_join(t, NULL);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("parent_rc=%d\nparent_backend=%s\nchildren=%u\nchildren_parents=%u\nchildren_own=%u\n"
         "children_other=%u\nchildren_refused=%u\nchildren_after=%u\nchildren_signaled=%u\n"
         "children_other_exit=%u\n",
         o.rc, s.backend, children, counts[OPENING_PARENTS], counts[OPENING_OWN],
         counts[OPENING_OTHER], counts[OPENING_REFUSED], counts[OPENING_AFTER], signaled,
         other_exit);
  return 0;
}

struct registerer {
  int stop;
  unsigned done, failed;
};

/* Registers a fresh mapping again and again: each is a registration-cache miss, which makes a
 * backend registration under the cache's lock (on this thread, not the main one). */
static void *register_fresh_mappings(void *arg) {
  struct registerer *g = arg;
  while (!__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE)) {
    char *p = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) break;
    memset(p, 1, 65536);
    struct nic_region_ref ref;
    if (nic_register(p, 4096, NIC_REG_LOCAL, &ref) == 0) {
      nic_unregister(&ref);
      g->done++;
    } else {
      g->failed++;
    }
    munmap(p, 65536);
  }
  return NULL;
}

/* fork-while-registering MS: forks (children exit at once) for MS milliseconds while another
 * thread makes registrations; a fork handler that waits for a lock in another order than the
 * registration takes them never returns (SIGALRM ends the probe then). */
static int fork_while_registering(unsigned ms) {
  alarm(ms / 1000 + 20);
  struct registerer g = {0, 0, 0};
  pthread_t t;
  if (pthread_create(&t, NULL, register_fresh_mappings, &g)) return 3;
  unsigned forks = 0;
  for (const uint64_t end = probe_now_ms() + ms; probe_now_ms() < end; forks++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid < 0) return 3;
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  __atomic_store_n(&g.stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("forks=%u\nregistrations=%u\nrefused=%u\nbackend=%s\n", forks, g.done, g.failed,
         s.backend);
  return 0;
}

/* fork-after-open HOW: the parent opens its default backend (HOW register: a dataplane
 * registration, with NICMALLOC_BACKEND; HOW sim-endpoint: a sim endpoint made first, which
 * under auto makes the sim the default), then forks once. The child registers a dataplane block
 * of its own and says which backend it has, and whether a DPDK endpoint is refused; the
 * parent says which backend it has. Both print key=value lines. */
static int fork_after_open(const char *how) {
  void *p = nic_malloc(4096);
  struct nic_region_ref ref;
  if (!strcmp(how, "sim-endpoint")) {
    if (!nic_sim_endpoint_create(NULL, NULL, 0)) return 3;
  } else if (!p || nic_register(p, 4096, 0, &ref) != 0) {
    return 3;
  }
  fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return 3;
  if (pid == 0) {
    alarm(30);
    void *q = nic_malloc(4096);
    const int rc = q ? nic_register(q, 4096, 0, &ref) : -ENOMEM;
    struct nic_stats s = NIC_STATS_INIT;
    nic_get_stats(&s);
    errno = 0;
    const bool dpdk = nic_dpdk_endpoint_create(0, 0) != NULL;
    printf("child_register=%d\nchild_backend=%s\nchild_dpdk_endpoint=%s\n", rc, s.backend,
           dpdk              ? "made"
           : errno == ENODEV ? "ENODEV"
                             : "other");
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("child_status=%d\nparent_backend=%s\n", status, s.backend);
  free(p);
  return 0;
}

struct post_done {
  int calls, status;
};
static void post_done_fn(void *arg, int status) {
  struct post_done *d = arg;
  d->status = status;
  d->calls++;
}

/* One dataplane block posted on ep, freed while in flight when free_it, and polled until done:
 * the completion's status, or -ETIMEDOUT. */
static int post_block(struct nic_endpoint *ep, bool free_it, uint64_t *deferred) {
  char *p = nic_malloc(4096);
  if (!p) return -ENOMEM;
  memset(p, 'p', 4096);
  struct nic_sga sga;
  struct post_done d = {0, 0};
  int rc = nic_sga_init(&sga, 0);
  if (!rc) rc = nic_sga_add(&sga, p, 4096);
  if (!rc) rc = nic_sga_post(&sga, ep, post_done_fn, &d);
  if (rc) return rc;
  if (free_it) free(p); /* in flight until nic_poll runs the completion: deferred */
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  if (deferred) *deferred = s.deferred_pending;
  for (int i = 0; i < 5000 && !d.calls; i++)
    if (!nic_poll(0)) usleep(1000);
  if (!free_it) free(p);
  return d.calls ? d.status : -ETIMEDOUT;
}

/* fork-post: the parent posts on a sim endpoint, then forks; the child posts on one of its own
 * and frees the block while it is in flight. Under NICMALLOC_FENCE=protect the child protects
 * its own posts (a mechanism, a poller and a free thread of its own: the parent's did not
 * survive fork) and its deferred free is done once the post completes. */
static int fork_post(void) {
  struct nic_endpoint *ep = nic_sim_endpoint_create(NULL, NULL, 0);
  if (!ep || post_block(ep, false, NULL) != 0) return 3;
  fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return 3;
  if (pid == 0) {
    alarm(30);
    struct nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
    nic_get_stats(&before);
    struct nic_endpoint *own = nic_sim_endpoint_create(NULL, NULL, 0);
    uint64_t deferred = 0;
    const int rc = own ? post_block(own, true, &deferred) : -ENODEV;
    for (int i = 0; i < 1000; i++) {
      nic_get_stats(&after);
      if (!after.deferred_pending) break;
      usleep(1000);
    }
    printf("child_post=%d\nchild_deferred_in_flight=%llu\nchild_deferred_after=%llu\n"
           "child_unprotected=%llu\n",
           rc, (unsigned long long)deferred, (unsigned long long)after.deferred_pending,
           (unsigned long long)(after.fence_unprotected - before.fence_unprotected));
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  printf("child_status=%d\nparent_post=%d\n", status, post_block(ep, true, NULL));
  return 0;
}

/* fork-event-set: the parent asks for its thread's event descriptor before any backend opened
 * (the backends' set, empty, is in it), then forks. The child opens a sim backend of its own and
 * posts without polling, until its own thread descriptor polls readable; then the parent looks
 * whether its descriptor polls readable too, with no backend and nothing posted of its own. */
static int fork_event_set(void) {
  const int mine = nic_thread_event_fd();
  int ready[2], leave[2];
  if (mine < 0 || pipe(ready) || pipe(leave)) return 3;
  fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return 3;
  if (pid == 0) {
    alarm(30);
    const int own = nic_thread_event_fd();
    struct nic_endpoint *ep = nic_sim_endpoint_create(NULL, NULL, 0);
    char *p = nic_malloc(4096);
    struct nic_sga sga;
    int rc = !ep || !p || own < 0 ? -ENODEV : nic_sga_init(&sga, 0);
    if (!rc) rc = nic_sga_add(&sga, p, 4096);
    if (!rc) rc = nic_sga_post(&sga, ep, NULL, NULL);
    struct pollfd pf = {.fd = own, .events = POLLIN};
    const int readable = rc ? 0 : poll(&pf, 1, 10000);
    printf("child_post=%d\nchild_readable=%d\n", rc, readable);
    fflush(stdout);
    char c = 0;
    if (write(ready[1], &c, 1) != 1 || read(leave[0], &c, 1) != 1) _exit(4);
    _exit(0);
  }
  char c = 0;
  if (read(ready[0], &c, 1) != 1) return 3;
  struct pollfd pf = {.fd = mine, .events = POLLIN};
  printf("parent_readable=%d\n", poll(&pf, 1, 0));
  fflush(stdout);
  if (write(leave[1], &c, 1) != 1) return 3;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  printf("child_status=%d\n", status);
  return 0;
}

/* The commands: argv[1] names one, its arguments follow (usage in probe.c). */
int cmd_fork_child(int argc, char **argv) {
  (void)argc;
  return fork_child(strtoull(argv[2], NULL, 0));
}

int cmd_fork_write_race(int argc, char **argv) {
  return fork_write_race((unsigned)atoi(argv[2]), strtoull(argv[3], NULL, 0),
                         strtoull(argv[4], NULL, 0), argc >= 6 && !strcmp(argv[5], "register"));
}

int cmd_fork_while_opening(int argc, char **argv) {
  (void)argc;
  return fork_while_opening(argv[2]);
}

int cmd_fork_after_open(int argc, char **argv) {
  (void)argc;
  return fork_after_open(argv[2]);
}

int cmd_fork_post(int argc, char **argv) {
  (void)argc, (void)argv;
  return fork_post();
}

int cmd_fork_event_set(int argc, char **argv) {
  (void)argc, (void)argv;
  return fork_event_set();
}

int cmd_fork_while_registering(int argc, char **argv) {
  (void)argc;
  return fork_while_registering((unsigned)atoi(argv[2]));
}
