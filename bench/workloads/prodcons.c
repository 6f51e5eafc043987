/* Producer/consumer with cross-thread frees: producers allocate and fill blocks (16 B - 1 KiB)
 * and hand them over in batches; consumers verify and free them, so nearly every free is of a
 * block another thread allocated (mimalloc's delayed/remote free lists, glibc's arena locks). */
#include <pthread.h>

#include "wl_common.h"

enum { kPairs = 2, kBatch = 256, kQueue = 64, kItemsPerScale = 3000000 };

struct batch {
  void *p[kBatch];
  uint32_t len[kBatch];
  uint64_t tag[kBatch];
};

/* A bounded queue of batches per pair: a mutex and two condition variables, so that the two
 * threads of a pair hand over 256 blocks per lock round trip and the allocator dominates. */
struct queue {
  pthread_mutex_t mu;
  pthread_cond_t not_empty, not_full;
  struct batch *b[kQueue];
  int head, count;
  long items;
} queues[kPairs];

static void push(struct queue *q, struct batch *b) {
  pthread_mutex_lock(&q->mu);
  while (q->count == kQueue)
    pthread_cond_wait(&q->not_full, &q->mu);
  q->b[(q->head + q->count++) % kQueue] = b;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

static struct batch *pop(struct queue *q) {
  pthread_mutex_lock(&q->mu);
  while (q->count == 0)
    pthread_cond_wait(&q->not_empty, &q->mu);
  struct batch *b = q->b[q->head];
  q->head = (q->head + 1) % kQueue;
  q->count--;
  pthread_cond_signal(&q->not_full);
  pthread_mutex_unlock(&q->mu);
  return b;
}

static void *producer(void *arg) {
  struct queue *q = arg;
  uint64_t seed = 42 + (uint64_t)(q - queues), n = 0;
  for (long done = 0; done < q->items; done += kBatch) {
    struct batch *b = malloc(sizeof *b); /* the batch itself also crosses threads */
    if (!b) wl_fail("prodcons", "malloc returned NULL");
    for (int i = 0; i < kBatch; i++) {
      b->len[i] = (uint32_t)wl_small_size(&seed, 1024);
      b->tag[i] = ++n * 0x9E3779B97F4A7C15ULL;
      if (!(b->p[i] = malloc(b->len[i]))) wl_fail("prodcons", "malloc returned NULL");
      wl_fill(b->p[i], b->len[i], b->tag[i]);
    }
    push(q, b);
  }
  push(q, NULL);
  return NULL;
}

static void *consumer(void *arg) {
  struct queue *q = arg;
  for (struct batch *b; (b = pop(q));) {
    for (int i = 0; i < kBatch; i++) {
      if (!wl_check(b->p[i], b->len[i], b->tag[i])) wl_fail("prodcons", "block contents changed");
      free(b->p[i]);
    }
    free(b);
  }
  return NULL;
}

int main(int argc, char **argv) {
  const long items = wl_scale(argc, argv) * kItemsPerScale / kPairs;
  pthread_t t[2 * kPairs];
  for (int i = 0; i < kPairs; i++) {
    pthread_mutex_init(&queues[i].mu, NULL);
    pthread_cond_init(&queues[i].not_empty, NULL);
    pthread_cond_init(&queues[i].not_full, NULL);
    queues[i].items = items;
    if (pthread_create(&t[2 * i], NULL, producer, &queues[i]) ||
        pthread_create(&t[2 * i + 1], NULL, consumer, &queues[i]))
      wl_fail("prodcons", "pthread_create failed");
  }
  for (int i = 0; i < 2 * kPairs; i++)
    pthread_join(t[i], NULL);
  printf("prodcons ok: %d pairs, %ld blocks each, malloc from %s\n", kPairs, items,
         wl_malloc_lib());
  return 0;
}
