/* larson: Larson and Krishnan's server simulation as the allocator suites run it (8 - 1000 B
 * blocks, 5000 per thread, threads = processors), every block checked before it is freed. The
 * pattern is bench/workloads/wl_larson.h, which ctl_threads' larson mode runs too. */
#include "suite_mt.h"
#include "wl_larson.h"

enum {
  kReplacePerGen = 100000, /* replacements before the blocks move to a new thread */
  kGensPerScale = 10,      /* generations of threads per lineage */
};

int main(int argc, char **argv) {
  const long gens = wl_scale(argc, argv) * kGensPerScale;
  const int threads = mt_threads(argc, argv, 1);
  larson_run(threads, gens, kReplacePerGen, 1);
  printf("larson ok: %d threads, %ld generations of %d replacements each, malloc from %s\n",
         threads, gens, kReplacePerGen, wl_malloc_lib());
  return 0;
}
