/* Single-thread churn of small objects: a table of live objects (8 B - 1 KiB, skewed small) in
 * which a random slot is verified, freed and reallocated, many times. The allocator's thread-local
 * fast path dominates. */
#include "wl_common.h"

enum { kSlots = 20000, kOpsPerScale = 4000000 };

int main(int argc, char **argv) {
  const long ops = wl_scale(argc, argv) * kOpsPerScale;
  static void *ptr[kSlots];
  static size_t len[kSlots];
  static uint64_t tag[kSlots];
  uint64_t seed = 42, sum = 0;
  for (long i = 0; i < ops; i++) {
    size_t s = wl_rand(&seed) % kSlots;
    if (ptr[s]) {
      if (!wl_check(ptr[s], len[s], tag[s])) wl_fail("churn", "block contents changed");
      free(ptr[s]);
    }
    len[s] = wl_small_size(&seed, 1024);
    tag[s] = (uint64_t)i * 0x9E3779B97F4A7C15ULL + 1;
    if (!(ptr[s] = malloc(len[s]))) wl_fail("churn", "malloc returned NULL");
    wl_fill(ptr[s], len[s], tag[s]);
    sum += len[s];
  }
  for (int s = 0; s < kSlots; s++) {
    if (ptr[s] && !wl_check(ptr[s], len[s], tag[s])) wl_fail("churn", "block contents changed");
    free(ptr[s]);
  }
  printf("churn ok: %ld ops, %llu bytes, malloc from %s\n", ops, (unsigned long long)sum,
         wl_malloc_lib());
  return 0;
}
