/* nic_probe: threads making their first dataplane allocation at once. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "probe_common.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* n threads released at once each make their first dataplane allocation: with room for all of
 * them in one chunk, one chunk must be mapped, not one per thread. */
static pthread_barrier_t start_line;
static void *first_dp_alloc(void *arg) {
  pthread_barrier_wait(&start_line);
  void *p = nic_malloc((size_t)(uintptr_t)arg);
  return (void *)(uintptr_t)(p && nic_is_dataplane(p));
}

static int threads_start(unsigned n, size_t size) {
  pthread_t threads[64];
  if (n == 0 || n > 64 || pthread_barrier_init(&start_line, NULL, n)) return 1;
  for (unsigned i = 0; i < n; i++)
    if (pthread_create(&threads[i], NULL, first_dp_alloc, (void *)(uintptr_t)size)) return 1;
  unsigned dp = 0;
  for (unsigned i = 0; i < n; i++) {
    void *ok = NULL;
    pthread_join(threads[i], &ok);
    dp += ok != NULL;
  }
  printf("dataplane_threads=%u\n", dp);
  print_stats("");
  return 0;
}

/* The commands: argv[1] names one, its arguments follow (usage in probe.c). */
int cmd_threads_start(int argc, char **argv) {
  (void)argc;
  return threads_start((unsigned)atoi(argv[2]), strtoull(argv[3], NULL, 0));
}
