/* What the small by-hand benchmarks (first_register.c, stats_cost.c, thread_exit_cost.c,
 * trim_cost.c, trim_pause.c) share: a clock read in milliseconds, a stats read, and the sort and
 * median of their samples (bench_median.h). Header-only so that each stays one source file in
 * bench/CMakeLists.txt. */
#ifndef NICMALLOC_BENCH_TIME_H
#define NICMALLOC_BENCH_TIME_H

#include "bench_median.h"

#include <nicmalloc.h>

#include <string.h>
#include <time.h>

static inline double bench_ms(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* nic_get_stats checks the caller's size, so every read starts from a cleared, sized struct. */
static inline void bench_read_stats(struct nic_stats *st) {
  memset(st, 0, sizeof *st);
  st->size = sizeof *st;
  nic_get_stats(st);
}

#endif
