/* The sort and the median every C benchmark here takes of its samples. Header-only and free of
 * nicmalloc, so that a program built outside the tree (floor/floor_driver.c) includes it too. */
#ifndef NICMALLOC_BENCH_MEDIAN_H
#define NICMALLOC_BENCH_MEDIAN_H

#include <stdlib.h>

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Sorts v in place; the extremes are then v[0] and v[n - 1]. */
static inline void bench_sort(double *v, size_t n) {
  qsort(v, n, sizeof *v, bench_cmp_double);
}

/* Sorts v in place and returns its median: the middle sample, or with an even count the mean of
 * the two middle ones (the upper one alone leans every even-sized median up). 0 when n is 0. */
static inline double bench_median(double *v, size_t n) {
  if (n == 0) return 0;
  bench_sort(v, n);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
