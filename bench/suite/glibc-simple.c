/* glibc-simple: modeled on glibc's benchtests/bench-malloc-simple, from its published
 * description; not the original program. For each block size (16 B to 4 KiB) and batch length
 * (25 to 1600 blocks), a batch of blocks is allocated and then freed, in allocation order, many
 * times. As in the original the whole sequence runs twice: on the main thread, then on a second
 * thread (one thread at a time), since allocators often treat the first thread specially. */
#include <pthread.h>

#include "wl_common.h"

enum { kRoundsPerScale = 600, kMaxBatch = 1600 };
static const size_t kSizes[] = {16, 64, 256, 1024, 4096};
static const int kBatches[] = {25, 100, 400, 1600};

struct pass {
  long rounds;
  uint64_t allocs;
  int failed;
};

static void *run_pass(void *arg) {
  struct pass *ps = arg;
  static void *blk[kMaxBatch];
  for (size_t z = 0; z < sizeof kSizes / sizeof kSizes[0]; z++) {
    for (size_t b = 0; b < sizeof kBatches / sizeof kBatches[0]; b++) {
      const size_t size = kSizes[z];
      const int n = kBatches[b];
      /* The same number of blocks for every batch length, as the original's fixed op count. */
      const long rounds = ps->rounds * 25 / n;
      for (long r = 0; r < rounds; r++) {
        const uint64_t base = ((uint64_t)z << 56) ^ ((uint64_t)b << 48) ^ ((uint64_t)r << 16);
        for (int i = 0; i < n; i++) {
          if (!(blk[i] = malloc(size))) {
            ps->failed = 1;
            return NULL;
          }
          wl_fill(blk[i], size, base + (uint64_t)i + 1);
        }
        for (int i = 0; i < n; i++) {
          if (!wl_check(blk[i], size, base + (uint64_t)i + 1)) ps->failed = 1;
          free(blk[i]);
        }
        ps->allocs += (uint64_t)n;
      }
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  const long rounds = wl_scale(argc, argv) * kRoundsPerScale;
  struct pass main_pass = {rounds, 0, 0}, thread_pass = {rounds, 0, 0};
  run_pass(&main_pass);
  pthread_t t;
  if (pthread_create(&t, NULL, run_pass, &thread_pass) || pthread_join(t, NULL))
    wl_fail("glibc-simple", "cannot run the second thread");
  if (main_pass.failed || thread_pass.failed)
    wl_fail("glibc-simple", "malloc returned NULL or a block's contents changed");
  printf("glibc-simple ok: %llu blocks on the main thread, %llu on a second, malloc from %s\n",
         (unsigned long long)main_pass.allocs, (unsigned long long)thread_pass.allocs,
         wl_malloc_lib());
  return 0;
}
