/* Large allocations in a loop: 16 live buffers of 1 - 16 MiB (sometimes 16 - 32 MiB), one replaced
 * at random per step, every page of a new buffer written (a program uses what it allocates).
 * What matters is whether the allocator keeps freed memory resident for reuse or returns it to
 * the kernel and faults it in again (mimalloc-bench's malloc-large). */
#include "wl_common.h"

enum { kSlots = 16, kStepsPerScale = 200 };

int main(int argc, char **argv) {
  const long steps = wl_scale(argc, argv) * kStepsPerScale;
  void *ptr[kSlots] = {0};
  size_t len[kSlots];
  uint64_t tag[kSlots], seed = 42, bytes = 0;
  for (long i = 0; i < steps; i++) {
    int s = (int)(wl_rand(&seed) % kSlots);
    if (ptr[s]) {
      if (!wl_check(ptr[s], len[s], tag[s])) wl_fail("large", "buffer contents changed");
      free(ptr[s]);
    }
    uint64_t r = wl_rand(&seed);
    size_t mib = r % 10 == 0 ? 16 + r % 17 : 1 + r % 16;
    len[s] = (mib << 20) - (r >> 40) % 4096; /* not always page-sized */
    tag[s] = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ULL;
    if (!(ptr[s] = malloc(len[s]))) wl_fail("large", "malloc returned NULL");
    wl_fill(ptr[s], len[s], tag[s]);
    bytes += len[s];
  }
  for (int s = 0; s < kSlots; s++) {
    if (ptr[s] && !wl_check(ptr[s], len[s], tag[s])) wl_fail("large", "buffer contents changed");
    free(ptr[s]);
  }
  printf("large ok: %ld steps, %.1f GiB allocated, malloc from %s\n", steps, bytes / 1073741824.0,
         wl_malloc_lib());
  return 0;
}
