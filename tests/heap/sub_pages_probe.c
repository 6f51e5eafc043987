/* sub_pages_probe: 256-byte dataplane blocks, each written with its own pattern, of which all but
 * every 64th are freed: every mimalloc page keeps live blocks (so mimalloc frees no span and
 * decommits nothing), while three 4 KiB pages of four hold free blocks only. Then nic_collect.
 * Prints pinned bytes and resident anonymous memory before and after, how many 4 KiB pages
 * under freed blocks left memory, and whether every live block still reads its pattern.
 *
 * Modes: "shrink" then allocates as many blocks again, writes and checks them, frees
 * everything and allocates once more (the pages mimalloc builds anew give every block back);
 * "double" frees twice a block whose pages went back and one that only overlaps such a page
 * (its first bytes, and its key, still in memory), with "registered" after their steps were
 * registered; "held" registers the step after the drop
 * (run with a backend that holds page references), then frees half the live blocks and
 * collects again; "beside" then frees every other live block and collects again; "abandon" does the
 * allocations and the shrink on a thread that then exits, and the main thread goes on with its
 * segments. "others" fills and frees on another thread, which allocates once more only after the
 * main thread collected; "again" has it free more behind its first answer's pass and the main
 * thread trim again; "asked" has a thread trim after another thread's trim asked it to. "control"
 * as a further word: the same with control blocks (malloc) and malloc_trim; "trim": dataplane
 * blocks and malloc_trim; "polls": in "others", the other thread calls nic_poll instead of
 * allocating. "waits": the other thread blocks in nic_wait while the main thread trims;
 * "epolls" (with "edge": edge-triggered) in epoll_wait on nic_thread_event_fd. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "proc_kb.h"

#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { BLOCKS = 32768 };
/* "medium" as a second word: 20000-byte blocks (20 KiB in mimalloc: its 512 KiB pages of eight
 * slices), one in eight kept, 1600 of them. */
static int SIZE = 256, KEEP_EVERY = 64, COUNT = BLOCKS;
static int CONTROL;
static char *b[BLOCKS];

static void *block(size_t size) {
  return CONTROL ? malloc(size) : nic_malloc(size);
}
static int TRIM;  /* "trim": malloc_trim for dataplane blocks too */
static int POLLS; /* "polls": the other thread only polls after the trim, allocating nothing */
static void collect(void) {
  if (CONTROL || TRIM)
    malloc_trim(0);
  else
    nic_collect();
}

static void print(const char *tag) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("%s_pinned=%zu\n%s_live=%zu\n%s_rss_anon_kb=%ld\n%s_double_frees=%llu\n"
         "%s_control_resident=%zu\n",
         tag, s.dataplane_pinned, tag, s.dataplane_live, tag,
         nic_proc_kb("/proc/self/status", "RssAnon:"), tag, (unsigned long long)s.double_frees, tag,
         s.control_resident);
}

static int resident(const void *p) {
  unsigned char v = 0;
  void *page = (void *)((uintptr_t)p & ~(uintptr_t)4095);
  return mincore(page, 4096, &v) == 0 && (v & 1);
}

static char pattern(int i) {
  return (char)(i * 7 + 1);
}
static int kept(int i) {
  return i % KEEP_EVERY == 0;
}

/* Every byte of every live block. */
static int live_intact(void) {
  int ok = 1;
  for (int i = 0; i < COUNT; i += KEEP_EVERY)
    for (int k = 0; k < SIZE; k++)
      ok &= b[i][k] == pattern(i);
  return ok;
}

/* 4 KiB pages under freed blocks no longer in memory. */
static long gone_pages(void) {
  long n = 0;
  uintptr_t last = 0;
  for (int i = 0; i < COUNT; i++) {
    const uintptr_t page = (uintptr_t)b[i] & ~(uintptr_t)4095;
    if (kept(i) || page == last) continue;
    last = page;
    n += !resident(b[i]);
  }
  return n;
}

static void fill_and_free(void) {
  for (int i = 0; i < COUNT; i++) {
    b[i] = block(SIZE);
    if (!b[i]) exit(1);
    memset(b[i], pattern(i), SIZE);
  }
  print("full");
  for (int i = 0; i < COUNT; i++)
    if (!kept(i)) free(b[i]);
}

static void fill_and_shrink(void) {
  fill_and_free();
  collect();
  print("freed");
  printf("gone_pages=%ld\nintact=%d\n", gone_pages(), live_intact());
}

/* n blocks allocated and written: how many lie between the first and last block of the fill,
 * and whether they and the live ones read back. */
