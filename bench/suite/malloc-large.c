/* malloc-large: modeled on mimalloc-bench's malloc-large, from its published description; not the
 * original program. Twenty slots hold large buffers; each step replaces the buffer of a random
 * slot with a new one of a random size between 5 and 25 MiB. The original never touches the
 * buffers; here a tag is written every MiB and in the last byte (and checked before the buffer
 * is freed), so the allocator's handling of large mappings is measured with little page-fault
 * cost on top. */
#include "wl_common.h"

enum { kSlots = 20, kStepsPerScale = 600 };
#define MIB ((size_t)1 << 20)

static void fill(unsigned char *p, size_t n, uint64_t tag) {
  for (size_t off = 0; off + sizeof tag < n; off += MIB)
    memcpy(p + off, &tag, sizeof tag);
  p[n - 1] = wl_last(tag);
}

static int check(const unsigned char *p, size_t n, uint64_t tag) {
  for (size_t off = 0; off + sizeof tag < n; off += MIB)
    if (memcmp(p + off, &tag, sizeof tag)) return 0;
  return p[n - 1] == wl_last(tag);
}

int main(int argc, char **argv) {
  const long steps = wl_scale(argc, argv) * kStepsPerScale;
  unsigned char *buf[kSlots] = {0};
  size_t len[kSlots] = {0};
  uint64_t tag[kSlots] = {0};
  uint64_t seed = 0x1a79eULL, bytes = 0;
  for (long i = 0; i < steps; i++) {
    size_t s = (size_t)(wl_rand(&seed) % kSlots);
    if (buf[s]) {
      if (!check(buf[s], len[s], tag[s])) wl_fail("malloc-large", "buffer contents changed");
      free(buf[s]);
    }
    len[s] = 5 * MIB + (size_t)(wl_rand(&seed) % (20 * MIB));
    tag[s] = (uint64_t)i * 0x9E3779B97F4A7C15ULL + 1;
    if (!(buf[s] = malloc(len[s]))) wl_fail("malloc-large", "malloc returned NULL");
    fill(buf[s], len[s], tag[s]);
    bytes += len[s];
  }
  for (int s = 0; s < kSlots; s++) {
    if (buf[s] && !check(buf[s], len[s], tag[s]))
      wl_fail("malloc-large", "buffer contents changed");
    free(buf[s]);
  }
  printf("malloc-large ok: %ld buffers of 5-25 MiB, %llu MiB, malloc from %s\n", steps,
         (unsigned long long)(bytes >> 20), wl_malloc_lib());
  return 0;
}
