/* Resident anonymous memory of the calling process, from /proc/self/status: what the by-hand
 * benchmarks that run one binary plain and preloaded (trim_cost.c, trim_pause.c) compare.
 * Header-only, as bench_time.h. */
#ifndef NICMALLOC_BENCH_RSS_ANON_H
#define NICMALLOC_BENCH_RSS_ANON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* In KiB; -1 when the line cannot be read. */
static inline long bench_rss_anon_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "RssAnon:", 8)) kb = atol(line + 8);
  if (f) fclose(f);
  return kb;
}

#endif
