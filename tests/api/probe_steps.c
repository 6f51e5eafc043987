/* nic_probe: dataplane steps: what backing one reads, and giving one back. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "probe_common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void drop_message(void *arg, void *data, size_t len) {
  (void)arg, (void)data, (void)len;
}
static int step_posts_done;
static void step_post_done(void *arg, int status) {
  (void)arg, (void)status;
  step_posts_done++;
}

/* Whether the step under p was given back: its stale pointers then translate to no key. Asked
 * of the step itself, as other steps may go meanwhile (the sim endpoint's freed buffers). */
static bool step_given_back(const void *p) {
  struct nic_region_ref ref;
  return nic_translate(p, 4096, &ref) == 0 && ref.lkey == 0;
}

/* A 20 MiB block gets a step of its own beside a small block that keeps the chunk live; it is
 * registered, then freed: after a nic_hold of it (hold 1), or after a post of it to a sim
 * endpoint whose completion nothing polls for yet (hold 2). Waits up to wait_ms for the step to
 * be given back, ends the hold or polls the post's completion, then says what the block's stale
 * pointer translates to and what a new block there gets. */
static int step_release(int hold, unsigned wait_ms) {
  void *keep = nic_malloc(64);
  const size_t big = 20u << 20;
  char *b = nic_malloc(big);
  if (!keep || !b) return 1;
  memset(b, 1, big);
  struct nic_region_ref ref;
  int rc = nic_register(b, 4096, NIC_REG_LOCAL, &ref);
  printf("first_rc=%d\nfirst_lkey=%u\n", rc, ref.lkey);
  printf("pinned_before=%zu\nbacked_before=%zu\n", stats_now().dataplane_pinned,
         stats_now().dataplane_backed);
  if (hold == 1 && nic_hold(b)) return 1;
  struct nic_endpoint *ep = hold == 2 ? nic_sim_endpoint_create(drop_message, NULL, 0) : NULL;
  if (hold == 2) {
    struct nic_sga sga;
    if (!ep || nic_sga_init(&sga, 0) || nic_sga_add(&sga, b, 1 << 20) ||
        nic_sga_post(&sga, ep, step_post_done, NULL))
      return 1;
  }
  free(b);
  const uint64_t deadline = probe_now_ms() + wait_ms;
  while (!step_given_back(b) && probe_now_ms() < deadline)
    usleep(10000);
  printf("released_while_held=%d\n", step_given_back(b));
  if (hold) {
    if (hold == 1) nic_release(b);
    while (hold == 2 && !step_posts_done)
      nic_poll(0);
    const uint64_t again = probe_now_ms() + 10000;
    while (!step_given_back(b) && probe_now_ms() < again)
      usleep(10000);
  }
  printf("given_back=%d\n", step_given_back(b));
  struct nic_stats s = stats_now();
  printf("released=%llu\npinned_after=%zu\nbacked_after=%zu\nvmlck_after_kb=%ld\n",
         (unsigned long long)s.steps_released, s.dataplane_pinned, s.dataplane_backed, vmlck_kb());
  rc = nic_translate(b, 4096, &ref);
  printf("stale_rc=%d\nstale_lkey=%u\n", rc, ref.lkey);
  char *c = nic_malloc(big);
  if (!c) return 1;
  memset(c, 2, big);
  printf("same_place=%d\n", c == b);
  rc = nic_register(c, 4096, NIC_REG_LOCAL, &ref);
  printf("again_rc=%d\nagain_lkey=%u\n", rc, ref.lkey);
  printf("pinned_again=%zu\nbacked_again=%zu\n", stats_now().dataplane_pinned,
         stats_now().dataplane_backed);
  free(c);
  free(keep);
  return 0;
}

/* The receiving end of a loopback TCP connection, read until it closes. */
static void *drain_socket(void *arg) {
  static char buf[1 << 16];
  while (read((int)(intptr_t)arg, buf, sizeof buf) > 0) {
  }
  return NULL;
}

