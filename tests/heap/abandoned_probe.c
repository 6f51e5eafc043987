/* abandoned_probe: dataplane blocks of threads that have exited. mimalloc abandons an exited
 * thread's segments; they must neither keep their chunks pinned forever once every block is
 * freed ("freed-after-exit"), nor end up in an ordinary heap, from which plain malloc would hand
 * out chunk memory ("trim-after-exit": malloc_trim while such a segment still has live blocks).
 * Prints key=value lines for test_abandoned. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kThreads = 4, kBlocks = 20000 };

/* Allocates kBlocks dataplane blocks and exits, leaving them to main. */
static void *producer(void *arg) {
  (void)arg;
  void **blocks = malloc(kBlocks * sizeof *blocks);
  for (int i = 0; blocks && i < kBlocks; i++)
    blocks[i] = nic_malloc(1000 + (size_t)(i % 5000));
  return blocks;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static int freed_after_exit(void) {
  pthread_t threads[kThreads];
  void *blocks[kThreads];
  for (int i = 0; i < kThreads; i++)
    if (pthread_create(&threads[i], NULL, producer, NULL)) return 1;
  for (int i = 0; i < kThreads; i++)
    pthread_join(threads[i], &blocks[i]);
  for (int i = 0; i < kThreads; i++) {
    void **b = blocks[i];
    if (!b) return 1;
    for (int k = 0; k < kBlocks; k++)
      free(b[k]);
    free(b);
  }
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("before_live=%u\n", s.chunks_live);
  /* The reaper alone, then nic_collect: at most 5 s. */
  for (int tries = 0; tries < 100 && s.chunks_live > 0; tries++) {
    sleep_ms(50);
    if (tries >= 50) nic_collect();
    nic_get_stats(&s);
  }
  printf("after_live=%u\nafter_released=%llu\nafter_dataplane_live=%zu\n", s.chunks_live,
         (unsigned long long)s.chunks_released, s.dataplane_live);
  return 0;
}

static int trim_after_exit(void) {
  pthread_t thread;
  void *result;
  if (pthread_create(&thread, NULL, producer, NULL)) return 1;
  pthread_join(thread, &result);
  void **b = result;
  if (!b) return 1;
  for (int k = 0; k < kBlocks; k += 2) /* every page keeps live blocks */
    free(b[k]);
  malloc_trim(0);
  int dataplane = 0;
  void **plain = malloc(kBlocks * sizeof *plain);
  for (int k = 0; k < kBlocks; k++) {
    plain[k] = malloc(1000 + (size_t)(k % 5000));
    dataplane += nic_is_dataplane(plain[k]);
  }
  printf("plain_from_dataplane=%d\n", dataplane);
  for (int k = 0; k < kBlocks; k++)
    free(plain[k]);
  for (int k = 1; k < kBlocks; k += 2)
    free(b[k]);
  free(plain);
  free(b);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("end_dataplane_live=%zu\n", s.dataplane_live);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "freed-after-exit")) return freed_after_exit();
  if (argc == 2 && !strcmp(argv[1], "trim-after-exit")) return trim_after_exit();
  fprintf(stderr, "usage: abandoned_probe freed-after-exit|trim-after-exit\n");
  return 2;
}
