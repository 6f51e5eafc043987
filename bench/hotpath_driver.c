/* A fixed number of malloc/free pairs of one size through one allocator, for callgrind:
 *   hotpath_driver glibc|mimalloc|nic_control|nic_dataplane [pairs, default 100000] [bytes, 64]
 * Each allocator has its own loop_<allocator> function; bench/callgrind_hotpaths.sh collects only
 * that function (--toggle-collect), after a warm-up that runs outside it. */
#include "bench_allocators.h"

enum { kWarmup = 10000 };
static size_t pair_bytes = 64;

/* The empty asm makes p escape, so neither the touch nor the pair can be optimised away. */
#define PAIR_LOOP(name, ALLOC, FREE)                                                               \
  __attribute__((noinline)) void name(long n) {                                                    \
    for (long i = 0; i < n; i++) {                                                                 \
      char *p = (char *)ALLOC(pair_bytes);                                                         \
      p[0] = (char)i;                                                                              \
      __asm__ volatile("" : : "r"(p) : "memory");                                                  \
      FREE(p);                                                                                     \
    }                                                                                              \
  }

PAIR_LOOP(loop_glibc, glibc_malloc, glibc_free)
PAIR_LOOP(loop_mimalloc, mi_malloc, mi_free)
PAIR_LOOP(loop_nic_control, malloc, free)
PAIR_LOOP(loop_nic_dataplane, nic_malloc, free)

static void warm_up(bench_malloc_fn alloc, bench_free_fn release) {
  static void *ptrs[kWarmup];
  for (int i = 0; i < kWarmup; i++)
    ptrs[i] = alloc(pair_bytes);
  for (int i = 0; i < kWarmup; i++)
    release(ptrs[i]);
}

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    void (*loop)(long);
  } loops[] = {{"glibc", loop_glibc},
               {"mimalloc", loop_mimalloc},
               {"nic_control", loop_nic_control},
               {"nic_dataplane", loop_nic_dataplane}};
  long pairs = argc > 2 ? atol(argv[2]) : 100000;
  if (argc > 3) pair_bytes = (size_t)atol(argv[3]);
  bench_init();
  bench_malloc_fn allocs[] = {glibc_malloc, mi_malloc, malloc, nic_malloc};
  bench_free_fn frees[] = {glibc_free, mi_free, free, free};
  for (int i = 0; argc > 1 && i < 4; i++) {
    if (strcmp(argv[1], loops[i].name) != 0) continue;
    warm_up(allocs[i], frees[i]);
    loops[i].loop(pairs);
    printf("%s: %ld pairs of %zu B\n", loops[i].name, pairs, pair_bytes);
    return 0;
  }
  fprintf(stderr, "usage: %s glibc|mimalloc|nic_control|nic_dataplane [pairs] [bytes]\n", argv[0]);
  return 2;
}
