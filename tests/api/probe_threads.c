/* nic_probe: threads making their first dataplane allocation at once. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "probe_common.h"

#include <errno.h>
#include <mimalloc.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* n threads released at once each make their first dataplane allocation and hold it until all
 * have: with room for all of them in one chunk, one chunk must be mapped, not one per thread;
 * and as many threads as the chunks have segments for get dataplane blocks at once. */
static pthread_barrier_t start_line, all_allocated;
static void *first_dp_alloc(void *arg) {
  pthread_barrier_wait(&start_line);
  void *p = nic_malloc((size_t)(uintptr_t)arg);
  const bool dp = p && nic_is_dataplane(p);
  pthread_barrier_wait(&all_allocated);
  nic_free(p);
  return (void *)(uintptr_t)dp;
}

static int threads_start(unsigned n, size_t size) {
  if (n == 0 || n > 4096 || pthread_barrier_init(&start_line, NULL, n) ||
      pthread_barrier_init(&all_allocated, NULL, n))
    return 1;
  pthread_t *threads = calloc(n, sizeof *threads);
  pthread_attr_t small_stack;
  if (!threads || pthread_attr_init(&small_stack) ||
      pthread_attr_setstacksize(&small_stack, (size_t)256 << 10))
    return 1;
  for (unsigned i = 0; i < n; i++)
    if (pthread_create(&threads[i], &small_stack, first_dp_alloc, (void *)(uintptr_t)size)) {
      printf("pthread_create failed at thread %u\n", i);
      return 1;
    }
  unsigned dp = 0;
  for (unsigned i = 0; i < n; i++) {
    void *ok = NULL;
    pthread_join(threads[i], &ok);
    dp += ok != NULL;
  }
  free(threads);
  printf("dataplane_threads=%u\n", dp);
  print_stats("");
  return 0;
}

/* The first thread to allocate dataplane memory, and to register it (which opens the default
 * backend), then exits, leaving nothing of the program's behind. */
static void *first_user(void *arg) {
  void *p = nic_malloc(5000);
  struct nic_region_ref ref;
  int rc = arg && p ? nic_register(p, 5000, 0, &ref) : 0;
  free(p);
  /* endpoint: the dpdk backend's default endpoint too, kept past the thread */
  if (arg == (void *)2 && !rc && !nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0)) rc = -errno;
  return (void *)(intptr_t)rc;
}

/* Appends mimalloc's statistics text to the buffer (no allocation: the text stays on the
 * stack). */
struct text {
  char buf[16384];
  size_t len;
};
static void take_text(const char *msg, void *arg) {
  struct text *t = arg;
  const size_t n = strlen(msg);
  if (t->len + n < sizeof t->buf) {
    memcpy(t->buf + t->len, msg, n);
    t->len += n;
    t->buf[t->len] = '\0';
  }
}

/* mimalloc's count of segments abandoned now (the "current" column of its "abandoned" line), or
 * -1 when its statistics do not say. */
static long abandoned_now(void) {
  static struct text t; /* static: not on a thread's heap, and too big for some stacks */
  t.len = 0;
  t.buf[0] = '\0';
  mi_stats_print_out(take_text, &t);
  const char *line = strstr(t.buf, "abandoned:");
  long peak, total, freed, current;
  if (!line ||
      sscanf(line + strlen("abandoned:"), "%ld %ld %ld %ld", &peak, &total, &freed, &current) != 4)
    return -1;
  return current;
}

/* lifetime-blocks [register|endpoint]: a thread makes the process's first dataplane allocation
 * (which starts the reaper thread), with register opens the default backend, with endpoint also
 * makes the dpdk backend's default endpoint, kept, then exits. What
 * nicmalloc made there for the process's life must not stay in that thread's heap: its segment
 * would be abandoned with a live block, which mimalloc 2.0.9 walks again at every later thread
 * exit (thread.h, nic_own_thread_create). Read before any output, which could allocate. */
static int lifetime_blocks(int what) {
  pthread_t t;
  void *rc = NULL;
  if (pthread_create(&t, NULL, first_user, (void *)(intptr_t)what) || pthread_join(t, &rc))
    return 3;
  const long abandoned = abandoned_now();
  printf("register_rc=%ld\nabandoned_segments=%ld\n", (long)(intptr_t)rc, abandoned);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("backend=%s\n", s.backend);
  return 0;
}

/* The commands: argv[1] names one, its arguments follow (usage in probe.c). */
int cmd_threads_start(int argc, char **argv) {
  (void)argc;
  return threads_start((unsigned)atoi(argv[2]), strtoull(argv[3], NULL, 0));
}

int cmd_lifetime_blocks(int argc, char **argv) {
  const char *what = argc >= 3 ? argv[2] : "";
  return lifetime_blocks(!strcmp(what, "register") ? 1 : !strcmp(what, "endpoint") ? 2 : 0);
}
