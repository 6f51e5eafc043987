/* 64-byte malloc/free pairs through mimalloc directly, through a forwarding interposer, through
 * the least checked one (floor_wrap.c) and through the process's malloc/free (mimalloc's own
 * unless a preloaded allocator such as libnicmalloc takes them), interleaved; prints the median
 * ns per pair of each. callgrind counts one loop at a time with --toggle-collect=loop_<name>. */
#include "../bench_median.h"

#include <mimalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void *forward_malloc(size_t size);
void forward_free(void *p);
void *keyed_malloc(size_t size);
void keyed_free(void *p);

#define PAIRS(alloc, release)                                                                      \
  for (long i = 0; i < n; i++) {                                                                   \
    char *p = alloc(64);                                                                           \
    p[0] = 1;                                                                                      \
    __asm__ volatile("" ::"r"(p) : "memory");                                                      \
    release(p);                                                                                    \
  }

__attribute__((noinline)) void loop_mimalloc(long n) {
  PAIRS(mi_malloc, mi_free)
}
__attribute__((noinline)) void loop_forward(long n) {
  PAIRS(forward_malloc, forward_free)
}
__attribute__((noinline)) void loop_keyed(long n) {
  PAIRS(keyed_malloc, keyed_free)
}
__attribute__((noinline)) void loop_malloc(long n) {
  PAIRS(malloc, free)
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

enum { kinds = 4, max_reps = 99 };

int main(int argc, char **argv) {
  const long n = argc > 1 ? atol(argv[1]) : 10000000;
  int reps = argc > 2 ? atoi(argv[2]) : 9;
  if (n <= 0 || reps <= 0 || reps > max_reps) {
    fprintf(stderr, "usage: floor_driver [pairs > 0] [repetitions 1-%d]\n", max_reps);
    return 2;
  }
  void (*loops[kinds])(long) = {loop_mimalloc, loop_forward, loop_keyed, loop_malloc};
  const char *names[kinds] = {"mimalloc", "forward", "keyed", "malloc"};
  static double ns[kinds][max_reps];
  /* One block kept live, as bench/malloc_compare's is: without it every free empties the page
   * and takes mimalloc's page-retire path. All three allocate from the same mimalloc heap. */
  void *resident = mi_malloc(64);
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < kinds; k++) {
      double start = now_ns();
      loops[k](n);
      ns[k][r] = (now_ns() - start) / n;
    }
  double median[kinds];
  for (int k = 0; k < kinds; k++)
    median[k] = bench_median(ns[k], (size_t)reps);
  for (int k = 0; k < kinds; k++)
    printf("%-9s %6.2f ns  ratio %.3f\n", names[k], median[k], median[k] / median[0]);
  mi_free(resident);
  return 0;
}