/* An io_uring endpoint on a loopback TCP connection whose receiver a thread drains, or NULL. */
static struct nic_endpoint *uring_loopback_endpoint(void) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  int l = socket(AF_INET, SOCK_STREAM, 0), tx = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0 || tx < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
      getsockname(l, (struct sockaddr *)&a, &alen) || connect(tx, (struct sockaddr *)&a, alen))
    return NULL;
  const int rx = accept(l, NULL, NULL);
  close(l);
  pthread_t t;
  if (rx < 0 || pthread_create(&t, NULL, drain_socket, (void *)(intptr_t)rx)) return NULL;
  pthread_detach(t);
  return nic_uring_endpoint_create(tx);
}

/* A 20 MiB block on a step of its own is added to an array and freed before the post; once its
 * step was given back the post is tried (the step's key is dead), then again after a new block
 * there got the step registered anew (the key names that block; io_uring hands out the same
 * one). Says what each post returned, whether the array kept its entry, and what a post of the
 * new block itself returns. uring: to an io_uring endpoint, else a sim one. */
static int step_freed_entry(unsigned wait_ms, bool uring) {
  void *keep = nic_malloc(64);
  const size_t big = 20u << 20;
  char *b = nic_malloc(big);
  struct nic_endpoint *ep =
      uring ? uring_loopback_endpoint() : nic_sim_endpoint_create(drop_message, NULL, 0);
  struct nic_sga sga;
  if (!keep || !b || !ep || nic_sga_init(&sga, 0)) return 1;
  memset(b, 1, big);
  printf("add_rc=%d\n", nic_sga_add(&sga, b, 1 << 20));
  free(b);
  const uint64_t deadline = probe_now_ms() + wait_ms;
  while (!step_given_back(b) && probe_now_ms() < deadline)
    usleep(10000);
  printf("given_back=%d\n", step_given_back(b));
  printf("gone_rc=%d\nkept_after_gone=%u\n", nic_sga_post(&sga, ep, step_post_done, NULL),
         sga.count);
  char *c = nic_malloc(big);
  if (!c) return 1;
  memset(c, 2, big);
  struct nic_region_ref ref;
  const int reg_rc = nic_register(c, 4096, NIC_REG_LOCAL, &ref);
  printf("same_place=%d\nnew_key=%d\nsame_key=%d\n", c == b,
         reg_rc == 0 && ref.lkey != sga.entry[0].lkey,
         reg_rc == 0 && ref.lkey == sga.entry[0].lkey && ref.backend_handle == sga.entry[0].handle);
  printf("reused_rc=%d\nkept_after_reused=%u\n", nic_sga_post(&sga, ep, step_post_done, NULL),
         sga.count);
  nic_sga_reset(&sga);
  int rc = nic_sga_add(&sga, c, 1 << 20);
  if (!rc) rc = nic_sga_post(&sga, ep, step_post_done, NULL);
  while (!rc && !step_posts_done)
    nic_poll(0);
  printf("fresh_rc=%d\nposts_done=%d\n", rc, step_posts_done);
  free(c);
  free(keep);
  return 0;
}

/* The read system calls (/proc/self/io) a dataplane step backed costs: count blocks of size
 * bytes, each on steps of its own, kept until the end. */
static long long read_calls(void) {
  FILE *f = fopen("/proc/self/io", "r");
  char line[128];
  long long n = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "syscr:", 6)) n = strtoll(line + 6, NULL, 10);
  if (f) fclose(f);
  return n;
}

static int step_reads(unsigned count, size_t size) {
  void *first = nic_malloc(size); /* the chunk, the thread's heap and the first look made */
  const unsigned long long backed_before = stats_now().steps_backed;
  const long long reads_before = read_calls();
  void **blocks = calloc(count, sizeof *blocks);
  for (unsigned i = 0; i < count; i++)
    if (!(blocks[i] = nic_malloc(size))) return 1;
  const long long reads = read_calls() - reads_before - 1; /* less the stats read between */
  const unsigned long long steps = stats_now().steps_backed - backed_before;
  printf("steps=%llu\nreads=%lld\n", steps, reads);
  for (unsigned i = 0; i < count; i++)
    free(blocks[i]);
  free(blocks);
  free(first);
  return 0;
}

