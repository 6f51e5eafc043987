/* What reading a block on free costs (the free key's test, alloc/heap/block.h), against a free
 * that only stores into the block as mimalloc's own free does, both over mimalloc's API in one
 * process so that nothing else differs. A store that misses the cache waits in the store buffer;
 * a load that misses holds up the free until its line arrives. So the difference grows with the
 * share of frees whose block is not in the freeing core's cache: blocks made long ago in a
 * large working set (Larson's pattern, glibc's thread benchmark), or last written by another
 * core (cross-thread frees).
 *   free_read_cost [trials]
 * Rows: working sets of 5k, 50k and 500k blocks of 16 B - 1 KiB, each pair replacing a random
 * block (local); and blocks written by another thread just before this one frees them (remote).
 * A third free tests a shadow table instead, one byte per 16-byte unit of address (what a side
 * table for the key would cost: a line of it covers 1 KiB of blocks, so it stays cached where
 * the blocks do not). Trials of the frees
 * rotate; the minimum and the median of each are printed, ns per malloc/free pair, and the
 * ratios of the minima to the store-only free's. */
#define _GNU_SOURCE
#include "bench_median.h"

#include <mimalloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static const uintptr_t kKey = 0x5ca1ab1e0ddba11ull;
static uint64_t seed = 88172645463325252ull;
static long suspects;

static uint64_t rnd(void) {
  seed ^= seed << 13;
  seed ^= seed >> 7;
  seed ^= seed << 17;
  return seed;
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* 4 GiB of address in 16-byte units, reserved and faulted in where used; a benchmark's blocks
 * lie well within one such window, so no two share a byte. */
#define SHADOW_UNITS ((uintptr_t)1 << 28)
static uint8_t *shadow;
static inline uint8_t *shadow_of(const void *p) {
  return &shadow[((uintptr_t)p >> 4) & (SHADOW_UNITS - 1)];
}

/* The frees under test make the same stores (the key word and the shadow byte, so that blocks
 * pass between trials of different frees in one state) and differ only in what they load first:
 * nothing, the block's key word, or its shadow byte. noinline: each pays one call, as an
 * exported free does. */
static __attribute__((noinline)) void free_store_only(void *p) {
  ((uintptr_t *)p)[1] = kKey;
  *shadow_of(p) = 1;
  mi_free(p);
}
static __attribute__((noinline)) void free_read_check(void *p) {
  if (__builtin_expect(((uintptr_t *)p)[1] == kKey, 0)) {
    suspects++; /* a double free: refused */
    return;
  }
  ((uintptr_t *)p)[1] = kKey;
  *shadow_of(p) = 1;
  mi_free(p);
}
static __attribute__((noinline)) void free_shadow_check(void *p) {
  uint8_t *s = shadow_of(p);
  if (__builtin_expect(*s, 0)) {
    suspects++;
    return;
  }
  *s = 1;
  ((uintptr_t *)p)[1] = kKey;
  mi_free(p);
}
typedef void (*free_fn)(void *);
enum { kFrees = 3 };
static const free_fn fns[kFrees] = {free_store_only, free_read_check, free_shadow_check};
static const char *const fn_names[kFrees] = {"store-only", "read-check", "shadow"};

static void *new_block(void) {
  uintptr_t *q = mi_malloc(16 + rnd() % 1009);
  if (!q) abort();
  q[1] = 0; /* live: as malloc clears the key */
  *shadow_of(q) = 0;
  return q;
}

static double local_trial(void **blocks, size_t n, free_fn fn, long pairs) {
  const double t0 = now_ns();
  for (long i = 0; i < pairs; i++) {
    const size_t v = rnd() % n;
    fn(blocks[v]);
    blocks[v] = new_block();
  }
  return (now_ns() - t0) / (double)pairs;
}

/* remote: the writer fills a batch of blocks (its core holds their lines modified), then the
 * freer frees them; the freer makes the next batch. */
enum { kBatch = 4096 };
static void *batch[kBatch];
static atomic_int turn; /* 0: writer's, 1: freer's, 2: stop */

static void *writer(void *arg) {
  (void)arg;
  for (;;) {
    int t;
    while ((t = atomic_load_explicit(&turn, memory_order_acquire)) == 1)
      ;
    if (t == 2) return NULL;
    for (int i = 0; i < kBatch; i++) /* word 0 only: the key word stays live (0) */
      ((uintptr_t *)batch[i])[0] = (uintptr_t)i;
    atomic_store_explicit(&turn, 1, memory_order_release);
  }
}

static double remote_trial(free_fn fn, int rounds) {
  double spent = 0;
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < kBatch; i++)
      batch[i] = new_block();
    atomic_store_explicit(&turn, 0, memory_order_release);
    while (atomic_load_explicit(&turn, memory_order_acquire) != 1)
      ;
    const double t0 = now_ns();
    for (int i = 0; i < kBatch; i++)
      fn(batch[i]);
    spent += now_ns() - t0;
  }
  return spent / ((double)rounds * kBatch);
}

static void report(const char *row, double *t[kFrees], int trials) {
  double min[kFrees];
  printf("%-11s", row);
  for (int c = 0; c < kFrees; c++) {
    const double median = bench_median(t[c], (size_t)trials);
    min[c] = t[c][0];
    printf(" | %s min %6.1f med %6.1f", fn_names[c], min[c], median);
  }
  printf(" | ratios %.2f %.2f\n", min[1] / min[0], min[2] / min[0]);
}

int main(int argc, char **argv) {
  const int trials = argc > 1 ? atoi(argv[1]) : 21;
  if (trials < 1) return 2;
  double *t[kFrees];
  for (int c = 0; c < kFrees; c++)
    t[c] = calloc((size_t)trials, sizeof(double));
  shadow = mmap(NULL, SHADOW_UNITS, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (shadow == MAP_FAILED) return 1;
  static const size_t sets[] = {5000, 50000, 500000};
  for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
    const size_t n = sets[s];
    void **blocks = malloc(n * sizeof *blocks);
    for (size_t i = 0; i < n; i++)
      blocks[i] = new_block();
    for (int k = 0; k < trials; k++)
      for (int j = 0; j < kFrees; j++) { /* the order rotates between trials */
        const int c = (j + k) % kFrees;
        t[c][k] = local_trial(blocks, n, fns[c], 200000);
      }
    char row[32];
    snprintf(row, sizeof row, "local %zuk", n / 1000);
    report(row, t, trials);
    for (size_t i = 0; i < n; i++)
      mi_free(blocks[i]);
    free(blocks);
  }
  pthread_t w;
  atomic_store(&turn, 1);
  if (pthread_create(&w, NULL, writer, NULL)) return 1;
  for (int k = 0; k < trials; k++)
    for (int j = 0; j < kFrees; j++) {
      const int c = (j + k) % kFrees;
      t[c][k] = remote_trial(fns[c], 20);
    }
  atomic_store(&turn, 2);
  pthread_join(w, NULL);
  report("remote", t, trials);
  return suspects != 0;
}