static void again(const char *tag, char **fresh, int n, uintptr_t lo, uintptr_t hi) {
  int inside = 0, ok = 1;
  for (int i = 0; i < n; i++) {
    fresh[i] = block(SIZE);
    if (!fresh[i]) exit(1);
    memset(fresh[i], 'z', SIZE);
    inside += (uintptr_t)fresh[i] >= lo && (uintptr_t)fresh[i] <= hi;
  }
  for (int i = 0; i < n; i++)
    for (int k = 0; k < SIZE; k++)
      ok &= fresh[i][k] == 'z';
  printf("%s_inside=%d\n%s_written=%d\n", tag, inside, tag, ok);
  print(tag);
}

static void range(uintptr_t *lo, uintptr_t *hi) {
  *lo = UINTPTR_MAX, *hi = 0;
  for (int i = 0; i < COUNT; i++) {
    if ((uintptr_t)b[i] < *lo) *lo = (uintptr_t)b[i];
    if ((uintptr_t)b[i] > *hi) *hi = (uintptr_t)b[i];
  }
}

static char *fresh[BLOCKS];

static int shrink_mode(void) {
  uintptr_t lo, hi;
  range(&lo, &hi);
  const int freed = COUNT - COUNT / KEEP_EVERY;
  again("again", fresh, freed, lo, hi);
  printf("again_intact=%d\n", live_intact());
  for (int i = 0; i < freed; i++)
    free(fresh[i]);
  for (int i = 0; i < COUNT; i += KEEP_EVERY)
    free(b[i]);
  collect();
  print("empty");
  /* Every page emptied: mimalloc builds them anew and every block of the fill is there again. */
  again("rebuilt", fresh, COUNT, lo, hi);
  for (int i = 0; i < COUNT; i++)
    free(fresh[i]);
  print("end");
  return 0;
}

/* "registered" as a further word: the steps of the victims are registered with the backend
 * before the double frees, which faults them in whole (their pages given back read zeros
 * again, keys and all) while the blocks there stay held back. */
static int REGISTERED;
static void register_victims_steps(int whole, int part) {
  const int victims[] = {whole, part};
  int failed = 0;
  for (int v = 0; v < 2; v++) {
    if (victims[v] < 0) continue;
    struct nic_region_ref ref;
    /* The live block before the victim: its step is the victim's but for a step boundary. */
    if (nic_register(b[victims[v] - victims[v] % KEEP_EVERY], 16, NIC_REG_LOCAL, &ref))
      failed++;
    else
      nic_unregister(&ref);
  }
  printf("register_failed=%d\n", failed);
  printf("registered_whole_resident=%d\n", whole >= 0 && resident(b[whole]));
}

/* A freed block whose first page went back (the last such), and a freed block in memory at its
 * start whose last bytes lie on a page that went back. */
static int double_mode(void) {
  int whole = -1, part = -1;
  for (int i = 0; i < COUNT; i++) {
    if (kept(i)) continue;
    /* The last one: with blocks of several slices' pages, one past the page's first slice. Under
     * "registered" the first: its mimalloc page keeps live blocks (the last one's may have
     * emptied and been freed, and its blocks be handed out anew). */
    if (!resident(b[i]) && (whole < 0 || !REGISTERED)) whole = i;
    if (part < 0 && resident(b[i]) && !resident(b[i] + SIZE - 1)) part = i;
  }
  printf("whole=%d\npart=%d\n", whole, part);
  if (REGISTERED) register_victims_steps(whole, part);
  print("before");
  if (whole >= 0) free(b[whole]);
  if (part >= 0) free(b[part]);
  if (whole >= 0)
    printf("realloc_null=%d\nusable=%zu\n", realloc(b[whole], 100) == NULL,
           malloc_usable_size(b[whole]));
  print("after");
  /* While the live blocks keep their pages, a block freed twice is never handed out again (a
   * double free that reached mimalloc would put it back on a list). */
  int reissued = 0;
  for (int i = 0; i < COUNT; i++) {
    fresh[i] = block(SIZE);
    reissued += (whole >= 0 && fresh[i] == b[whole]) || (part >= 0 && fresh[i] == b[part]);
  }
  printf("reissued=%d\n", reissued);
  for (int i = 0; i < COUNT; i++)
    free(fresh[i]);
  for (int i = 0; i < COUNT; i += KEEP_EVERY)
    free(b[i]);
  print("end");
  return 0;
}