/* Waits up to wait_ms for the pinned bytes and steps to fall to one segment's (32 MiB; 4 MiB
 * steps): its pages given back, and then the steps. Says where they stand then. */
static void wait_for_one_segment(unsigned wait_ms) {
  const uint64_t deadline = probe_now_ms() + wait_ms;
  struct nic_stats s = stats_now();
  while ((s.dataplane_pinned > (32u << 20) || s.steps_pinned > 8) && probe_now_ms() < deadline) {
    usleep(10000);
    s = stats_now();
  }
  printf("pinned_after=%zu\nsteps_after=%u\nreleased=%llu\nlive_after=%zu\n", s.dataplane_pinned,
         s.steps_pinned, (unsigned long long)s.steps_released, s.dataplane_live);
}

/* Blocks of 1 MiB fill whole segments beside a small block that keeps the thread's first one;
 * freed, the segments they filled go whole to mimalloc's segment cache, which keeps them
 * committed until an allocation or a forced collect purges it, and this thread then only sleeps.
 * Waits up to wait_ms for the pinned bytes and steps to fall to one segment's. */
static int step_cached(unsigned wait_ms) {
  void *keep = nic_malloc(64);
  enum { kBlocks = 96 };
  char *blocks[kBlocks];
  for (int i = 0; i < kBlocks; i++) {
    if (!(blocks[i] = nic_malloc(1u << 20))) return 1;
    memset(blocks[i], 1, 1u << 20);
  }
  printf("pinned_full=%zu\n", stats_now().dataplane_pinned);
  for (int i = 0; i < kBlocks; i++)
    free(blocks[i]);
  wait_for_one_segment(wait_ms);
  free(keep);
  return 0;
}

enum { kProducers = 4, kProduced = 200 };
static char *produced[kProducers][kProduced];

/* Blocks of 1 KB-200 KB (small and medium pages, 92 MB in all). */
static void *produce(void *arg) {
  char **mine = arg;
  for (int i = 0; i < kProduced; i++) {
    const size_t size = 1000 + (size_t)i * 7919 % 200000;
    if (!(mine[i] = nic_malloc(size))) return NULL;
    memset(mine[i], 1, size);
  }
  return NULL;
}

/* Threads fill dataplane segments of their own and exit, leaving them to mimalloc's abandoned
 * list with every block live; this thread frees the blocks and then only sleeps. mimalloc frees
 * an abandoned segment only when a heap visits it. Waits up to wait_ms for the pinned bytes and
 * steps to fall to one segment's (this thread's small block). */
static int step_abandoned(unsigned wait_ms) {
  void *keep = nic_malloc(64);
  pthread_t threads[kProducers];
  for (int t = 0; t < kProducers; t++)
    if (pthread_create(&threads[t], NULL, produce, produced[t])) return 1;
  for (int t = 0; t < kProducers; t++)
    pthread_join(threads[t], NULL);
  printf("pinned_full=%zu\n", stats_now().dataplane_pinned);
  for (int t = 0; t < kProducers; t++)
    for (int i = 0; i < kProduced; i++) {
      if (!produced[t][i]) return 1;
      free(produced[t][i]);
    }
  wait_for_one_segment(wait_ms);
  free(keep);
  return 0;
}

/* The commands: argv[1] names one, its arguments follow (usage in probe.c). */
int cmd_step_reads(int argc, char **argv) {
  (void)argc;
  return step_reads((unsigned)strtoul(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
}

int cmd_step_release(int argc, char **argv) {
  (void)argc;
  return step_release(atoi(argv[2]), (unsigned)atoi(argv[3]));
}

int cmd_step_freed_entry(int argc, char **argv) {
  (void)argc;
  return step_freed_entry((unsigned)atoi(argv[2]), argc > 3 && !strcmp(argv[3], "uring"));
}

int cmd_step_cached(int argc, char **argv) {
  (void)argc;
  return step_cached((unsigned)atoi(argv[2]));
}

int cmd_step_abandoned(int argc, char **argv) {
  (void)argc;
  return step_abandoned((unsigned)atoi(argv[2]));
}
