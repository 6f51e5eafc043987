/* trim_stress_probe SECONDS THREADS: control blocks allocated, written, handed between threads
 * and freed at random by THREADS threads while one more calls malloc_trim every 2 ms (and the
 * workers now and then too), so that pages given back inside pages in use, the blocks held back
 * over them, the pages built anew and the other threads' answers (alloc/heap/nudge.h) meet
 * same-thread and cross-thread frees of every size class around them. Every block carries a
 * pattern made from its address and size, checked in full before it is freed: a block handed
 * out twice, or memory given back under a live block, shows as a mismatch. Prints the counts and
 * the statistics that must stay zero (double and invalid frees: a free of a block the trim held
 * back, reaching mimalloc or refused, would be one). Exits 1 on a mismatch. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { LOCAL = 2048, SLOTS = 1024 };

static _Atomic(uintptr_t) slots[SLOTS]; /* a block and its size, handed to whoever takes it */
static atomic_bool stop;
static atomic_ulong ops, trims, mismatches, handed;

struct block {
  unsigned char *p;
  size_t size;
};

static unsigned char byte_of(const unsigned char *p, size_t size, size_t i) {
  return (unsigned char)(((uintptr_t)p >> 4) ^ size ^ (i * 131));
}

static unsigned char *make(size_t size) {
  unsigned char *p = malloc(size);
  if (!p) return NULL;
  for (size_t i = 0; i < size; i++)
    p[i] = byte_of(p, size, i);
  return p;
}

static void check_and_free(unsigned char *p, size_t size) {
  for (size_t i = 0; i < size; i++)
    if (p[i] != byte_of(p, size, i)) {
      atomic_fetch_add(&mismatches, 1);
      break;
    }
  free(p);
}

/* Mostly small blocks of many classes (several to a 4 KiB page), some spanning pages. */
static size_t pick_size(unsigned *seed) {
  const unsigned r = (unsigned)rand_r(seed);
  if (r % 16 == 0) return 4096 + r % 28000;
  return 16 + r % 1500;
}

/* A block and its size in one word: sizes stay below 64 KiB, blocks are 16-byte aligned. */
static uintptr_t pack(unsigned char *p, size_t size) {
  return ((uintptr_t)p << 16) | size;
}
static void unpack(uintptr_t v, unsigned char **p, size_t *size) {
  *p = (unsigned char *)(v >> 16);
  *size = v & 0xffff;
}

static void *worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u;
  struct block own[LOCAL] = {{0}};
  while (!atomic_load(&stop)) {
    const unsigned r = (unsigned)rand_r(&seed);
    struct block *b = &own[r % LOCAL];
    if (b->p && r % 3 == 0) {
      /* Hand it over; free what another thread left there. */
      const uintptr_t old = atomic_exchange(&slots[(r >> 12) % SLOTS], pack(b->p, b->size));
      b->p = NULL;
      atomic_fetch_add(&handed, 1);
      if (old) {
        unsigned char *p;
        size_t size;
        unpack(old, &p, &size);
        check_and_free(p, size);
      }
    } else if (b->p) {
      check_and_free(b->p, b->size);
      b->p = NULL;
    } else {
      b->size = pick_size(&seed);
      b->p = make(b->size);
    }
    if (r % 4096 == 0) {
      malloc_trim(0);
      atomic_fetch_add(&trims, 1);
    }
    atomic_fetch_add(&ops, 1);
  }
  for (int i = 0; i < LOCAL; i++)
    if (own[i].p) check_and_free(own[i].p, own[i].size);
  return NULL;
}

static void *trimmer(void *arg) {
  (void)arg;
  const struct timespec pause = {0, 2 * 1000 * 1000};
  while (!atomic_load(&stop)) {
    malloc_trim(0);
    atomic_fetch_add(&trims, 1);
    nanosleep(&pause, NULL);
  }
  return NULL;
}

int main(int argc, char **argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 3;
  int threads = argc > 2 ? atoi(argv[2]) : 4;
  if (threads < 1 || threads > 64) threads = 4;
  pthread_t t[65];
  for (int i = 0; i < threads; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1))) return 2;
  if (pthread_create(&t[threads], NULL, trimmer, NULL)) return 2;
  const struct timespec run = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
  nanosleep(&run, NULL);
  atomic_store(&stop, true);
  for (int i = 0; i <= threads; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < SLOTS; i++) {
    const uintptr_t v = atomic_exchange(&slots[i], 0);
    unsigned char *p;
    size_t size;
    unpack(v, &p, &size);
    if (p) check_and_free(p, size);
  }
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("ops=%lu\ntrims=%lu\nhanded=%lu\nmismatches=%lu\ndouble_frees=%llu\n"
         "invalid_frees=%llu\n",
         atomic_load(&ops), atomic_load(&trims), atomic_load(&handed), atomic_load(&mismatches),
         (unsigned long long)s.double_frees, (unsigned long long)s.invalid_frees);
  return atomic_load(&mismatches) ? 1 : 0;
}