static int held_mode(void) {
  struct nic_region_ref ref;
  printf("register_rc=%d\n", nic_register(b[0], 4096, NIC_REG_LOCAL, &ref));
  printf("after_register_gone_pages=%ld\n", gone_pages());
  print("registered");
  printf("registered_intact=%d\n", live_intact());
  /* Half the live blocks freed under the registration: their pages stay. */
  for (int i = KEEP_EVERY; i < COUNT; i += 2 * KEEP_EVERY)
    free(b[i]);
  nic_collect();
  long gone = 0;
  for (int i = 0; i < COUNT; i++)
    gone += !resident(b[i]);
  printf("held_gone_blocks=%ld\n", gone);
  print("held");
  return 0;
}

static void *shrink_thread(void *arg) {
  (void)arg;
  fill_and_shrink();
  return NULL;
}

static int abandon_mode(void) {
  uintptr_t lo, hi;
  range(&lo, &hi);
  /* The exited thread's segments are taken by this thread's allocations of the same size. */
  const int freed = COUNT - COUNT / KEEP_EVERY;
  again("adopted", fresh, freed, lo, hi);
  printf("adopted_intact=%d\n", live_intact());
  int whole = -1;
  for (int i = 0; i < COUNT && whole < 0; i++)
    if (!kept(i) && !resident(b[i])) whole = i;
  printf("whole=%d\n", whole);
  print("before");
  if (whole >= 0) free(b[whole]);
  print("after");
  for (int i = 0; i < freed; i++)
    free(fresh[i]);
  for (int i = 0; i < COUNT; i += KEEP_EVERY)
    free(b[i]);
  print("end");
  return 0;
}

/* Every other live block, freed after the first pass gave back the pages around it. */
static int freed_later(int i) {
  return kept(i) && (i / KEEP_EVERY) % 2;
}

/* "beside": after the collect, every other live block is freed and the heap collected again:
 * the pages under those blocks go, though the blocks beside them were held back with the pages
 * the first collect gave back. */
static int beside_mode(void) {
  long freed = 0, gone = 0;
  for (int i = 0; i < COUNT; i++)
    if (freed_later(i)) free(b[i]), freed++;
  collect();
  int ok = 1;
  for (int i = 0; i < COUNT; i++) {
    if (freed_later(i)) gone += !resident(b[i]);
    for (int k = 0; kept(i) && !freed_later(i) && k < SIZE; k++)
      ok &= b[i][k] == pattern(i);
  }
  print("beside");
  printf("freed_beside=%ld\nfreed_beside_gone=%ld\nbeside_intact=%d\n", freed, gone, ok);
  return 0;
}

/* "others": the blocks are another thread's, which waits while the main thread trims, then
 * allocates off mimalloc's fast path (a block above its small sizes: each one runs the hook that
 * answers) until a first answer gave pages back (with dataplane blocks the reaper asks, after
 * the purge delay), then until its answers are done; with "polls" it calls nic_poll instead. */
enum { ANSWERS_MAX = 256 };
static pthread_barrier_t step;
/* Starts the other thread and waits for its first step (its fill, or its first block). */
static int start_other(pthread_t *t, void *(*fn)(void *)) {
  pthread_barrier_init(&step, NULL, 2);
  if (pthread_create(t, NULL, fn, NULL)) return 1;
  pthread_barrier_wait(&step);
  return 0;
}

static void answer_point(void) {
  if (POLLS)
    nic_poll(0);
  else
    free(block(3000));
}
static void *other_thread(void *arg) {
  (void)arg;
  fill_and_free();
  pthread_barrier_wait(&step); /* filled */
  pthread_barrier_wait(&step); /* trimmed */
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  long first = 0;
  for (long waited_ms = 0; !first && waited_ms < 20000; usleep(1000)) { /* a bound only */
    answer_point();
    first = gone_pages();
    clock_gettime(CLOCK_MONOTONIC, &now);
    waited_ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
  }
  printf("first_answer_gone_pages=%ld\n", first);
  for (int i = 1; i < ANSWERS_MAX; i++)
    answer_point();
  pthread_barrier_wait(&step); /* answered */
  pthread_barrier_wait(&step); /* looked at */
  return NULL;
}

static int others_mode(void) {
  pthread_t t;
  if (start_other(&t, other_thread)) return 1;
  collect();
  print("trimmed");
  printf("trimmed_gone_pages=%ld\n", gone_pages());
  pthread_barrier_wait(&step);
  pthread_barrier_wait(&step);
  print("answered");
  printf("answered_gone_pages=%ld\nintact=%d\n", gone_pages(), live_intact());
  pthread_barrier_wait(&step);
  return pthread_join(t, NULL) != 0;
}

