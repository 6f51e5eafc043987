/* A thread's start and exit in a process whose process-lifetime state (the reaper thread, the
 * default backend) was made on a thread that has exited, against one where the main thread made
 * it. A block made there that outlives its thread leaves the thread's mimalloc segment on the
 * abandoned list, which mimalloc 2.0.9 walks up to 1024 times at every later thread exit
 * (alloc/heap/thread.h, nic_own_thread_create).
 *
 *   thread_exit_cost [threads] [main|thread|register]      (defaults: 3000, thread)
 *
 * main: the process's first dataplane allocation is made on the main thread; thread: on a
 * thread that exits first; register: that thread also registers its block, which opens the
 * default backend (NICMALLOC_BACKEND). Then the threads are started and joined one at a time,
 * each allocating and freeing one dataplane block. Prints the median, minimum and maximum of
 * the microseconds from a thread's start to its join, over rounds of 100 threads. */
#define _GNU_SOURCE
#include <nicmalloc.h>

#include "bench_time.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *first_user(void *do_register) {
  void *p = nic_malloc(5000);
  struct nic_region_ref ref;
  const bool ok = p && (!do_register || nic_register(p, 5000, 0, &ref) == 0);
  free(p);
  return ok ? NULL : (void *)1;
}

static void *worker(void *arg) {
  (void)arg;
  char *p = nic_malloc(1000);
  if (p) p[0] = 1;
  free(p);
  return NULL;
}

enum { ROUND = 100 };

int main(int argc, char **argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 3000;
  const char *first = argc > 2 ? argv[2] : "thread";
  const int rounds = threads / ROUND;
  if (rounds < 1) return 2;
  pthread_t t;
  void *failed = NULL;
  if (!strcmp(first, "main"))
    free(nic_malloc(5000));
  else if (pthread_create(&t, NULL, first_user, strcmp(first, "register") ? NULL : (void *)1) ||
           pthread_join(t, &failed) || failed)
    return fprintf(stderr, "thread_exit_cost: the first thread's allocation failed\n"), 1;
  double *us = malloc(sizeof *us * (size_t)rounds);
  if (!us) return 1;
  for (int r = 0; r < rounds; r++) {
    const double start = bench_ms(CLOCK_MONOTONIC);
    for (int i = 0; i < ROUND; i++)
      if (pthread_create(&t, NULL, worker, NULL) || pthread_join(t, NULL)) return 1;
    us[r] = (bench_ms(CLOCK_MONOTONIC) - start) * 1e3 / ROUND;
  }
  const double median = bench_median(us, (size_t)rounds);
  printf("thread_exit_us first=%s median=%.1f min=%.1f max=%.1f\n", first, median, us[0],
         us[rounds - 1]);
  free(us);
  return 0;
}
