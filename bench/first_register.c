/* What a step's first registration costs now that a step of ordinary pages is locked as it is
 * touched and faulted in whole only before its first registration (alloc/heap/steps.c,
 * nic_step_populate_locked): the populate moved from the step's backing to here. One process:
 * a first step is registered to set the backend up, then each of the next steps gets one block
 * written and one nic_register, timed (wall and this thread's CPU); the second registration of
 * the same step is timed too (the registration cache's hit). Run it with the environment under
 * test (NICMALLOC_BACKEND=sim, NICMALLOC_DP_POPULATE, NICMALLOC_PAGE_KIND, NICMALLOC_PIN_STEP).
 *   build/bench/first_register [steps]      (default 9)
 * Prints the median and the worst of each figure. */
#include "bench_time.h"

#include <stdint.h>
#include <stdio.h>

enum { BLOCK = 65536 };

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 9;
  if (steps < 1 || steps > 1000) steps = 9;
  struct nic_stats st;
  char *p = nic_malloc(BLOCK);
  if (!p) return 1;
  p[0] = 1;
  bench_read_stats(&st);
  const uintptr_t step = st.pin_step ? st.pin_step : (uintptr_t)4 << 20;
  struct nic_region_ref ref;
  if (nic_register(p, BLOCK, NIC_REG_LOCAL, &ref)) {
    fprintf(stderr,
            "first_register: nic_register failed: is a backend there (NICMALLOC_BACKEND)?\n");
    return 1;
  }
  static double first_wall[1000], first_cpu[1000], again_cpu[1000];
  uintptr_t last = (uintptr_t)p / step;
  for (int s = 0; s < steps; s++) {
    char *q;
    do {
      q = nic_malloc(BLOCK); /* kept: the steps stay backed and registered */
      if (!q) return 1;
    } while ((uintptr_t)q / step == last);
    last = (uintptr_t)q / step;
    q[0] = 1;
    struct nic_region_ref r1, r2;
    double w0 = bench_ms(CLOCK_MONOTONIC), c0 = bench_ms(CLOCK_THREAD_CPUTIME_ID);
    int rc = nic_register(q, BLOCK, NIC_REG_LOCAL, &r1);
    double c1 = bench_ms(CLOCK_THREAD_CPUTIME_ID), w1 = bench_ms(CLOCK_MONOTONIC);
    rc |= nic_register(q + 4096, 4096, NIC_REG_LOCAL, &r2);
    double c2 = bench_ms(CLOCK_THREAD_CPUTIME_ID);
    if (rc) {
      fprintf(stderr, "first_register: step %d: nic_register failed\n", s);
      return 1;
    }
    first_wall[s] = w1 - w0, first_cpu[s] = c1 - c0, again_cpu[s] = c2 - c1;
  }
  printf("%d steps of %zu KiB, each its first registration\n", steps, (size_t)(step >> 10));
  static const char *names[] = {"first registration ms", "first registration CPU ms",
                                "second registration CPU ms"};
  double *v[] = {first_wall, first_cpu, again_cpu};
  for (int f = 0; f < 3; f++) {
    const double median = bench_median(v[f], (size_t)steps);
    printf("  %-30s median %9.3f   max %9.3f\n", names[f], median, v[f][steps - 1]);
  }
  return 0;
}
