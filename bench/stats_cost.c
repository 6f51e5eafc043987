/* What a stats read costs with many dataplane steps backed: nic_get_stats walks every backed
 * step (nic_chunk_totals), as the reaper's peak sample does once per pass (peaks.h), with the
 * chunk lock held. A step locked as it is touched is asked of the kernel (mincore) for the pages
 * it holds, until it is found wholly in memory; a step faulted in whole is not. Backs MiB of
 * steps with 64 KiB blocks, the first bytes of each written (one byte: few steps are ever whole;
 * 65536: most are), then times reads (this thread's CPU).
 *   build/bench/stats_cost [MiB] [reads] [bytes]      (defaults 1024, 50, 1)
 * Run it with the environment under test (NICMALLOC_DP_POPULATE, NICMALLOC_PAGE_KIND). */
#include "bench_time.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  long mib = argc > 1 ? atol(argv[1]) : 1024;
  int reads = argc > 2 ? atoi(argv[2]) : 50;
  if (mib < 1 || mib > (1 << 20)) mib = 1024;
  if (reads < 1 || reads > 10000) reads = 50;
  long bytes = argc > 3 ? atol(argv[3]) : 1;
  if (bytes < 1 || bytes > 65536) bytes = 1;
  for (long i = 0; i < mib * 16; i++) {
    char *p = nic_malloc(65536); /* kept to the end */
    if (!p) return 1;
    memset(p, 1, (size_t)bytes);
  }
  struct nic_stats st;
  double *v = calloc((size_t)reads, sizeof *v);
  if (!v) return 1;
  for (int r = 0; r < reads; r++) {
    double c0 = bench_ms(CLOCK_THREAD_CPUTIME_ID);
    bench_read_stats(&st);
    v[r] = bench_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
  }
  const double median = bench_median(v, (size_t)reads);
  printf("backed %zu MiB (%llu steps backed so far), pinned (in memory and locked) %zu MiB\n",
         st.dataplane_backed >> 20, (unsigned long long)st.steps_backed, st.dataplane_pinned >> 20);
  printf("  nic_get_stats CPU ms   median %8.3f   min %8.3f   max %8.3f   (%d reads)\n", median,
         v[0], v[reads - 1], reads);
  free(v);
  return 0;
}
