/* release_probe: fills dataplane memory with small objects, frees most of them, and reports how
 * the pinned bytes follow. Modes: "fifo" frees the oldest 90% (whole chunks empty out), "random"
 * frees a random 90% (every chunk keeps some live objects), and "poke" is fifo but lets the
 * reaper thread and later dataplane traffic do the release instead of nic_collect, and "stale"
 * is fifo, then frees once more a block whose chunk went back to the OS. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void print(const char *tag) {
  struct nic_stats s;
  nic_get_stats(&s);
  printf("%s_draining=%u\n", tag, s.chunks_draining);
  printf("%s_pinned=%zu\n%s_live=%zu\n%s_mapped=%zu\n%s_chunks=%u\n%s_released=%llu\n", tag,
         s.dataplane_pinned, tag, s.dataplane_live, tag, s.dataplane_mapped, tag, s.chunks_live,
         tag, (unsigned long long)s.chunks_released, tag);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: release_probe fifo|random|poke|stale TOTAL_BYTES\n");
    return 2;
  }
  const char *mode = argv[1];
  size_t total = strtoull(argv[2], NULL, 0), used = 0, n = 0, cap = total / 64;
  unsigned char **blocks = malloc(cap * sizeof *blocks);
  unsigned seed = 12345;
  while (used < total && n < cap) {
    size_t size = 64 + rand_r(&seed) % 449; /* 64..512 */
    blocks[n] = nic_malloc(size);
    if (!blocks[n] || !nic_is_dataplane(blocks[n])) {
      printf("alloc_failed_at=%zu\n", n);
      return 1;
    }
    memset(blocks[n], (int)(n & 0xff), size);
    used += size;
    n++;
  }
  printf("objects=%zu\n", n);
  print("full");
  size_t keep_from = n - n / 10;
  if (!strcmp(mode, "random")) { /* shuffle, then free the first 90% of the shuffled order */
    for (size_t i = n - 1; i > 0; i--) {
      size_t j = rand_r(&seed) % (i + 1);
      unsigned char *t = blocks[i];
      blocks[i] = blocks[j];
      blocks[j] = t;
    }
  }
  for (size_t i = 0; i < keep_from; i++)
    free(blocks[i]);
  print("freed");
  /* Wait for the release: at most 5 s. */
  for (int tries = 0; tries < 100; tries++) {
    if (!strcmp(mode, "poke"))
      free(nic_malloc(100)); /* ordinary dataplane traffic */
    else
      nic_collect();
    sleep_ms(50);
  }
  print("after");
  if (!strcmp(mode, "stale")) { /* a double free the chunk state must catch: no key to read */
    struct nic_region_ref ref;
    for (size_t i = 0; i < keep_from; i++) {
      if (nic_translate(blocks[i], 1, &ref) != -NIC_ENOTDP) continue;
      free(blocks[i]);
      printf("stale_free_survived=1\n");
      break;
    }
  }
  /* What is left is intact, and released chunks are usable again. */
  size_t bad = 0;
  if (strcmp(mode, "random"))
    for (size_t i = keep_from; i < n; i++)
      if (blocks[i][0] != (unsigned char)(i & 0xff)) bad++;
  printf("corrupt=%zu\n", bad);
  for (size_t i = 0; i < keep_from; i++) {
    blocks[i] = nic_malloc(256);
    memset(blocks[i], 0x77, 256);
  }
  print("refill");
  for (size_t i = 0; i < n; i++)
    free(blocks[i]);
  free(blocks);
  return 0;
}
