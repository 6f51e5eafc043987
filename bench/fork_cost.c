/* What fork costs a process with dataplane memory: the parent's fork() call and the whole
 * fork-to-exit of a child that exits at once, over a number of forks, with total bytes of
 * dataplane blocks written before. With hugetlb steps (NICMALLOC_PAGE_KIND=2m and a pool that
 * holds them) the parent copies them for the child at each fork (alloc/heap/fork_hugetlb.c);
 * compare with NICMALLOC_PAGE_KIND=4k (bench/fork_cost.sh runs both, interleaved). With
 * "register", each block is registered with the backend (NICMALLOC_BACKEND) too: io_uring and
 * verbs pin the steps in the kernel, which then copies their pages for the child at each fork
 * (bench/fork_registered.sh compares uring, the sim and none, interleaved).
 *
 *   fork_cost [forks] [total] [register]      (defaults: 21 forks, 64M, not registered)
 *
 * Prints the page kind the steps got and the median, minimum and maximum of each figure. */
#define _GNU_SOURCE
#include "bench_median.h"

#include <nicmalloc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void report(const char *name, double *v, int n) {
  const double median = bench_median(v, (size_t)n);
  printf("%s_ms median=%.3f min=%.3f max=%.3f\n", name, median, v[0], v[n - 1]);
}

int main(int argc, char **argv) {
  const int forks = argc > 1 ? atoi(argv[1]) : 21;
  const size_t total = argc > 2 ? strtoull(argv[2], NULL, 0) << 20 : 64ul << 20, block = 1 << 20;
  const int registered = argc > 3 && !strcmp(argv[3], "register");
  if (forks < 1 || total < block) return 2;
  for (size_t done = 0; done < total; done += block) {
    void *p = nic_malloc(block);
    if (!p) return 3;
    memset(p, 1, block);
    /* Its first and last byte: a block may end in the step after its first (each step is
     * its own registration). */
    struct nic_region_ref ref;
    if (registered && (nic_register(p, 1, NIC_REG_LOCAL, &ref) ||
                       nic_register((char *)p + block - 1, 1, NIC_REG_LOCAL, &ref)))
      return 3;
  }
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("page_kind=%s backed_mib=%zu backend=%s\n", nic_page_kind_name(s.page_kind),
         s.dataplane_backed >> 20, s.backend);
  double *call = calloc((size_t)forks, sizeof *call), *whole = calloc((size_t)forks, sizeof *whole);
  if (!call || !whole) return 3;
  for (int i = 0; i < forks; i++) {
    const double t0 = now_ms();
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    const double t1 = now_ms();
    if (pid < 0) return 4;
    int status;
    waitpid(pid, &status, 0);
    call[i] = t1 - t0;
    whole[i] = now_ms() - t0;
  }
  report("fork_call", call, forks);
  report("fork_to_exit", whole, forks);
  return 0;
}
