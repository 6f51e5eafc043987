/* cache-scratch: passive false sharing, modeled on the published description of the Hoard
 * benchmark of that name (Berger et al., ASPLOS 2000) as the allocator suites run it (8-byte
 * objects, 1000 objects per thread, threads = processors; cache-scratch1.c is the one-thread run);
 * written for this repository, not the original program. The main thread allocates one small
 * object per thread, next to each other; each thread frees the one it was given and then, over
 * and over, allocates an object of the same size, writes every byte of it many times and frees it.
 * An allocator that hands a thread's next object out of the memory freed there (a cache line the
 * main thread filled with every thread's object) makes the threads write to one line. */
#include "suite_mt.h"

#ifndef CACHE_SCRATCH_THREADS
#define CACHE_SCRATCH_THREADS 0 /* processors */
#endif
#ifndef CACHE_SCRATCH_NAME
#define CACHE_SCRATCH_NAME "cache-scratch"
#endif

enum { kObjSize = 8, kObjects = 1000, kWritesPerScale = 60000 };

struct job {
  unsigned char *given;
  long writes;
};

static void *worker(void *arg) {
  struct job *j = arg;
  for (int k = 0; k < kObjSize; k++)
    if (j->given[k] != (unsigned char)(k + 1))
      wl_fail(CACHE_SCRATCH_NAME, "block contents changed");
  free(j->given);
  for (int i = 0; i < kObjects; i++) {
    volatile unsigned char *a = malloc(kObjSize);
    if (!a) wl_fail(CACHE_SCRATCH_NAME, "malloc returned NULL");
    /* a store and a load of every byte per round, as the original does */
    for (long w = 0; w < j->writes; w++)
      for (int k = 0; k < kObjSize; k++) {
        a[k] = (unsigned char)(w + k);
        (void)a[k];
      }
    for (int k = 0; k < kObjSize; k++)
      if (a[k] != (unsigned char)(j->writes - 1 + k))
        wl_fail(CACHE_SCRATCH_NAME, "block contents changed");
    free((void *)a);
  }
  return NULL;
}

int main(int argc, char **argv) {
  const long writes = wl_scale(argc, argv) * kWritesPerScale;
  const int threads =
      CACHE_SCRATCH_THREADS && argc < 3 ? CACHE_SCRATCH_THREADS : mt_threads(argc, argv, 1);
  struct job *jobs = calloc((size_t)threads, sizeof *jobs);
  pthread_t *t = calloc((size_t)threads, sizeof *t);
  if (!jobs || !t) wl_fail(CACHE_SCRATCH_NAME, "calloc returned NULL");
  for (int i = 0; i < threads; i++) { /* all from the main thread, back to back */
    if (!(jobs[i].given = malloc(kObjSize))) wl_fail(CACHE_SCRATCH_NAME, "malloc returned NULL");
    for (int k = 0; k < kObjSize; k++)
      jobs[i].given[k] = (unsigned char)(k + 1);
    jobs[i].writes = writes;
  }
  for (int i = 0; i < threads; i++)
    t[i] = mt_start(CACHE_SCRATCH_NAME, worker, &jobs[i]);
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  free(t);
  free(jobs);
  printf("%s ok: %d threads, %d objects of %d B each written %ld times, malloc from %s\n",
         CACHE_SCRATCH_NAME, threads, kObjects, kObjSize, writes, wl_malloc_lib());
  return 0;
}
