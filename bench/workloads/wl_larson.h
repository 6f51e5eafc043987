/* Larson's server pattern, from the published description of Larson and Krishnan's benchmark
 * ("Memory Allocation for Long-Running Server Applications", ISMM 1998); written for this
 * repository, not the original program. One implementation for the suite's program
 * (bench/suite/larson.c, blocks checked) and ctl_threads' larson mode (bench/workloads, counted
 * under callgrind), so that the two measure the same thing.
 * The main thread allocates every lineage's 5000 blocks (8 - 1000 B); each thread of a lineage
 * replaces OPS random blocks (free, then malloc of a random size), starts its successor (detached)
 * and exits: the successor frees blocks its predecessors and the main thread made, so most frees
 * are cross-thread frees of exited threads' memory, and thread starts and exits overlap the other
 * lineages' work. The work is fixed (not a timed run as in the original), so wall time compares. */
#ifndef NICMALLOC_WL_LARSON_H
#define NICMALLOC_WL_LARSON_H

#include <pthread.h>

#include "wl_common.h"

enum { kLarsonBlocks = 5000, kLarsonMinSize = 8, kLarsonMaxSize = 1000 };

struct larson_lineage {
  void *ptr[kLarsonBlocks];
  uint32_t len[kLarsonBlocks];
  uint64_t tag[kLarsonBlocks];
  uint64_t seed, serial;
  long ops, gens_left;
  /* Nonzero: every block is filled with its tag and checked before it is freed (the suite);
   * zero: only its first and last bytes are written (instruction counts of the allocator). */
  int check;
};

static pthread_mutex_t larson_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t larson_cv = PTHREAD_COND_INITIALIZER;
static int larson_running;

static void larson_new_block(struct larson_lineage *l, size_t v) {
  const size_t n = kLarsonMinSize + wl_rand(&l->seed) % (kLarsonMaxSize - kLarsonMinSize + 1);
  unsigned char *b = (unsigned char *)malloc(n);
  if (!b) wl_fail("larson", "malloc returned NULL");
  l->len[v] = (uint32_t)n;
  l->tag[v] = ++l->serial * 0x9E3779B97F4A7C15ULL;
  if (l->check)
    wl_fill(b, n, l->tag[v]);
  else
    b[0] = b[n - 1] = 1;
  l->ptr[v] = b;
}

static void larson_free_block(struct larson_lineage *l, size_t v) {
  if (l->check && !wl_check(l->ptr[v], l->len[v], l->tag[v]))
    wl_fail("larson", "block contents changed");
  free(l->ptr[v]);
}

static void larson_start(void *(*fn)(void *), struct larson_lineage *l) {
  pthread_t t;
  if (pthread_create(&t, NULL, fn, l)) wl_fail("larson", "pthread_create failed");
  pthread_detach(t);
}

static void *larson_generation(void *arg) {
  struct larson_lineage *l = (struct larson_lineage *)arg;
  for (long i = 0; i < l->ops; i++) {
    const size_t v = wl_rand(&l->seed) % kLarsonBlocks;
    larson_free_block(l, v);
    larson_new_block(l, v);
  }
  if (--l->gens_left > 0) { /* the successor owns the lineage from here on */
    larson_start(larson_generation, l);
    return NULL;
  }
  pthread_mutex_lock(&larson_mu);
  if (--larson_running == 0) pthread_cond_signal(&larson_cv);
  pthread_mutex_unlock(&larson_mu);
  return NULL;
}

/* threads lineages of gens threads each, every thread ops replacements. */
static void larson_run(int threads, long gens, long ops, int check) {
  struct larson_lineage *l = (struct larson_lineage *)calloc((size_t)threads, sizeof *l);
  if (!l) wl_fail("larson", "calloc returned NULL");
  for (int t = 0; t < threads; t++) {
    l[t].seed = 4141 + (uint64_t)t;
    l[t].serial = (uint64_t)t << 40;
    l[t].ops = ops;
    l[t].gens_left = gens;
    l[t].check = check;
    for (size_t v = 0; v < kLarsonBlocks; v++)
      larson_new_block(&l[t], v);
  }
  larson_running = threads;
  for (int t = 0; t < threads; t++)
    larson_start(larson_generation, &l[t]);
  pthread_mutex_lock(&larson_mu);
  while (larson_running)
    pthread_cond_wait(&larson_cv, &larson_mu);
  pthread_mutex_unlock(&larson_mu);
  for (int t = 0; t < threads; t++)
    for (size_t v = 0; v < kLarsonBlocks; v++)
      larson_free_block(&l[t], v);
  free(l);
}

#endif