/* The main thread trims, then watches the pages go until they stopped going for 200 ms (or 20 s
 * passed), and says how many went and whether the live blocks kept their bytes. */
static void trim_and_watch_the_answers(void) {
  collect();
  print("trimmed");
  long gone = 0;
  for (int still = 0, waited_ms = 0; still < 20 && waited_ms < 20000; waited_ms += 10) {
    usleep(10000);
    const long now = gone_pages();
    still = now == gone && now ? still + 1 : 0;
    gone = now;
  }
  print("answered");
  printf("answered_gone_pages=%ld\nintact=%d\n", gone, live_intact());
}

/* "waits": as "others", but the other thread is blocked in nic_wait(-1) from before the trim
 * until the main thread, once the pages stopped going (or 20 s passed), posts a message to a
 * sim endpoint for it to complete; it says how often nic_wait returned before that. */
static int wake_sent, waits_returned_early;
static void wake_done(void *arg, int status) {
  (void)arg, (void)status;
}
static void *waiting_thread(void *arg) {
  (void)arg;
  fill_and_free();
  pthread_barrier_wait(&step); /* filled */
  while (!__atomic_load_n(&wake_sent, __ATOMIC_ACQUIRE))
    if (nic_wait(-1) != 0 && !__atomic_load_n(&wake_sent, __ATOMIC_ACQUIRE)) waits_returned_early++;
  return NULL;
}

static int waits_mode(void) {
  struct nic_endpoint *ep = nic_sim_endpoint_create(NULL, NULL, 0);
  struct nic_sga sga;
  static char message[64];
  if (!ep || nic_sga_init(&sga, 0)) return 1;
  pthread_t t;
  if (start_other(&t, waiting_thread)) return 1;
  usleep(20000); /* blocked by now, as a rule: the ask finds it either way */
  trim_and_watch_the_answers();
  __atomic_store_n(&wake_sent, 1, __ATOMIC_RELEASE);
  if (nic_sga_add(&sga, message, sizeof message) || nic_sga_post(&sga, ep, wake_done, NULL))
    return 1;
  if (pthread_join(t, NULL)) return 1;
  printf("waits_returned_early=%d\n", waits_returned_early);
  return 0;
}

/* "epolls": as "waits", but the other thread is blocked in epoll_wait(-1) on a set of its own
 * holding nic_thread_event_fd (edge-triggered with "edge") and a stop eventfd, and calls
 * nic_poll(0) whenever the former polls readable. Once the pages stopped going the main thread
 * counts the thread's wake-ups over 200 ms and whether the descriptor polls readable: an idle
 * thread must neither sleep through the ask nor spin after its answer. */
static int EDGE;
static int thread_fd = -1, stop_fd = -1, same_fd;
static long wakeups;
static void *epolling_thread(void *arg) {
  (void)arg;
  fill_and_free();
  thread_fd = nic_thread_event_fd();
  same_fd = thread_fd >= 0 && nic_thread_event_fd() == thread_fd;
  const int set = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN | (EDGE ? EPOLLET : 0), .data.u32 = 1};
  struct epoll_event stop = {.events = EPOLLIN, .data.u32 = 2};
  const int ok = thread_fd >= 0 && set >= 0 && !epoll_ctl(set, EPOLL_CTL_ADD, thread_fd, &ev) &&
                 !epoll_ctl(set, EPOLL_CTL_ADD, stop_fd, &stop);
  pthread_barrier_wait(&step); /* filled */
  for (int stopped = !ok; !stopped;) {
    struct epoll_event got[2];
    const int n = epoll_wait(set, got, 2, -1);
    for (int i = 0; i < n; i++) {
      if (got[i].data.u32 == 2) stopped = 1;
      if (got[i].data.u32 != 1) continue;
      __atomic_add_fetch(&wakeups, 1, __ATOMIC_RELAXED);
      while (nic_poll(0) > 0) { /* edge-triggered: until nothing ran */
      }
    }
  }
  if (set >= 0) close(set);
  return NULL;
}

