/* Shared by the suite's multi-threaded programs: the thread-count argument and blocks that carry
 * their own size and tag, so that whichever thread frees a block can verify it first. */
#ifndef NICMALLOC_SUITE_MT_H
#define NICMALLOC_SUITE_MT_H

#include <pthread.h>
#include <unistd.h>

#include "wl_common.h"

/* The optional second argument; without it the original benchmark's usual default, which is a
 * multiple of the processor count (so the figures of a 2-core and a 64-core machine are each
 * the benchmark as its authors ran it there). */
static inline int mt_threads(int argc, char **argv, int per_cpu) {
  if (argc >= 3) {
    int n = atoi(argv[2]);
    if (n < 1 || n > 1024) {
      fprintf(stderr, "usage: %s [quick|full|SCALE] [THREADS 1..1024]\n", argv[0]);
      exit(2);
    }
    return n;
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return (int)(cpus < 1 ? per_cpu : cpus * per_cpu);
}

static inline pthread_t mt_start(const char *name, void *(*fn)(void *), void *arg) {
  pthread_t t;
  if (pthread_create(&t, NULL, fn, arg)) wl_fail(name, "pthread_create failed");
  return t;
}

/* A self-describing block: the first word is its tag, the second its size xor the tag, the rest
 * is wl_fill's pattern (one word per page and the last byte). Sizes below kObjMin are raised to it.
 */
enum { kObjMin = 2 * sizeof(uint64_t) + 1 };

static inline void *obj_new(const char *name, size_t len, uint64_t tag) {
  if (len < kObjMin) len = kObjMin;
  uint64_t *p = (uint64_t *)malloc(len);
  if (!p) wl_fail(name, "malloc returned NULL");
  wl_fill(p, len, tag);
  p[1] = (uint64_t)len ^ tag;
  return p;
}

/* Verifies a block made by obj_new (any thread) and frees it; max_len bounds the decoded size so
 * that a corrupted header is reported, not followed. */
static inline void obj_free(const char *name, void *block, size_t max_len) {
  uint64_t *p = (uint64_t *)block;
  uint64_t tag = p[0];
  size_t len = (size_t)(p[1] ^ tag);
  if (len < kObjMin || len > max_len || !wl_check(p, len, tag))
    wl_fail(name, "block contents changed");
  free(p);
}

/* A small mailbox between threads: put waits only while it is full, so that a thread runs ahead of
 * the one it hands work to by at most kBoxCap items instead of in lockstep (which would measure the
 * scheduler on a machine with fewer cores than threads); take can wait or not. */
enum { kBoxCap = 8 };

struct mt_box {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  void *item[kBoxCap];
  int head, count;
};

static inline void mt_box_init(struct mt_box *b) {
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  b->head = b->count = 0;
}

static inline void mt_box_put(struct mt_box *b, void *item) {
  pthread_mutex_lock(&b->mu);
  while (b->count == kBoxCap)
    pthread_cond_wait(&b->cv, &b->mu);
  b->item[(b->head + b->count++) % kBoxCap] = item;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

/* The oldest item; NULL when empty and !wait. */
static inline void *mt_box_take(struct mt_box *b, int wait) {
  pthread_mutex_lock(&b->mu);
  while (wait && !b->count)
    pthread_cond_wait(&b->cv, &b->mu);
  void *item = NULL;
  if (b->count) {
    item = b->item[b->head];
    b->head = (b->head + 1) % kBoxCap;
    b->count--;
    pthread_cond_broadcast(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
  return item;
}

#endif
