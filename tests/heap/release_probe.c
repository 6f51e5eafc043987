/* release_probe: fills dataplane memory with small objects, frees most of them, and reports how
 * the pinned bytes follow. Modes: "fifo" frees the oldest 90% (whole chunks empty out), "random"
 * frees a random 90% (every chunk keeps some live objects), and "poke" is fifo but lets the
 * reaper thread and later dataplane traffic do the release instead of nic_collect ("fork-poke":
 * in a fork child, whose reaper thread the fork left behind), and "stale"
 * is fifo, then frees once more a block whose chunk went back to the OS. "cursor" (TOTAL
 * unused) releases the chunk a thread last allocated from, then frees elsewhere and allocates;
 * "draining" (TOTAL unused) translates into a chunk waiting to be released. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void print(const char *tag) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("%s_draining=%u\n%s_dropped=%zu\n%s_backed=%zu\n", tag, s.chunks_draining, tag,
         s.dataplane_dropped, tag, s.dataplane_backed);
  printf("%s_pinned=%zu\n%s_live=%zu\n%s_mapped=%zu\n%s_chunks=%u\n%s_released=%llu\n", tag,
         s.dataplane_pinned, tag, s.dataplane_live, tag, s.dataplane_mapped, tag, s.chunks_live,
         tag, (unsigned long long)s.chunks_released, tag);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static void wait_for_release(void) {
  for (int tries = 0; tries < 100; tries++) {
    struct nic_stats s = NIC_STATS_INIT;
    nic_get_stats(&s);
    if (s.chunks_released >= 1) return;
    sleep_ms(50);
  }
}

/* A thread takes a second chunk, empties it and waits: the page its heap keeps there keeps the
 * chunk draining. */
static pthread_mutex_t step_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t step_cond = PTHREAD_COND_INITIALIZER;
static int step;
static void *in_second_chunk;

static void wait_step(int want) {
  pthread_mutex_lock(&step_lock);
  while (step < want)
    pthread_cond_wait(&step_cond, &step_lock);
  pthread_mutex_unlock(&step_lock);
}
static void set_step(int to) {
  pthread_mutex_lock(&step_lock);
  step = to;
  pthread_cond_broadcast(&step_cond);
  pthread_mutex_unlock(&step_lock);
}

static void *empty_a_chunk(void *arg) {
  (void)arg;
  in_second_chunk = nic_malloc(1000); /* the first block fills the first chunk's only segment */
  free(in_second_chunk);
  set_step(1);
  wait_step(2);
  free(nic_malloc(100)); /* back in dataplane code: its heap lets the chunk go */
  return NULL;
}

/* A draining chunk is mapped, pinned and registered until it is released, and translates
 * until then: an allocation racing the reaper can leave a live block in one. */
static int draining_translates(void) {
  void *first = nic_malloc(20 << 20);
  pthread_t thread;
  if (!first || pthread_create(&thread, NULL, empty_a_chunk, NULL)) return 1;
  wait_step(1);
  struct nic_stats s = {0};
  for (int tries = 0; tries < 100 && s.chunks_draining == 0; tries++) {
    sleep_ms(20);
    nic_get_stats(&s);
  }
  struct nic_region_ref ref;
  printf("draining=%u\n", s.chunks_draining);
  printf("draining_translated=%d\n", nic_translate(in_second_chunk, 64, &ref) == 0);
  set_step(2);
  pthread_join(thread, NULL);
  wait_for_release();
  print("end");
  printf("released_translated=%d\n", nic_translate(in_second_chunk, 64, &ref) == 0);
  free(first);
  return 0;
}

/* Two blocks of 20 MiB in 32 MiB chunks take two chunks; the second, where the thread last
 * allocated, empties and goes back to the OS. A free in the first then brings the thread up to
 * date with the chunk states, and its next allocation must land in a live chunk. */
