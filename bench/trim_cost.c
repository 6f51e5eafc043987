/* What malloc_trim gives back and costs, and what the frees after it cost, under whichever
 * malloc the process has (run it plain for glibc's, with LD_PRELOAD for nicmalloc's or a peer's):
 *  1. one trim in a process that has freed one small block (the walk's fixed cost);
 *  2. COUNT blocks of SIZE bytes written, 90% freed at random, two trims: resident anonymous
 *     memory before and after, and each trim's time;
 *  3. the rest freed, COUNT blocks allocated again (pages a trim gave back are built anew), and
 *     the time of a free of each, the median of ROUNDS rounds.
 *   build/bench/trim_cost [COUNT] [SIZE] [ROUNDS]      (defaults 1048576, 256, 5)
 * Not linked with nicmalloc: malloc_trim is glibc's name, nicmalloc answers it when preloaded. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_time.h"
#include "rss_anon.h"

int main(int argc, char **argv) {
  const long count = argc > 1 ? atol(argv[1]) : 1 << 20;
  const long size = argc > 2 ? atol(argv[2]) : 256;
  const int rounds = argc > 3 ? atoi(argv[3]) : 5;
  if (count < 1 || count > (1L << 26) || size < 16 || size > (1L << 20) || rounds < 1 ||
      rounds > 100) {
    fprintf(stderr, "usage: trim_cost [COUNT] [SIZE] [ROUNDS]\n");
    return 2;
  }
  free(malloc(100));
  double t0 = bench_ms(CLOCK_MONOTONIC);
  malloc_trim(0);
  printf("trim in a fresh process: %.2f ms\n", bench_ms(CLOCK_MONOTONIC) - t0);

  char **b = calloc((size_t)count, sizeof *b);
  if (!b) return 1;
  for (long i = 0; i < count; i++) {
    if (!(b[i] = malloc((size_t)size))) return 1;
    memset(b[i], 1, (size_t)size);
  }
  const long full = bench_rss_anon_kb();
  srand(42);
  for (long i = 0; i < count; i++)
    if (rand() % 10) {
      free(b[i]);
      b[i] = NULL;
    }
  const long freed = bench_rss_anon_kb();
  t0 = bench_ms(CLOCK_MONOTONIC);
  malloc_trim(0);
  const double first = bench_ms(CLOCK_MONOTONIC) - t0;
  const long trimmed = bench_rss_anon_kb();
  t0 = bench_ms(CLOCK_MONOTONIC);
  malloc_trim(0);
  const double second = bench_ms(CLOCK_MONOTONIC) - t0;
  printf("%ld blocks of %ld bytes, 90%% freed: RssAnon %ld MiB full, %ld freed, %ld trimmed\n",
         count, size, full >> 10, freed >> 10, trimmed >> 10);
  printf("trims: first %.1f ms, second %.1f ms\n", first, second);

  double *ns = calloc((size_t)rounds, sizeof *ns);
  if (!ns) return 1;
  for (long i = 0; i < count; i++)
    free(b[i]);
  for (int r = 0; r < rounds; r++) {
    for (long i = 0; i < count; i++)
      if (!(b[i] = malloc((size_t)size))) return 1;
    t0 = bench_ms(CLOCK_MONOTONIC);
    for (long i = 0; i < count; i++)
      free(b[i]);
    ns[r] = (bench_ms(CLOCK_MONOTONIC) - t0) * 1e6 / (double)count;
  }
  const double median = bench_median(ns, (size_t)rounds);
  printf("free after the trims: median %.1f ns (min %.1f, max %.1f, %d rounds)\n", median, ns[0],
         ns[rounds - 1], rounds);
  free(ns);
  free(b);
  return 0;
}
