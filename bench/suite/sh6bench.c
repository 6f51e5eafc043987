/* sh6bench: modeled on the published description of MicroQuill's SmartHeap benchmark sh6bench
 * as the allocator suites run it (threads = twice the processors, blocks of 1 - 1000 B); written
 * for this repository, not the original program. Every thread, round after round, allocates a
 * run of blocks whose sizes climb through the range, frees every other one walking backwards,
 * fills those gaps with blocks whose sizes fall through the range, then frees everything walking
 * forwards: allocation and free orders that differ, with sizes that change all the time.
 * sh8bench.c builds the same program with cross-thread frees. */
#include "suite_mt.h"

#ifndef SH_NAME
#define SH_NAME "sh6bench"
#endif
#ifndef SH_CROSS /* hand the other half of each round's blocks to the next thread to free */
#define SH_CROSS 0
#endif

enum {
  kBlocks = 2000, /* per round and thread; even so that the halves match */
  kMinSize = 1,
  kMaxSize = 1000,
  kStep = 37,
  kRoundsPerScale = SH_CROSS ? 375 : 1000, /* cross-thread frees cost more */
};

static long rounds;
static int threads;
static struct mt_box *boxes; /* boxes[t]: what thread t is handed */

static size_t climbing(int i) {
  return kMinSize + ((size_t)i * kStep) % (kMaxSize - kMinSize + 1);
}

static void free_parcel(void **in) {
  for (int i = 0; i < kBlocks / 2; i++)
    obj_free(SH_NAME, in[i], kMaxSize + kObjMin);
  free(in);
}

static void *worker(void *arg) {
  const int me = (int)(uintptr_t)arg;
  uint64_t serial = (uint64_t)me << 40;
  long received = 0;
  void **p = malloc(kBlocks * sizeof *p);
  if (!p) wl_fail(SH_NAME, "malloc returned NULL");
  for (long r = 0; r < rounds; r++) {
    for (int i = 0; i < kBlocks; i++)
      p[i] = obj_new(SH_NAME, climbing(i), ++serial * 0x9E3779B97F4A7C15ULL);
    for (int i = kBlocks - 1; i >= 0; i -= 2)
      obj_free(SH_NAME, p[i], kMaxSize + kObjMin);
    for (int i = 1; i < kBlocks; i += 2)
      p[i] = obj_new(SH_NAME, climbing(kBlocks - i), ++serial * 0x9E3779B97F4A7C15ULL);
    if (SH_CROSS) {
      /* the odd half goes to the next thread in a list of its own; what came in from the previous
       * thread so far is freed */
      void **parcel = malloc(kBlocks / 2 * sizeof *parcel);
      if (!parcel) wl_fail(SH_NAME, "malloc returned NULL");
      for (int i = 1; i < kBlocks; i += 2)
        parcel[i / 2] = p[i];
      mt_box_put(&boxes[(me + 1) % threads], parcel);
      for (int i = 0; i < kBlocks; i += 2)
        obj_free(SH_NAME, p[i], kMaxSize + kObjMin);
      for (void **in; (in = mt_box_take(&boxes[me], 0)); received++)
        free_parcel(in);
    } else {
      for (int i = 0; i < kBlocks; i++)
        obj_free(SH_NAME, p[i], kMaxSize + kObjMin);
    }
  }
  while (SH_CROSS && received < rounds) /* the previous thread may still be sending */
    free_parcel(mt_box_take(&boxes[me], 1)), received++;
  free(p);
  return NULL;
}

int main(int argc, char **argv) {
  rounds = wl_scale(argc, argv) * kRoundsPerScale;
  threads = mt_threads(argc, argv, 2);
  pthread_t *t = calloc((size_t)threads, sizeof *t);
  boxes = calloc((size_t)threads, sizeof *boxes);
  if (!t || !boxes) wl_fail(SH_NAME, "calloc returned NULL");
  for (int i = 0; i < threads; i++)
    mt_box_init(&boxes[i]);
  for (int i = 0; i < threads; i++)
    t[i] = mt_start(SH_NAME, worker, (void *)(uintptr_t)i);
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  free(boxes);
  free(t);
  printf("%s ok: %d threads, %ld rounds of %d blocks each%s, malloc from %s\n", SH_NAME, threads,
         rounds, kBlocks, SH_CROSS ? " (half freed by the next thread)" : "", wl_malloc_lib());
  return 0;
}
