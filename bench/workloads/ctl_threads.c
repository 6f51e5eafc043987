/* Reproductions of the control heap's multi-threaded costs, one mode per pattern, each a fixed
 * amount of work (so that runs compare by wall time under LD_PRELOAD, and callgrind counts the
 * same operations under every allocator):
 *   spawn  THREADS GENERATIONS OPS  thread churn: each generation starts THREADS threads that
 *                                   each do OPS malloc/free pairs and exit (set-up and exit)
 *   larson THREADS GENERATIONS OPS  Larson's pattern (wl_larson.h): THREADS lineages of 5000
 *                                   blocks (8 B - 1000 B) the main thread made; each thread
 *                                   replaces OPS random blocks of its lineage (freeing what the
 *                                   main thread or its predecessors made), starts its successor
 *                                   and exits
 *   xfree  THREADS ROUNDS           pairs of threads: one allocates 256 blocks, the other frees
 *                                   them, ROUNDS times (cross-thread frees, live threads)
 *   scratch THREADS ITERS REPS      cache-scratch: each thread frees a 1-byte object the main
 *                                   thread made, then ITERS times allocates 1 byte and writes it
 *                                   REPS times (passive false sharing)
 *   thrash THREADS ITERS REPS       the same without the object handed over (active)
 *   local  THREADS OPS              each thread: OPS pairs over a table of 1024 blocks of
 *                                   16 B - 32 KiB (glibc's thread benchmark's pattern)
 * Prints one line with the mode and the wall time in seconds. */
#include <pthread.h>
#include <time.h>

#include "wl_common.h"
#include "wl_larson.h"

