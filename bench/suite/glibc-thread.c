/* glibc-thread: modeled on the published description of glibc's benchtests/bench-malloc-thread
 * as the allocator suites run it (threads = processors); written for this repository, not the
 * original program. Each thread keeps a working set of 1024 blocks and, over and over, frees a
 * random one and allocates a block of a random size in its place; sizes run from 4 B to 32 KiB
 * with a probability falling as 1/size, drawn from a precomputed table so that the random number
 * generator costs next to nothing. Unlike the original the iteration count is fixed (not a timed
 * run), so wall time compares, and blocks are written and checked. */
#include <math.h>

#include "suite_mt.h"

enum {
  kWorkingSet = 1024,
  kSizes = 8192,
  kMinSize = 4,
  kMaxSize = 32768,
  kItersPerScale = 2000000,
};

static uint32_t sizes[kSizes];
static long iters;

static void *worker(void *arg) {
  uint64_t seed = 1234567 + (uintptr_t)arg, serial = (uint64_t)(uintptr_t)arg << 40;
  void **ptr = calloc(kWorkingSet, sizeof *ptr);
  uint32_t *len = calloc(kWorkingSet, sizeof *len);
  uint64_t *tag = calloc(kWorkingSet, sizeof *tag);
  if (!ptr || !len || !tag) wl_fail("glibc-thread", "calloc returned NULL");
  for (long i = 0; i < iters; i++) {
    uint64_t r = wl_rand(&seed);
    size_t v = r % kWorkingSet;
    if (ptr[v]) {
      if (!wl_check(ptr[v], len[v], tag[v])) wl_fail("glibc-thread", "block contents changed");
      free(ptr[v]);
    }
    len[v] = sizes[(r >> 20) % kSizes];
    tag[v] = ++serial * 0x9E3779B97F4A7C15ULL;
    if (!(ptr[v] = malloc(len[v]))) wl_fail("glibc-thread", "malloc returned NULL");
    wl_fill(ptr[v], len[v], tag[v]);
  }
  for (int v = 0; v < kWorkingSet; v++)
    if (ptr[v]) {
      if (!wl_check(ptr[v], len[v], tag[v])) wl_fail("glibc-thread", "block contents changed");
      free(ptr[v]);
    }
  free(ptr);
  free(len);
  free(tag);
  return NULL;
}

int main(int argc, char **argv) {
  iters = wl_scale(argc, argv) * kItersPerScale;
  const int threads = mt_threads(argc, argv, 1);
  /* log-uniform between the bounds: density proportional to 1/size */
  uint64_t seed = 88172645463325252ULL;
  for (int i = 0; i < kSizes; i++) {
    double u = (double)(wl_rand(&seed) >> 11) / 9007199254740992.0;
    sizes[i] = (uint32_t)(kMinSize * pow((double)kMaxSize / kMinSize, u));
  }
  pthread_t *t = calloc((size_t)threads, sizeof *t);
  if (!t) wl_fail("glibc-thread", "calloc returned NULL");
  for (int i = 0; i < threads; i++)
    t[i] = mt_start("glibc-thread", worker, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  free(t);
  printf("glibc-thread ok: %d threads, %ld iterations each, malloc from %s\n", threads, iters,
         wl_malloc_lib());
  return 0;
}
