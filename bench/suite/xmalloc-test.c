/* xmalloc-test: modeled on the published description of Lever and Boreham's xmalloc-test as the
 * allocator suites run it (-w processors, -s 64: N allocating and N freeing threads, blocks up to
 * 64 B); written for this repository, not the original program. Allocating threads fill batches
 * of 8 - 64 B blocks and put them on one shared list; freeing threads take whichever batch comes
 * next, check and free its blocks and the batch itself, so every free is of memory another thread
 * allocated, and which thread that was changes all the time. Fixed work instead of a timed run. */
#include "suite_mt.h"

enum { kBatch = 64, kMaxBatches = 256, kMinSize = 8, kMaxSize = 64, kBlocksPerScale = 5000000 };

struct batch {
  struct batch *next;
  void *p[kBatch];
  uint8_t len[kBatch];
  uint64_t tag[kBatch];
};

/* One list for all: a lock and two conditions; a bound so that allocating threads cannot run
 * ahead of the freeing ones by more than kMaxBatches. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER, not_full = PTHREAD_COND_INITIALIZER;
static struct batch *head;
static int queued, producers_left;
static long batches_per_producer;

static void *producer(void *arg) {
  uint64_t seed = 99 + (uintptr_t)arg, serial = (uint64_t)(uintptr_t)arg << 40;
  for (long n = 0; n < batches_per_producer; n++) {
    struct batch *b = malloc(sizeof *b);
    if (!b) wl_fail("xmalloc-test", "malloc returned NULL");
    for (int i = 0; i < kBatch; i++) {
      b->len[i] = (uint8_t)(kMinSize + wl_rand(&seed) % (kMaxSize - kMinSize + 1));
      b->tag[i] = ++serial * 0x9E3779B97F4A7C15ULL;
      if (!(b->p[i] = malloc(b->len[i]))) wl_fail("xmalloc-test", "malloc returned NULL");
      wl_fill(b->p[i], b->len[i], b->tag[i]);
    }
    pthread_mutex_lock(&mu);
    while (queued == kMaxBatches)
      pthread_cond_wait(&not_full, &mu);
    b->next = head;
    head = b;
    queued++;
    pthread_cond_signal(&not_empty);
    pthread_mutex_unlock(&mu);
  }
  pthread_mutex_lock(&mu);
  producers_left--;
  pthread_cond_broadcast(&not_empty);
  pthread_mutex_unlock(&mu);
  return NULL;
}

static void *consumer(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&mu);
    while (!head && producers_left)
      pthread_cond_wait(&not_empty, &mu);
    struct batch *b = head;
    if (b) {
      head = b->next;
      queued--;
      pthread_cond_signal(&not_full);
    }
    pthread_mutex_unlock(&mu);
    if (!b) return NULL;
    for (int i = 0; i < kBatch; i++) {
      if (!wl_check(b->p[i], b->len[i], b->tag[i]))
        wl_fail("xmalloc-test", "block contents changed");
      free(b->p[i]);
    }
    free(b);
  }
}

int main(int argc, char **argv) {
  const int workers = mt_threads(argc, argv, 1);
  batches_per_producer = wl_scale(argc, argv) * kBlocksPerScale / kBatch / workers;
  producers_left = workers;
  pthread_t *t = calloc(2 * (size_t)workers, sizeof *t);
  if (!t) wl_fail("xmalloc-test", "calloc returned NULL");
  for (int i = 0; i < workers; i++) {
    t[2 * i] = mt_start("xmalloc-test", producer, (void *)(uintptr_t)(i + 1));
    t[2 * i + 1] = mt_start("xmalloc-test", consumer, NULL);
  }
  for (int i = 0; i < 2 * workers; i++)
    pthread_join(t[i], NULL);
  free(t);
  printf("xmalloc-test ok: %d allocating and %d freeing threads, %ld blocks, malloc from %s\n",
         workers, workers, batches_per_producer * kBatch * workers, wl_malloc_lib());
  return 0;
}