static long arg(int argc, char **argv, int i, long dflt) {
  return argc > i ? atol(argv[i]) : dflt;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void start_all(int n, void *(*fn)(void *), void *args, size_t arg_size) {
  pthread_t t[256];
  if (n > 256) wl_fail("ctl_threads", "at most 256 threads");
  for (int i = 0; i < n; i++)
    if (pthread_create(&t[i], NULL, fn, (char *)args + (size_t)i * arg_size))
      wl_fail("ctl_threads", "pthread_create failed");
  for (int i = 0; i < n; i++)
    pthread_join(t[i], NULL);
}

/* spawn ---------------------------------------------------------------------------------- */
struct spawn_arg {
  long ops;
  uint64_t seed;
};

static void *spawn_worker(void *p) {
  struct spawn_arg *a = p;
  for (long i = 0; i < a->ops; i++) {
    char *b = malloc(wl_small_size(&a->seed, 256));
    if (!b) wl_fail("spawn", "malloc returned NULL");
    b[0] = 1;
    free(b);
  }
  return NULL;
}

/* larson: wl_larson.h (the suite's larson program runs it too), blocks not checked, so that
 * callgrind counts the allocator's work. */

/* xfree ---------------------------------------------------------------------------------- */
struct pair {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  void *batch[256];
  int full; /* 1 while the batch waits for the consumer */
  long rounds;
  int role;
  struct pair *self;
};

static void *xfree_worker(void *p) {
  struct pair *slot = p, *q = slot->self;
  uint64_t seed = 7;
  for (long r = 0; r < q->rounds; r++) {
    pthread_mutex_lock(&q->mu);
    while (q->full != (slot->role == 1))
      pthread_cond_wait(&q->cv, &q->mu);
    for (int i = 0; i < 256; i++) {
      if (slot->role == 0) {
        char *b = malloc(wl_small_size(&seed, 512));
        if (!b) wl_fail("xfree", "malloc returned NULL");
        b[0] = 1;
        q->batch[i] = b;
      } else {
        free(q->batch[i]);
      }
    }
    q->full = slot->role == 0;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
  }
  return NULL;
}

/* scratch / thrash ----------------------------------------------------------------------- */
struct scratch_arg {
  char *given;
  long iters, reps;
};

static void *scratch_worker(void *p) {
  struct scratch_arg *a = p;
  free(a->given);
  for (long i = 0; i < a->iters; i++) {
    volatile char *o = malloc(1);
    if (!o) wl_fail("scratch", "malloc returned NULL");
    for (long j = 0; j < a->reps; j++) {
      o[0] = (char)j;
      (void)o[0];
    }
    free((void *)o);
  }
  return NULL;
}

/* local ---------------------------------------------------------------------------------- */
struct local_arg {
  long ops;
  uint64_t seed;
};

static void *local_worker(void *p) {
  struct local_arg *a = p;
  void *b[1024] = {0};
  for (long i = 0; i < a->ops; i++) {
    size_t v = wl_rand(&a->seed) % 1024;
    free(b[v]);
    size_t n = 16 + wl_rand(&a->seed) % (32768 - 16);
    char *q = malloc(n);
    if (!q) wl_fail("local", "malloc returned NULL");
    q[0] = 1;
    b[v] = q;
  }
  for (int v = 0; v < 1024; v++)
    free(b[v]);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s spawn|larson|xfree|scratch|thrash|local [numbers]\n", argv[0]);
    return 2;
  }
  const char *mode = argv[1];
  const int threads = (int)arg(argc, argv, 2, 2);
  if (threads < 1 || threads > 256) wl_fail("ctl_threads", "1 to 256 threads");
  const double t0 = now();
  if (!strcmp(mode, "spawn")) {
    const long gens = arg(argc, argv, 3, 2000), ops = arg(argc, argv, 4, 100);
    struct spawn_arg a[256];
    for (long g = 0; g < gens; g++) {
      for (int i = 0; i < threads; i++)
        a[i] = (struct spawn_arg){ops, (uint64_t)(g * threads + i + 1)};
      start_all(threads, spawn_worker, a, sizeof a[0]);
    }
  } else if (!strcmp(mode, "larson")) {
    larson_run(threads, arg(argc, argv, 3, 20), arg(argc, argv, 4, 100000), 0);
  } else if (!strcmp(mode, "xfree")) {
    const long rounds = arg(argc, argv, 3, 20000);
    const int pairs = (threads + 1) / 2;
    struct pair *q = calloc((size_t)pairs, sizeof *q);
    struct pair *slots = calloc((size_t)pairs * 2, sizeof *slots);
    if (!q || !slots) wl_fail("xfree", "calloc returned NULL");
    for (int i = 0; i < pairs; i++) {
      pthread_mutex_init(&q[i].mu, NULL);
      pthread_cond_init(&q[i].cv, NULL);
      q[i].rounds = rounds;
      for (int r = 0; r < 2; r++)
        slots[2 * i + r] = (struct pair){.role = r, .self = &q[i], .rounds = rounds};
    }
    start_all(2 * pairs, xfree_worker, slots, sizeof slots[0]);
    free(slots);
    free(q);
  } else if (!strcmp(mode, "scratch") || !strcmp(mode, "thrash")) {
    const long iters = arg(argc, argv, 3, 1000), reps = arg(argc, argv, 4, 2000000) / threads;
    struct scratch_arg a[256];
    for (int i = 0; i < threads; i++) {
      a[i] = (struct scratch_arg){NULL, iters, reps};
      if (mode[0] == 's' && !(a[i].given = malloc(1))) wl_fail("scratch", "malloc failed");
    }
    start_all(threads, scratch_worker, a, sizeof a[0]);
  } else if (!strcmp(mode, "local")) {
    const long ops = arg(argc, argv, 3, 2000000);
    struct local_arg a[256];
    for (int i = 0; i < threads; i++)
      a[i] = (struct local_arg){ops, (uint64_t)i + 1};
    start_all(threads, local_worker, a, sizeof a[0]);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  printf("%s %d %.4f %s\n", mode, threads, now() - t0, wl_malloc_lib());
  return 0;
}
