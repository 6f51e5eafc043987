/* rptest: modeled on the published description of rpmalloc's benchmark as the allocator suites
 * run it (threads = processors, blocks of 8 - 16000 B, 1000 blocks per loop, cross-thread passes
 * every other loop); written for this repository, not the original program. Each thread, loop
 * after loop, allocates a working set of blocks of random sizes (small ones far more often: the
 * probability falls as 1/size), replaces random blocks in it, and then either frees the set or,
 * every other loop, hands it to the next thread in a ring and frees the sets the previous thread
 * handed over. Unlike the original the threads are not restarted between loops. */
#include <math.h>

#include "suite_mt.h"

enum {
  kBlocks = 1000,
  kOps = 1000, /* random replacements per loop */
  kMinSize = 8,
  kMaxSize = 16000,
  kSizes = 8192,
  kCrossEvery = 2,
  kLoopsPerScale = 600,
};

static uint32_t sizes[kSizes];
static long loops;
static int threads;
static struct mt_box *boxes; /* boxes[t]: the set thread t is handed */

static void free_set(void **set) {
  for (int i = 0; i < kBlocks; i++)
    obj_free("rptest", set[i], kMaxSize);
  free(set);
}

static void *worker(void *arg) {
  const int me = (int)(uintptr_t)arg;
  uint64_t seed = 0x5eed + (uint64_t)me, serial = (uint64_t)me << 40;
  long received = 0;
  for (long l = 0; l < loops; l++) {
    void **set = malloc(kBlocks * sizeof *set); /* crosses threads with its blocks */
    if (!set) wl_fail("rptest", "malloc returned NULL");
    for (int i = 0; i < kBlocks; i++)
      set[i] = obj_new("rptest", sizes[wl_rand(&seed) % kSizes], ++serial * 0x9E3779B97F4A7C15ULL);
    for (int o = 0; o < kOps; o++) {
      uint64_t r = wl_rand(&seed);
      int i = (int)(r % kBlocks);
      obj_free("rptest", set[i], kMaxSize);
      set[i] = obj_new("rptest", sizes[(r >> 32) % kSizes], ++serial * 0x9E3779B97F4A7C15ULL);
    }
    if (threads > 1 && l % kCrossEvery == 0) {
      mt_box_put(&boxes[(me + 1) % threads], set);
      for (void **in; (in = mt_box_take(&boxes[me], 0)); received++)
        free_set(in);
    } else {
      free_set(set);
    }
  }
  /* every thread passes on the same loops, so as many sets come in as go out */
  const long passes = threads > 1 ? (loops + kCrossEvery - 1) / kCrossEvery : 0;
  while (received < passes)
    free_set(mt_box_take(&boxes[me], 1)), received++;
  return NULL;
}

int main(int argc, char **argv) {
  loops = wl_scale(argc, argv) * kLoopsPerScale;
  threads = mt_threads(argc, argv, 1);
  uint64_t seed = 16000;
  for (int i = 0; i < kSizes; i++) { /* log-uniform: density proportional to 1/size */
    double u = (double)(wl_rand(&seed) >> 11) / 9007199254740992.0;
    sizes[i] = (uint32_t)(kMinSize * pow((double)kMaxSize / kMinSize, u));
  }
  pthread_t *t = calloc((size_t)threads, sizeof *t);
  boxes = calloc((size_t)threads, sizeof *boxes);
  if (!t || !boxes) wl_fail("rptest", "calloc returned NULL");
  for (int i = 0; i < threads; i++)
    mt_box_init(&boxes[i]);
  for (int i = 0; i < threads; i++)
    t[i] = mt_start("rptest", worker, (void *)(uintptr_t)i);
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  free(boxes);
  free(t);
  printf("rptest ok: %d threads, %ld loops of %d blocks and %d replacements each, malloc from %s\n",
         threads, loops, kBlocks, kOps, wl_malloc_lib());
  return 0;
}
