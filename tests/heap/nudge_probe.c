/* nudge_probe: a thread allocates sixteen 1 MiB dataplane blocks and a small one, frees fifteen
 * of the big ones and, without nic_collect or malloc_trim, goes on allocating and freeing small
 * control blocks only. mimalloc 2.0.9 only marks the freed spans for decommit (the thread never
 * comes back to that segment), so they stay committed and their pages pinned unless the reaper's
 * nudge gets the thread to decommit them. Waits (bounded) for the pinned bytes to fall by 12 MiB;
 * prints the pinned bytes before and after, the nudge statistics, and whether the blocks still
 * held and the ones allocated again afterwards read back what was written. "twice" frees half
 * of them first and waits for their pages before it frees the rest. "scattered" allocates 32768
 * blocks of 256 bytes instead and frees all but every 64th: every mimalloc page keeps live
 * blocks, so nothing is marked, and only the free 4 KiB pages inside pages in use can go. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BLOCKS = 16, SMALL = 256 };
static const size_t kBlock = 1u << 20;

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static size_t pinned(void) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s.dataplane_pinned;
}

/* Control blocks only: sizes that mimalloc keeps in many pages, so that its generic path runs
 * (a page's free list runs out) as it does in any program that keeps allocating. */
static void churn(void) {
  void *small[SMALL];
  for (int round = 0; round < 8; round++) {
    for (int i = 0; i < SMALL; i++) {
      small[i] = malloc(16 + (size_t)((i * 37 + round * 11) % 2000));
      if (small[i]) memset(small[i], i, 16);
    }
    for (int i = 0; i < SMALL; i++)
      free(small[i]);
  }
}

/* Goes on with control blocks only until the pinned bytes are down to target, or a bound. */
static size_t shrink_to(size_t target) {
  size_t now = pinned();
  const uint64_t start = now_ms();
  while (now > target && now_ms() - start < 20000) { /* a bound, not a measure */
    churn();
    now = pinned();
  }
  return now;
}

static int twice;

enum { SCATTERED = 32768, KEEP_EVERY = 64, SCATTERED_SIZE = 256 };
static char *scattered_blocks[SCATTERED];

static void *scattered(void *arg) {
  (void)arg;
  for (int i = 0; i < SCATTERED; i++) {
    if (!(scattered_blocks[i] = nic_malloc(SCATTERED_SIZE))) return "no dataplane block";
    memset(scattered_blocks[i], (char)i, SCATTERED_SIZE);
  }
  const size_t full = pinned();
  for (int i = 0; i < SCATTERED; i++)
    if (i % KEEP_EVERY) free(scattered_blocks[i]);
  const size_t shrunk = shrink_to(full - 4 * kBlock);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  int intact = 1;
  for (int i = 0; i < SCATTERED; i += KEEP_EVERY)
    for (int k = 0; k < SCATTERED_SIZE; k++)
      intact &= scattered_blocks[i][k] == (char)i;
  printf("full_pinned=%zu\nshrunk_pinned=%zu\nnudges=%llu\nnudge_answers=%llu\n"
         "nudged_bytes=%llu\nintact=%d\n",
         full, shrunk, (unsigned long long)s.dataplane_nudges,
         (unsigned long long)s.dataplane_nudge_answers,
         (unsigned long long)s.dataplane_nudged_bytes, intact);
  for (int i = 0; i < SCATTERED; i += KEEP_EVERY)
    free(scattered_blocks[i]);
  return NULL;
}

static void *worker(void *arg) {
  (void)arg;
  char *keep = nic_malloc(64);
  char *b[BLOCKS];
  for (int i = 0; i < BLOCKS; i++) {
    b[i] = nic_malloc(kBlock);
    if (!keep || !b[i]) return "no dataplane block";
    memset(b[i], 'a' + i, kBlock);
  }
  const size_t full = pinned();
  /* "twice": half the blocks first, the rest once their pages went: the second shrink is
   * nudged too, although the first already was. */
  const int first = twice ? BLOCKS / 2 : BLOCKS;
  for (int i = 1; i < first; i++)
    free(b[i]);
  if (twice) {
    printf("half_pinned=%zu\n", shrink_to(full - 6 * kBlock));
    for (int i = first; i < BLOCKS; i++)
      free(b[i]);
  }
  const size_t shrunk = shrink_to(full - 12 * kBlock);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("full_pinned=%zu\nshrunk_pinned=%zu\nnudges=%llu\nnudge_answers=%llu\n"
         "nudged_bytes=%llu\n",
         full, shrunk, (unsigned long long)s.dataplane_nudges,
         (unsigned long long)s.dataplane_nudge_answers,
         (unsigned long long)s.dataplane_nudged_bytes);
  int intact = 1;
  for (size_t off = 0; off < kBlock; off += 4096)
    intact &= b[0][off] == 'a';
  for (int i = 1; i < BLOCKS; i++) {
    if (!(b[i] = nic_malloc(kBlock))) return "no dataplane block again";
    memset(b[i], 'A' + i, kBlock);
  }
  for (int i = 1; i < BLOCKS; i++)
    for (size_t off = 0; off < kBlock; off += 4096)
      intact &= b[i][off] == 'A' + i;
  printf("intact=%d\nagain_pinned=%zu\n", intact, pinned());
  for (int i = 0; i < BLOCKS; i++)
    free(b[i]);
  free(keep);
  return NULL;
}

int main(int argc, char **argv) {
  twice = argc > 1 && !strcmp(argv[1], "twice");
  const int scatter = argc > 1 && !strcmp(argv[1], "scattered");
  pthread_t t;
  void *err = NULL;
  if (pthread_create(&t, NULL, scatter ? scattered : worker, NULL) || pthread_join(t, &err))
    return 2;
  if (err) {
    fprintf(stderr, "%s\n", (const char *)err);
    return 1;
  }
  return 0;
}
