/* Many threads of mixed sizes: 8 threads (more than the cores, so they are preempted while holding
 * allocator state) each churn their own table of blocks: 70% small (8 B - 1 KiB), 25% medium
 * (1 - 32 KiB), 5% large (32 - 256 KiB); one free in eight is of a block another thread made. */
#include <pthread.h>
#include <stdatomic.h>

#include "wl_common.h"

enum { kThreads = 8, kSlots = 1024, kOpsPerScale = 800000, kShared = 1024 };

/* Blocks handed from one thread to another: a slot array written with atomic exchange. */
static _Atomic(uintptr_t) shared[kShared];
static long ops_per_thread;

static size_t mixed_size(uint64_t *seed) {
  uint64_t r = wl_rand(seed) % 100;
  if (r < 70) return wl_small_size(seed, 1024);
  if (r < 95) return 1024 + wl_rand(seed) % (31 * 1024);
  return 32768 + wl_rand(seed) % (224 * 1024);
}

/* A block starts with its size and tag so that any thread can verify it. */
struct hdr {
  size_t len;
  uint64_t tag;
};

static void check_free(void *p) {
  struct hdr h;
  memcpy(&h, p, sizeof h);
  if (!wl_check((char *)p + sizeof h, h.len - sizeof h, h.tag))
    wl_fail("threads_mixed", "block contents changed");
  free(p);
}

static void *worker(void *arg) {
  uint64_t seed = 42 + (uintptr_t)arg, n = 0;
  void **ptr = calloc(kSlots, sizeof *ptr);
  if (!ptr) wl_fail("threads_mixed", "calloc returned NULL");
  for (long i = 0; i < ops_per_thread; i++) {
    size_t s = wl_rand(&seed) % kSlots;
    if (ptr[s]) {
      if (i % 8 == 0) /* trade it for whatever another thread left in a shared slot */
        ptr[s] = (void *)atomic_exchange(&shared[wl_rand(&seed) % kShared], (uintptr_t)ptr[s]);
      if (ptr[s]) check_free(ptr[s]);
    }
    struct hdr h = {sizeof h + mixed_size(&seed), ((uintptr_t)arg << 48) + ++n};
    if (!(ptr[s] = malloc(h.len))) wl_fail("threads_mixed", "malloc returned NULL");
    memcpy(ptr[s], &h, sizeof h);
    wl_fill((char *)ptr[s] + sizeof h, h.len - sizeof h, h.tag);
  }
  for (int s = 0; s < kSlots; s++)
    if (ptr[s]) check_free(ptr[s]);
  free(ptr);
  return NULL;
}

int main(int argc, char **argv) {
  ops_per_thread = wl_scale(argc, argv) * kOpsPerScale / kThreads;
  pthread_t t[kThreads];
  for (uintptr_t i = 0; i < kThreads; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)i)) wl_fail("threads_mixed", "pthread_create");
  for (int i = 0; i < kThreads; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < kShared; i++)
    if (shared[i]) check_free((void *)shared[i]);
  printf("threads_mixed ok: %d threads, %ld ops each, malloc from %s\n", kThreads, ops_per_thread,
         wl_malloc_lib());
  return 0;
}
