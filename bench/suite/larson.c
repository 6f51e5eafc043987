/* larson: a server simulation modeled on the published description of Larson and Krishnan's
 * benchmark ("Memory Allocation for Long-Running Server Applications", ISMM 1998) as the
 * allocator suites run it (8 - 1000 B blocks, 5000 per thread, threads = processors); written for
 * this repository, not the original program. The main thread allocates every thread's array of
 * blocks; each thread then replaces random blocks (free, then malloc of a random size) and, after
 * its share, hands its array to a new thread and exits: the new thread frees blocks the old one
 * made, so most frees are cross-thread frees of an exited thread's memory, and threads come and go
 * all the time. Unlike the original the work is fixed (not a timed run), so wall time compares. */
#include "suite_mt.h"

enum {
  kMinSize = 8,
  kMaxSize = 1000,
  kBlocks = 5000,          /* per thread */
  kReplacePerGen = 100000, /* replacements before the array moves to a new thread */
  kGensPerScale = 10,      /* generations of threads per slot */
};

struct slot {
  void *ptr[kBlocks];
  uint32_t len[kBlocks];
  uint64_t tag[kBlocks];
  uint64_t seed, serial;
  long gens_left;
};

static pthread_mutex_t done_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static int slots_done;

static void *generation(void *arg) {
  struct slot *s = arg;
  pthread_detach(pthread_self());
  for (long i = 0; i < kReplacePerGen; i++) {
    size_t v = wl_rand(&s->seed) % kBlocks;
    if (!wl_check(s->ptr[v], s->len[v], s->tag[v])) wl_fail("larson", "block contents changed");
    free(s->ptr[v]);
    s->len[v] = (uint32_t)(kMinSize + wl_rand(&s->seed) % (kMaxSize - kMinSize + 1));
    s->tag[v] = ++s->serial * 0x9E3779B97F4A7C15ULL;
    if (!(s->ptr[v] = malloc(s->len[v]))) wl_fail("larson", "malloc returned NULL");
    wl_fill(s->ptr[v], s->len[v], s->tag[v]);
  }
  if (--s->gens_left > 0) { /* the successor owns the slot from here on */
    mt_start("larson", generation, s);
    return NULL;
  }
  pthread_mutex_lock(&done_mu);
  slots_done++;
  pthread_cond_signal(&done_cv);
  pthread_mutex_unlock(&done_mu);
  return NULL;
}

int main(int argc, char **argv) {
  const long gens = wl_scale(argc, argv) * kGensPerScale;
  const int threads = mt_threads(argc, argv, 1);
  struct slot *slots = calloc((size_t)threads, sizeof *slots);
  if (!slots) wl_fail("larson", "calloc returned NULL");
  for (int t = 0; t < threads; t++) {
    struct slot *s = &slots[t];
    s->seed = 4141 + (uint64_t)t;
    s->serial = (uint64_t)t << 40;
    s->gens_left = gens;
    for (int i = 0; i < kBlocks; i++) {
      s->len[i] = (uint32_t)(kMinSize + wl_rand(&s->seed) % (kMaxSize - kMinSize + 1));
      s->tag[i] = ++s->serial * 0x9E3779B97F4A7C15ULL;
      if (!(s->ptr[i] = malloc(s->len[i]))) wl_fail("larson", "malloc returned NULL");
      wl_fill(s->ptr[i], s->len[i], s->tag[i]);
    }
  }
  for (int t = 0; t < threads; t++)
    mt_start("larson", generation, &slots[t]);
  pthread_mutex_lock(&done_mu);
  while (slots_done < threads)
    pthread_cond_wait(&done_cv, &done_mu);
  pthread_mutex_unlock(&done_mu);
  for (int t = 0; t < threads; t++)
    for (int i = 0; i < kBlocks; i++) {
      if (!wl_check(slots[t].ptr[i], slots[t].len[i], slots[t].tag[i]))
        wl_fail("larson", "block contents changed");
      free(slots[t].ptr[i]);
    }
  free(slots);
  printf("larson ok: %d threads, %ld generations of %d replacements each, malloc from %s\n",
         threads, gens, kReplacePerGen, wl_malloc_lib());
  return 0;
}
