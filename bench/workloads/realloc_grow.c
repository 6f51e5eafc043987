/* realloc growth: 64 buffers grown, interleaved, by appends of 1 - 256 bytes with realloc to the
 * exact new length (a string builder without a capacity policy), each up to a random target of
 * 1 KiB - 1 MiB, then verified in full and freed. Every byte is written, so a realloc that loses
 * or misplaces bytes when it moves a block fails the check. */
#include "wl_common.h"

enum { kBufs = 64, kAppendsPerScale = 600000 };

static unsigned char byte_at(int id, size_t i) {
  return (unsigned char)(id * 131 + i * 7 + (i >> 12));
}

int main(int argc, char **argv) {
  const long appends = wl_scale(argc, argv) * kAppendsPerScale;
  unsigned char *buf[kBufs] = {0};
  size_t len[kBufs] = {0}, target[kBufs] = {0};
  uint64_t seed = 42, finished = 0;
  for (long n = 0; n < appends; n++) {
    int b = (int)(wl_rand(&seed) % kBufs);
    if (len[b] >= target[b]) { /* done growing (or never started): verify, free, start again */
      for (size_t i = 0; i < len[b]; i++)
        if (buf[b][i] != byte_at(b, i)) wl_fail("realloc_grow", "contents changed by realloc");
      free(buf[b]);
      buf[b] = NULL;
      len[b] = 0;
      target[b] = (size_t)1024 << (wl_rand(&seed) % 11); /* 1 KiB .. 1 MiB */
      finished++;
    }
    size_t add = 1 + wl_rand(&seed) % 256;
    unsigned char *p = realloc(buf[b], len[b] + add);
    if (!p) wl_fail("realloc_grow", "realloc returned NULL");
    if (len[b] && p[len[b] - 1] != byte_at(b, len[b] - 1))
      wl_fail("realloc_grow", "last byte lost by realloc");
    for (size_t i = 0; i < add; i++)
      p[len[b] + i] = byte_at(b, len[b] + i);
    buf[b] = p;
    len[b] += add;
  }
  for (int b = 0; b < kBufs; b++) {
    for (size_t i = 0; i < len[b]; i++)
      if (buf[b][i] != byte_at(b, i)) wl_fail("realloc_grow", "contents changed by realloc");
    free(buf[b]);
  }
  printf("realloc_grow ok: %ld appends, %llu buffers completed, malloc from %s\n", appends,
         (unsigned long long)finished, wl_malloc_lib());
  return 0;
}