static int released_cursor(void) {
  void *first = nic_malloc(20 << 20), *second = nic_malloc(20 << 20);
  if (!first || !second) return 1;
  free(second);
  wait_for_release();
  print("emptied");
  free(first);
  void *small = nic_malloc(100);
  struct nic_region_ref ref;
  printf("small_dataplane=%d\n", nic_is_dataplane(small));
  printf("small_translated=%d\n", nic_translate(small, 100, &ref) == 0);
  free(small);
  print("end");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr,
            "usage: release_probe fifo|random|poke|fork-poke|stale|cursor|draining TOTAL_BYTES\n");
    return 2;
  }
  const char *mode = argv[1];
  if (!strcmp(mode, "cursor")) return released_cursor();
  if (!strcmp(mode, "draining")) return draining_translates();
  size_t total = strtoull(argv[2], NULL, 0), used = 0, n = 0, cap = total / 64;
  unsigned char **blocks = malloc(cap * sizeof *blocks);
  unsigned seed = 12345;
  while (used < total && n < cap) {
    size_t size = 64 + rand_r(&seed) % 449; /* 64..512 */
    blocks[n] = nic_malloc(size);
    if (!blocks[n] || !nic_is_dataplane(blocks[n])) {
      printf("alloc_failed_at=%zu\n", n);
      return 1;
    }
    memset(blocks[n], (int)(n & 0xff), size);
    used += size;
    n++;
  }
  printf("objects=%zu\n", n);
  print("full");
  if (!strcmp(mode, "fork-poke")) {
    fflush(stdout);
    const pid_t child = fork();
    if (child < 0) return 1;
    if (child > 0) {
      int status = 0;
      waitpid(child, &status, 0);
      return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    mode = "poke";
  }
  size_t keep_from = n - n / 10;
  if (!strcmp(mode, "random")) { /* shuffle, then free the first 90% of the shuffled order */
    for (size_t i = n - 1; i > 0; i--) {
      size_t j = rand_r(&seed) % (i + 1);
      unsigned char *t = blocks[i];
      blocks[i] = blocks[j];
      blocks[j] = t;
    }
  }
  for (size_t i = 0; i < keep_from; i++)
    free(blocks[i]);
  print("freed");
  /* Wait for the release: at most 5 s. */
  for (int tries = 0; tries < 100; tries++) {
    if (!strcmp(mode, "poke"))
      free(nic_malloc(100)); /* ordinary dataplane traffic */
    else
      nic_collect();
    sleep_ms(50);
  }
  print("after");
  if (!strcmp(mode, "stale")) { /* a double free the chunk state must catch: no key to read */
    struct nic_region_ref ref;
    for (size_t i = 0; i < keep_from; i++) {
      if (nic_translate(blocks[i], 1, &ref) != -NIC_ENOTDP) continue;
      free(blocks[i]);
      printf("stale_free_survived=1\n");
      break;
    }
    /* Free's fast path finds a chunk's state by its 32 MiB units (chunks.h): a block in a later
     * unit of a released chunk must be caught too. */
    const size_t chunk = (size_t)64 << 20, unit = (size_t)32 << 20;
    for (size_t i = 0; i < keep_from; i++) {
      if ((uintptr_t)blocks[i] % chunk < unit || nic_translate(blocks[i], 1, &ref) != -NIC_ENOTDP)
        continue;
      free(blocks[i]);
      printf("stale_later_unit_free_survived=1\n");
      break;
    }
  }
  /* What is left is intact, and released chunks are usable again. */
  size_t bad = 0;
  if (strcmp(mode, "random"))
    for (size_t i = keep_from; i < n; i++)
      if (blocks[i][0] != (unsigned char)(i & 0xff)) bad++;
  printf("corrupt=%zu\n", bad);
  for (size_t i = 0; i < keep_from; i++) {
    blocks[i] = nic_malloc(256);
    memset(blocks[i], 0x77, 256);
  }
  print("refill");
  for (size_t i = 0; i < n; i++)
    free(blocks[i]);
  free(blocks);
  return 0;
}
