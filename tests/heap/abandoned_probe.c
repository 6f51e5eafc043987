/* abandoned_probe: dataplane blocks of threads that have exited. mimalloc abandons an exited
 * thread's segments; they must neither keep their chunks pinned forever once every block is
 * freed ("freed-after-exit"), nor end up in an ordinary heap, from which plain malloc would hand
 * out chunk memory ("trim-after-exit": malloc_trim while such a segment still has live blocks).
 * Their live bytes read while nicmalloc visits them are exact ("reads-during-visits").
 * Control segments exited threads left with free pages, which a new thread's dataplane heap then
 * visits and cannot take: their free pages must stay where they are for the purge delay
 * ("visited": the next control heap to take such a segment reuses them without a fault), go back
 * to the OS after it ("visited-late"), and never be dropped once reused ("visited-reuse").
 * Prints key=value lines for test_abandoned. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { kThreads = 4, kBlocks = 20000 };

/* Allocates arg (a count) dataplane blocks and exits, leaving them to main. */
static void *producer(void *arg) {
  const int count = (int)(uintptr_t)arg;
  void **blocks = malloc((size_t)count * sizeof *blocks);
  for (int i = 0; blocks && i < count; i++)
    blocks[i] = nic_malloc(1000 + (size_t)(i % 5000));
  return blocks;
}

/* One producer of count blocks, run to its end: its blocks, or NULL. */
static void **produce(int count) {
  pthread_t thread;
  void *blocks = NULL;
  if (pthread_create(&thread, NULL, producer, (void *)(uintptr_t)count)) return NULL;
  pthread_join(thread, &blocks);
  return blocks;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static int freed_after_exit(void) {
  pthread_t threads[kThreads];
  void *blocks[kThreads];
  for (int i = 0; i < kThreads; i++)
    if (pthread_create(&threads[i], NULL, producer, (void *)(uintptr_t)kBlocks)) return 1;
  for (int i = 0; i < kThreads; i++)
    pthread_join(threads[i], &blocks[i]);
  for (int i = 0; i < kThreads; i++) {
    void **b = blocks[i];
    if (!b) return 1;
    for (int k = 0; k < kBlocks; k++)
      free(b[k]);
    free(b);
  }
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("before_live=%u\n", s.chunks_live);
  /* The reaper alone, then nic_collect: at most 5 s. */
  for (int tries = 0; tries < 100 && s.chunks_live > 0; tries++) {
    sleep_ms(50);
    if (tries >= 50) nic_collect();
    nic_get_stats(&s);
  }
  printf("after_live=%u\nafter_released=%llu\nafter_dataplane_live=%zu\n", s.chunks_live,
         (unsigned long long)s.chunks_released, s.dataplane_live);
  return 0;
}

static int trim_after_exit(void) {
  void **b = produce(kBlocks);
  if (!b) return 1;
  for (int k = 0; k < kBlocks; k += 2) /* every page keeps live blocks */
    free(b[k]);
  malloc_trim(0);
  int dataplane = 0;
  void **plain = malloc(kBlocks * sizeof *plain);
  for (int k = 0; k < kBlocks; k++) {
    plain[k] = malloc(1000 + (size_t)(k % 5000));
    dataplane += nic_is_dataplane(plain[k]);
  }
  printf("plain_from_dataplane=%d\n", dataplane);
  for (int k = 0; k < kBlocks; k++)
    free(plain[k]);
  for (int k = 1; k < kBlocks; k += 2)
    free(b[k]);
  free(plain);
  free(b);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("end_dataplane_live=%zu\n", s.dataplane_live);
  return 0;
}

enum { kRounds = 40, kRoundBlocks = 4000 };

static int trimming_stop;

/* malloc_trim without end: nicmalloc's visits of the abandoned segments, back to back. */
static void *trimmer(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&trimming_stop, __ATOMIC_ACQUIRE))
    malloc_trim(0);
  return NULL;
}

/* Rounds of: a thread leaves its blocks and exits, main frees them all, then reads the live
 * bytes, which must be none, while another thread visits the abandoned segments throughout. */
static int reads_during_visits(void) {
  pthread_t trim;
  if (pthread_create(&trim, NULL, trimmer, NULL)) return 1;
  int misread = 0;
  size_t worst = 0;
  for (int round = 0; round < kRounds; round++) {
    void **b = produce(kRoundBlocks);
    if (!b) return 1;
    for (int k = 0; k < kRoundBlocks; k++)
      free(b[k]);
    free(b);
    struct nic_stats s = NIC_STATS_INIT;
    nic_get_stats(&s);
    if (s.dataplane_live) misread++;
    if (s.dataplane_live > worst) worst = s.dataplane_live;
  }
  __atomic_store_n(&trimming_stop, 1, __ATOMIC_RELEASE);
  pthread_join(trim, NULL);
  printf("rounds=%d\nmisread_rounds=%d\nworst_live=%zu\n", kRounds, misread, worst);
  return 0;
}

enum { kLeavers = 4, kLeaverBlocks = 4096, kLeaverBlock = 1000 };

static pthread_barrier_t all_allocated;

/* Fills most of a fresh control segment, keeps its first block live (the segment stays
 * abandoned at exit) and frees the rest: mimalloc notes their pages for a delayed decommit.
 * Returns a block whose page was freed, the live block after it, and a live block of three
 * pages the program may drop pages of itself. */
