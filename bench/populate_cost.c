/* populate_cost: what the kernel alone takes to back memory the way a dataplane step is backed
 * (alloc/os/pin.c: MADV_HUGEPAGE, MADV_POPULATE_WRITE, mlock, one step at a time), with
 * transparent huge pages and with 4 KiB pages, interleaved in each round. No nicmalloc: it
 * tells the host's and kernel's share of a dp4k run's time from the allocator's (bench/README.md,
 * the allocator suite).
 *   build/bench/populate_cost [rounds] [MiB] [step MiB]      (defaults 5, 640, 4)
 * Prints one line per round and page kind: seconds to back the whole size. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds to back total bytes in steps of step bytes; -1 on failure. */
static double back(size_t total, size_t step, int thp) {
  const size_t align = (size_t)2 << 20;
  char *map = mmap(NULL, total + align, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return -1;
  char *p = (char *)(((unsigned long)map + align - 1) & ~(align - 1));
  const double t0 = now();
  int ok = 1;
  for (size_t off = 0; ok && off < total; off += step) {
    if (thp) madvise(p + off, step, MADV_HUGEPAGE);
    ok = !madvise(p + off, step, MADV_POPULATE_WRITE) && !mlock(p + off, step);
  }
  const double secs = ok ? now() - t0 : -1;
  munmap(map, total + align);
  return secs;
}

int main(int argc, char **argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 5;
  const size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 640;
  const size_t step_mib = argc > 3 ? strtoul(argv[3], NULL, 10) : 4;
  if (rounds < 1 || !mib || !step_mib || mib % step_mib) {
    fprintf(stderr, "usage: %s [rounds] [MiB] [step MiB dividing MiB]\n", argv[0]);
    return 2;
  }
  for (int r = 1; r <= rounds; r++)
    for (int thp = 1; thp >= 0; thp--) {
      const double s = back(mib << 20, step_mib << 20, thp);
      if (s < 0) {
        perror("populate_cost: mmap, MADV_POPULATE_WRITE or mlock");
        return 1;
      }
      printf("round %d %s %zu MiB in %zu MiB steps: %.3f s\n", r, thp ? "thp" : "4k", mib, step_mib,
             s);
    }
  return 0;
}