static int epolls_mode(void) {
  /* No backend is open: the thread's descriptor answers its asks without one. */
  stop_fd = eventfd(0, EFD_CLOEXEC);
  pthread_t t;
  if (stop_fd < 0 || start_other(&t, epolling_thread)) return 1;
  usleep(20000); /* blocked by now, as a rule: the ask finds it either way */
  const long before = __atomic_load_n(&wakeups, __ATOMIC_RELAXED);
  trim_and_watch_the_answers();
  const long answered = __atomic_load_n(&wakeups, __ATOMIC_RELAXED);
  usleep(200000);
  struct pollfd readable = {.fd = thread_fd, .events = POLLIN};
  printf("thread_fd=%d\nsame_fd=%d\nwakeups_before=%ld\nwakeups_answering=%ld\n"
         "wakeups_idle=%ld\nready_idle=%d\n",
         thread_fd, same_fd, before, answered - before,
         __atomic_load_n(&wakeups, __ATOMIC_RELAXED) - answered,
         thread_fd >= 0 ? poll(&readable, 1, 0) : -1);
  static const uint64_t one = 1;
  if (write(stop_fd, &one, sizeof one) != sizeof one) return 1;
  return pthread_join(t, NULL) != 0;
}

/* "again": as "others" with control blocks, but once the other thread's first answer is made it
 * frees half of its live blocks in the first eighth of the fill (pages that answer's pass has
 * gone past) and the main thread trims again: those pages must go too, by a pass from the start
 * after the one under way. */
enum { AGAIN_SPAN = BLOCKS / 8 };
static int freed_again(int i) {
  return i < AGAIN_SPAN && freed_later(i);
}
static void *again_thread(void *arg) {
  (void)arg;
  fill_and_free();
  pthread_barrier_wait(&step); /* filled */
  pthread_barrier_wait(&step); /* trimmed */
  free(block(3000));
  for (int i = 0; i < AGAIN_SPAN; i++)
    if (freed_again(i)) free(b[i]);
  pthread_barrier_wait(&step); /* answered once, freed more */
  pthread_barrier_wait(&step); /* trimmed again */
  for (int i = 0; i < ANSWERS_MAX; i++)
    free(block(3000));
  pthread_barrier_wait(&step); /* answered */
  return NULL;
}

static int again_mode(void) {
  pthread_t t;
  if (start_other(&t, again_thread)) return 1;
  collect();
  pthread_barrier_wait(&step);
  pthread_barrier_wait(&step);
  long freed = 0, before = 0;
  for (int i = 0; i < AGAIN_SPAN; i++)
    if (freed_again(i)) freed++, before += !resident(b[i]);
  collect();
  pthread_barrier_wait(&step);
  pthread_barrier_wait(&step);
  long after = 0;
  for (int i = 0; i < AGAIN_SPAN; i++)
    after += freed_again(i) && !resident(b[i]);
  printf("freed_again=%ld\nfreed_again_gone_before=%ld\nfreed_again_gone=%ld\n", freed, before,
         after);
  return pthread_join(t, NULL) != 0;
}

/* "asked": another thread trims, which asks this one for its control pages; this one then trims
 * too, and its own collect meets the question first. A deadlock becomes SIGALRM. */
static void *asked_thread(void *arg) {
  (void)arg;
  free(block(16));             /* a thread nicmalloc knows */
  pthread_barrier_wait(&step); /* known */
  pthread_barrier_wait(&step); /* asked */
  printf("asked_trim=%d\n", malloc_trim(0) >= 0);
  return NULL;
}

static int asked_mode(void) {
  pthread_t t;
  if (start_other(&t, asked_thread)) return 1;
  malloc_trim(0);
  alarm(20);
  pthread_barrier_wait(&step);
  return pthread_join(t, NULL) != 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "shrink";
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "medium")) SIZE = 20000, KEEP_EVERY = 8, COUNT = 1600;
    if (!strcmp(argv[i], "control")) CONTROL = 1;
    if (!strcmp(argv[i], "trim")) TRIM = 1;
    if (!strcmp(argv[i], "polls")) POLLS = 1;
    if (!strcmp(argv[i], "edge")) EDGE = 1;
    if (!strcmp(argv[i], "registered")) REGISTERED = 1;
  }
  if (!strcmp(mode, "others")) return others_mode();
  if (!strcmp(mode, "waits")) return waits_mode();
  if (!strcmp(mode, "epolls")) return epolls_mode();
  if (!strcmp(mode, "asked")) return asked_mode();
  if (!strcmp(mode, "again")) return again_mode();
  if (!strcmp(mode, "abandon")) {
    pthread_t t;
    if (pthread_create(&t, NULL, shrink_thread, NULL) || pthread_join(t, NULL)) return 1;
    return abandon_mode();
  }
  fill_and_shrink();
  if (!strcmp(mode, "double")) return double_mode();
  if (!strcmp(mode, "held")) return held_mode();
  if (!strcmp(mode, "beside")) return beside_mode();
  return shrink_mode();
}