static void *leaver(void *arg) {
  void **out = arg;
  void **b = malloc(kLeaverBlocks * sizeof *b);
  if (!b) return NULL;
  for (int i = 0; i < kLeaverBlocks; i++) {
    b[i] = malloc(kLeaverBlock);
    if (b[i]) memset(b[i], 0x5a, kLeaverBlock);
  }
  /* All at once: no leaver's heap may take another's abandoned segment. */
  pthread_barrier_wait(&all_allocated);
  for (int i = 1; i < kLeaverBlocks; i++)
    if (i != kLeaverBlocks / 2) free(b[i]);
  out[0] = b[kLeaverBlocks / 2];
  free(out[0]); /* only its address is looked at */
  out[1] = b[0];
  out[2] = malloc(3 * (size_t)sysconf(_SC_PAGESIZE));
  free(b);
  return NULL;
}

static int page_resident(const void *p) {
  const long page = sysconf(_SC_PAGESIZE);
  unsigned char v = 0;
  void *start = (void *)((uintptr_t)p & ~(uintptr_t)(page - 1));
  return mincore(start, (size_t)page, &v) == 0 && (v & 1);
}

static int resident(void *probes[][3]) {
  int n = 0;
  for (int i = 0; i < kLeavers; i++)
    n += page_resident(probes[i][0]);
  return n;
}

/* The thread's first dataplane allocation: its heap needs a segment and visits the abandoned. */
static void *dataplane_newcomer(void *arg) {
  (void)arg;
  void *p = nic_malloc(kLeaverBlock);
  int ok = p && nic_is_dataplane(p);
  free(p);
  return ok ? (void *)1 : NULL;
}

enum { kReuseBlocks = 60000 };
static unsigned char *reused[kReuseBlocks];

/* A control heap that takes the visited segments back: its blocks land on their free pages. */
static void *reuser(void *arg) {
  (void)arg;
  for (int i = 0; i < kReuseBlocks; i++) {
    reused[i] = malloc(kLeaverBlock);
    if (!reused[i]) return NULL;
    memset(reused[i], (unsigned char)(i | 1), kLeaverBlock);
  }
  return (void *)1;
}

static int visited(const char *mode) {
  /* The dataplane in use (its reaper started) before the segments are abandoned. */
  free(nic_malloc(64));
  pthread_t threads[kLeavers];
  void *probes[kLeavers][3];
  pthread_barrier_init(&all_allocated, NULL, kLeavers);
  for (int i = 0; i < kLeavers; i++)
    if (pthread_create(&threads[i], NULL, leaver, probes[i])) return 1;
  for (int i = 0; i < kLeavers; i++)
    pthread_join(threads[i], NULL);
  printf("before_resident=%d\n", resident(probes));
  pthread_t t;
  void *ok = NULL;
  if (pthread_create(&t, NULL, dataplane_newcomer, NULL)) return 1;
  pthread_join(t, &ok);
  printf("newcomer_dataplane=%d\n", ok != NULL);
  printf("after_visit_resident=%d\n", resident(probes));
  struct nic_stats s = NIC_STATS_INIT;
  if (!strcmp(mode, "visited-app-drop")) {
    /* The program drops a page of its own live block in an abandoned segment (to zero it, or
     * to give it back): the page reads as zeros at once, as the kernel promises. */
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    long kept = 0;
    for (int i = 0; i < kLeavers; i++) {
      if (!probes[i][2]) return 1;
      unsigned char *mine = (unsigned char *)(((uintptr_t)probes[i][2] + page - 1) & ~(page - 1));
      memset(mine, 0x77, page);
      if (madvise(mine, page, MADV_DONTNEED)) return 1;
      for (size_t k = 0; k < page; k++)
        kept += mine[k] != 0;
    }
    printf("app_drop_bytes_kept=%ld\n", kept);
  } else if (!strcmp(mode, "visited-late")) {
    /* The reaper drops every waiting range after the purge delay: at most 10 s. */
    nic_get_stats(&s);
    for (int tries = 0; tries < 1000 && s.control_decommits_late < s.control_decommits_waited;
         tries++) {
      sleep_ms(10);
      nic_get_stats(&s);
    }
    printf("late_resident=%d\n", resident(probes));
  } else if (!strcmp(mode, "visited-reuse")) {
    if (pthread_create(&t, NULL, reuser, NULL)) return 1;
    pthread_join(t, &ok);
    printf("reuser_ok=%d\n", ok != NULL);
    nic_get_stats(&s);
    printf("reused_before_collect=%llu\n", (unsigned long long)s.control_decommits_reused);
    nic_collect(); /* drops every range still waiting, now */
    long bad = 0;
    for (int i = 0; i < kReuseBlocks; i++)
      for (int k = 0; k < kLeaverBlock; k++)
        bad += reused[i][k] != (unsigned char)(i | 1);
    printf("reused_bytes_changed=%ld\n", bad);
    for (int i = 0; i < kReuseBlocks; i++)
      free(reused[i]);
  }
  nic_get_stats(&s);
  printf("waited=%llu\nreused=%llu\nlate=%llu\n", (unsigned long long)s.control_decommits_waited,
         (unsigned long long)s.control_decommits_reused,
         (unsigned long long)s.control_decommits_late);
  for (int i = 0; i < kLeavers; i++) {
    free(probes[i][1]);
    free(probes[i][2]);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "freed-after-exit")) return freed_after_exit();
  if (argc == 2 && !strcmp(argv[1], "trim-after-exit")) return trim_after_exit();
  if (argc == 2 && !strcmp(argv[1], "reads-during-visits")) return reads_during_visits();
  if (argc == 2 && !strncmp(argv[1], "visited", 7)) return visited(argv[1]);
  fprintf(stderr, "usage: abandoned_probe freed-after-exit|trim-after-exit|reads-during-visits|"
                  "visited|"
                  "visited-late|visited-reuse|visited-app-drop\n");
  return 2;
}
