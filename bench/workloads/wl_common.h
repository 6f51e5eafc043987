/* Shared by the allocator workloads (the .c files here). Each program is self-checking: every
 * block is filled with a pattern derived from a tag and verified before it is freed or grown, so
 * an allocator that hands out overlapping or corrupted memory makes the program exit non-zero.
 * Fixed seeds; the only output is one result line. Usage: PROGRAM [quick|full|SCALE], where the
 * scale multiplies the iteration count (quick = 1, full = 10). */
#ifndef NICMALLOC_WL_COMMON_H
#define NICMALLOC_WL_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline long wl_scale(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "quick")) return 1;
  if (!strcmp(argv[1], "full")) return 10;
  long s = atol(argv[1]);
  if (s < 1) {
    fprintf(stderr, "usage: %s [quick|full|SCALE]\n", argv[0]);
    exit(2);
  }
  return s;
}

/* File name of the object malloc resolves to, for the result line: bench/peers.sh checks it, so
 * an LD_PRELOAD that did not take effect cannot pass as the allocator it names. */
static inline const char *wl_malloc_lib(void) {
  Dl_info info;
  void *fn = dlsym(RTLD_DEFAULT, "malloc");
  if (!fn || !dladdr(fn, &info) || !info.dli_fname) return "?";
  const char *slash = strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

static inline void wl_fail(const char *name, const char *what) {
  fprintf(stderr, "%s: FAILED: %s\n", name, what);
  exit(1);
}

/* xorshift64*: fast, and deterministic across allocators (no allocator call involved). */
static inline uint64_t wl_rand(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1DULL;
}

/* Small sizes skewed towards the low end, as real programs allocate. */
static inline size_t wl_small_size(uint64_t *s, size_t max) {
  uint64_t r = wl_rand(s);
  size_t cap = (size_t)16 << (r % 7); /* 16 .. 1024 */
  if (cap > max) cap = max;
  return 8 + (r >> 8) % (cap - 7);
}

/* Writes the tag into one word per 4 KiB page (so large blocks become resident, as a program that
 * uses them would make them) and a byte derived from it into the last byte; checks the same. The
 * words never overlap the last byte, so any size from 1 up works. */
static inline unsigned char wl_last(uint64_t tag) {
  return (unsigned char)((tag >> 56) ^ 0x5a);
}

static inline void wl_fill(void *p, size_t n, uint64_t tag) {
  unsigned char *c = (unsigned char *)p;
  for (size_t off = 0; off + sizeof tag < n; off += 4096)
    memcpy(c + off, &tag, sizeof tag);
  c[n - 1] = wl_last(tag);
}

static inline int wl_check(const void *p, size_t n, uint64_t tag) {
  const unsigned char *c = (const unsigned char *)p;
  for (size_t off = 0; off + sizeof tag < n; off += 4096)
    if (memcmp(c + off, &tag, sizeof tag)) return 0;
  return c[n - 1] == wl_last(tag);
}

#endif
