/* mstress: modeled on the published description of mimalloc's stress test (test-stress.c) as
 * mimalloc-bench runs it (threads = processors, scale 50, 25 rounds); written for this repository,
 * not the original program. Every round starts fresh threads. Each allocates objects (mostly 8 B -
 * 1 KiB, one in a hundred ten times larger, one in ten thousand a thousand times larger), keeping
 * half in a retained list that lives to the end of the round; it frees random live objects and
 * trades others with a global array of transfer slots, so objects are freed by whichever thread (of
 * this round or a later one) picks them up. Between rounds the main thread frees half of the
 * transfer slots. */
#include <stdatomic.h>

#include "suite_mt.h"

enum {
  kTransfers = 1000,
  kAllocsPerScale = 5000, /* times (thread index % 8 + 1) per thread per round */
  kRounds = 25,
  kMaxLen = 8 * 128 * 1000,
};

static _Atomic(uintptr_t) transfer[kTransfers];
static long allocs_base;

struct list {
  void **p;
  size_t n, cap;
};

static void push(struct list *l, void *p) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 64;
    void **grown = realloc(l->p, l->cap * sizeof *grown);
    if (!grown) wl_fail("mstress", "realloc returned NULL");
    l->p = grown;
  }
  l->p[l->n++] = p;
}

static int chance(uint64_t *seed, unsigned percent) {
  return wl_rand(seed) % 100 < percent;
}

static void *new_item(uint64_t *seed, uint64_t *serial) {
  uint64_t r = wl_rand(seed);
  size_t words = 1 + r % 128;
  if ((r >> 32) % 10000 == 0)
    words *= 1000; /* rarely a very large one */
  else if (r % 100 == 0)
    words *= 10; /* now and then a larger one */
  return obj_new("mstress", words * 8, ++*serial * 0x9E3779B97F4A7C15ULL);
}

struct job {
  int index, round;
};

static void *stress(void *arg) {
  struct job *j = arg;
  uint64_t seed = 1 + (uint64_t)j->index * 7919 + (uint64_t)j->round * 104729;
  uint64_t serial = ((uint64_t)j->round << 48) | ((uint64_t)j->index << 32);
  long allocs = allocs_base * (j->index % 8 + 1), retain = allocs / 2;
  struct list data = {0}, retained = {0};
  while (allocs > 0 || retain > 0) {
    if (retain == 0 || (chance(&seed, 50) && allocs > 0)) {
      allocs--;
      push(&data, new_item(&seed, &serial));
    } else {
      retain--;
      push(&retained, new_item(&seed, &serial));
    }
    if (data.n && chance(&seed, 66)) { /* free a random live object */
      size_t i = wl_rand(&seed) % data.n;
      if (data.p[i]) obj_free("mstress", data.p[i], kMaxLen);
      data.p[i] = NULL;
    }
    if (data.n && chance(&seed, 25)) { /* trade one with whatever another thread left */
      size_t i = wl_rand(&seed) % data.n;
      data.p[i] =
          (void *)atomic_exchange(&transfer[wl_rand(&seed) % kTransfers], (uintptr_t)data.p[i]);
    }
  }
  for (size_t i = 0; i < retained.n; i++)
    obj_free("mstress", retained.p[i], kMaxLen);
  for (size_t i = 0; i < data.n; i++)
    if (data.p[i]) obj_free("mstress", data.p[i], kMaxLen);
  free(retained.p);
  free(data.p);
  return NULL;
}

int main(int argc, char **argv) {
  allocs_base = wl_scale(argc, argv) * kAllocsPerScale;
  const int threads = mt_threads(argc, argv, 1);
  pthread_t *t = calloc((size_t)threads, sizeof *t);
  struct job *jobs = calloc((size_t)threads, sizeof *jobs);
  if (!t || !jobs) wl_fail("mstress", "calloc returned NULL");
  uint64_t seed = 42;
  for (int round = 0; round < kRounds; round++) {
    for (int i = 0; i < threads; i++) {
      jobs[i] = (struct job){i, round};
      t[i] = mt_start("mstress", stress, &jobs[i]);
    }
    for (int i = 0; i < threads; i++)
      pthread_join(t[i], NULL);
    for (int i = 0; i < kTransfers; i++)
      if (chance(&seed, 50)) {
        void *p = (void *)atomic_exchange(&transfer[i], 0);
        if (p) obj_free("mstress", p, kMaxLen);
      }
  }
  for (int i = 0; i < kTransfers; i++) {
    void *p = (void *)atomic_exchange(&transfer[i], 0);
    if (p) obj_free("mstress", p, kMaxLen);
  }
  free(jobs);
  free(t);
  printf("mstress ok: %d threads, %d rounds of %ld allocations per thread index, malloc from %s\n",
         threads, kRounds, allocs_base, wl_malloc_lib());
  return 0;
}
