/* alloc-test: modeled on the single-threaded run of node-dot-cpp's alloc-test, from its published
 * description; not the original program. A pool of live blocks in which a randomly chosen slot is
 * replaced again and again: the old block is verified and freed, a new one of a random size
 * between 8 B and 1 KiB (skewed small, as the original's size distribution is) takes its place.
 * The pool first fills up (every replacement of an empty slot only allocates), then stays full. */
#include "wl_common.h"

enum { kSlots = 1 << 16, kOpsPerScale = 3000000 };

/* Log-uniform between 8 and 1024: each power-of-two band is equally likely, so small sizes are
 * far more frequent per byte, as in the original's distribution. */
static size_t pick_size(uint64_t *seed) {
  uint64_t r = wl_rand(seed);
  unsigned band = (unsigned)(r % 7); /* 8-16, ..., 512-1024 */
  size_t lo = (size_t)8 << band;
  return lo + (size_t)((r >> 8) % lo);
}

int main(int argc, char **argv) {
  const long ops = wl_scale(argc, argv) * kOpsPerScale;
  static void *ptr[kSlots];
  static uint32_t len[kSlots];
  static uint64_t tag[kSlots];
  uint64_t seed = 0xa110c7e57ULL, bytes = 0;
  for (long i = 0; i < ops; i++) {
    uint64_t r = wl_rand(&seed);
    size_t s = (size_t)(r % kSlots);
    if (ptr[s]) {
      if (!wl_check(ptr[s], len[s], tag[s])) wl_fail("alloc-test", "block contents changed");
      free(ptr[s]);
    }
    len[s] = (uint32_t)pick_size(&seed);
    tag[s] = (uint64_t)i * 0x9E3779B97F4A7C15ULL + 1;
    if (!(ptr[s] = malloc(len[s]))) wl_fail("alloc-test", "malloc returned NULL");
    wl_fill(ptr[s], len[s], tag[s]);
    bytes += len[s];
  }
  for (size_t s = 0; s < kSlots; s++) {
    if (ptr[s] && !wl_check(ptr[s], len[s], tag[s]))
      wl_fail("alloc-test", "block contents changed");
    free(ptr[s]);
  }
  printf("alloc-test ok: %ld replacements in a pool of %d, %llu bytes, malloc from %s\n", ops,
         kSlots, (unsigned long long)bytes, wl_malloc_lib());
  return 0;
}
