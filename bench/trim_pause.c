/* What another thread's malloc_trim costs a thread whose free memory it asks for, under whichever
 * malloc the process has (run it plain for glibc's, with LD_PRELOAD for nicmalloc's): a worker
 * thread writes COUNT blocks of SIZE bytes and frees 90% of them at random; the main thread then
 * calls malloc_trim once; the worker goes on allocating and freeing small blocks, ROUNDS rounds
 * of 4096, and each of its mallocs is timed. Prints the trim's time, the worker's slowest malloc,
 * its 99.9th percentile, how many took over a millisecond, and resident anonymous memory before
 * the trim and after the worker's rounds (nicmalloc gives back another thread's pages on that
 * thread, at its allocations; glibc's trim does all of it on the calling thread).
 *   build/bench/trim_pause [COUNT] [SIZE] [ROUNDS]     (defaults 1048576, 256, 200)
 * Not linked with nicmalloc, as trim_cost.c. A shared machine stalls any thread now and then:
 * compare plain and preloaded runs side by side, more than once. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_time.h"
#include "rss_anon.h"

enum { PER_ROUND = 4096 };

static long count, size, rounds;
static pthread_barrier_t step;
static double *took_ns; /* each timed malloc of the worker */

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *worker(void *arg) {
  (void)arg;
  char **b = calloc((size_t)count, sizeof *b);
  if (!b) exit(1);
  for (long i = 0; i < count; i++) {
    if (!(b[i] = malloc((size_t)size))) exit(1);
    memset(b[i], 1, (size_t)size);
  }
  srand(42);
  for (long i = 0; i < count; i++)
    if (rand() % 10) free(b[i]);
  pthread_barrier_wait(&step); /* freed */
  pthread_barrier_wait(&step); /* trimmed */
  void *keep[PER_ROUND];
  for (long r = 0; r < rounds; r++) {
    for (int i = 0; i < PER_ROUND; i++) {
      const double t = now_ns();
      keep[i] = malloc(48 + (size_t)(i % 8) * 16);
      took_ns[r * PER_ROUND + i] = now_ns() - t;
      if (!keep[i]) exit(1);
    }
    for (int i = 0; i < PER_ROUND; i++)
      free(keep[i]);
  }
  return b; /* the live tenth stays until exit */
}

int main(int argc, char **argv) {
  count = argc > 1 ? atol(argv[1]) : 1 << 20;
  size = argc > 2 ? atol(argv[2]) : 256;
  rounds = argc > 3 ? atol(argv[3]) : 200;
  if (count < 1 || count > (1L << 26) || size < 16 || size > (1L << 20) || rounds < 1 ||
      rounds > 10000) {
    fprintf(stderr, "usage: trim_pause [COUNT] [SIZE] [ROUNDS]\n");
    return 2;
  }
  const long n = rounds * PER_ROUND;
  if (!(took_ns = calloc((size_t)n, sizeof *took_ns))) return 1;
  pthread_t t;
  pthread_barrier_init(&step, NULL, 2);
  if (pthread_create(&t, NULL, worker, NULL)) return 1;
  pthread_barrier_wait(&step);
  const long before = bench_rss_anon_kb();
  const double t0 = now_ns();
  malloc_trim(0);
  const double trim_ms = (now_ns() - t0) / 1e6;
  pthread_barrier_wait(&step);
  if (pthread_join(t, NULL)) return 1;
  const long after = bench_rss_anon_kb();
  double sum = 0;
  long over_ms = 0;
  for (long i = 0; i < n; i++) {
    sum += took_ns[i];
    over_ms += took_ns[i] > 1e6;
  }
  bench_sort(took_ns, (size_t)n);
  printf("%ld blocks of %ld bytes, 90%% freed on the worker; malloc_trim on main: %.1f ms\n", count,
         size, trim_ms);
  printf("worker's %ld mallocs after it: slowest %.2f ms, 99.9th percentile %.1f us, %ld over "
         "1 ms, mean %.0f ns\n",
         n, took_ns[n - 1] / 1e6, took_ns[n - n / 1000 - 1] / 1e3, over_ms, sum / (double)n);
  printf("RssAnon: %ld MiB before the trim, %ld MiB after the worker's rounds\n", before >> 10,
         after >> 10);
  return 0;
}
