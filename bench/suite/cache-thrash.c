/* cache-thrash: active false sharing, modeled on the published description of the Hoard
 * benchmark of that name (Berger et al., ASPLOS 2000) as the allocator suites run it (8-byte
 * objects, 1000 per thread, threads = processors); written for this repository, not the original
 * program. Every thread, at the same time, allocates a small object, writes every byte of it many
 * times and frees it, 1000 times over. An allocator that gives two threads objects on one cache
 * line makes their writes fight over it. */
#include "suite_mt.h"

enum { kObjSize = 8, kObjects = 1000, kWritesPerScale = 60000 };

static long writes;

static void *worker(void *arg) {
  (void)arg;
  for (int i = 0; i < kObjects; i++) {
    volatile unsigned char *a = malloc(kObjSize);
    if (!a) wl_fail("cache-thrash", "malloc returned NULL");
    /* a store and a load of every byte per round, as the original does */
    for (long w = 0; w < writes; w++)
      for (int k = 0; k < kObjSize; k++) {
        a[k] = (unsigned char)(w + k);
        (void)a[k];
      }
    for (int k = 0; k < kObjSize; k++)
      if (a[k] != (unsigned char)(writes - 1 + k))
        wl_fail("cache-thrash", "block contents changed");
    free((void *)a);
  }
  return NULL;
}

int main(int argc, char **argv) {
  writes = wl_scale(argc, argv) * kWritesPerScale;
  const int threads = mt_threads(argc, argv, 1);
  pthread_t *t = calloc((size_t)threads, sizeof *t);
  if (!t) wl_fail("cache-thrash", "calloc returned NULL");
  for (int i = 0; i < threads; i++)
    t[i] = mt_start("cache-thrash", worker, NULL);
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  free(t);
  printf("cache-thrash ok: %d threads, %d objects of %d B each written %ld times, malloc from %s\n",
         threads, kObjects, kObjSize, writes, wl_malloc_lib());
  return 0;
}
