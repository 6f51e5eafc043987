/* thread_edges_probe: threads that meet the allocator at awkward moments (cancelled inside it,
 * forking while the reaper releases chunks, outliving a main thread that called pthread_exit, in
 * the way of a namespace change, first allocating in glibc's last round of key destructors).
 * Each
 * scenario prints key=value lines; alarm() turns a deadlock into SIGALRM. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static void *noop(void *arg) {
  pthread_testcancel();
  return arg;
}

/* Fills blocks dataplane blocks of one MiB: more than a 32 MiB chunk holds, so new chunks are
 * mapped on the way, then frees them. */
static size_t dp_churn(void **blocks, size_t n) {
  size_t got = 0;
  for (size_t i = 0; i < n; i++)
    if ((blocks[i] = nic_malloc(MIB)) != NULL) got++;
  for (size_t i = 0; i < n; i++)
    free(blocks[i]);
  return got;
}

/* With a cancel already pending, the first cancellation point the thread reaches acts on it:
 * none may be inside the allocator, where the thread would die holding a lock. */
static void *cancelled_allocator(void *arg) {
  pthread_cancel(pthread_self());
  void *blocks[48];
  *(size_t *)arg = dp_churn(blocks, 48);
  pthread_testcancel();
  return NULL;
}

static int cancel_pending(void) {
  /* The first pthread_cancel loads libgcc_s (and allocates): done here, before the one that
   * matters, so the victim's own allocations are what meets the pending cancel. */
  pthread_t t;
  pthread_create(&t, NULL, noop, NULL);
  pthread_cancel(t);
  pthread_join(t, NULL);
  size_t victim_got = 0;
  void *r;
  pthread_create(&t, NULL, cancelled_allocator, &victim_got);
  pthread_join(t, &r);
  printf("victim_cancelled=%d\nvictim_blocks=%zu\n", r == PTHREAD_CANCELED, victim_got);
  fflush(stdout);
  void *blocks[96];
  printf("main_blocks=%zu\n", dp_churn(blocks, 96));
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("chunks_created=%llu\n", (unsigned long long)s.chunks_created);
  return 0;
}

static volatile int churn_stop;

static void *churn(void *arg) {
  void *blocks[40];
  while (!churn_stop)
    dp_churn(blocks, 40);
  return arg;
}

/* Two threads map chunks and empty them, so the reaper keeps waiting for busy threads while it
 * releases them; the main thread forks meanwhile, and fork's prepare handler takes every lock. */
static int fork_while_reaping(int forks) {
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, churn, NULL);
  int bad = 0;
  for (int k = 0; k < forks; k++) {
    /* The alarm bounds each fork, not the run: a deadlock hangs one fork for good, while 200
     * forks beside two churning threads took 29 s of main's 30 on a loaded machine. */
    alarm(30);
    pid_t c = fork();
    if (c == 0) _exit(0);
    int st;
    if (c < 0 || waitpid(c, &st, 0) != c || st != 0) bad++;
  }
  churn_stop = 1;
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("forks=%d\nbad_children=%d\nchunks_released=%llu\n", forks, bad,
         (unsigned long long)s.chunks_released);
  return 0;
}

static void *last_worker(void *arg) {
  void *blocks[40];
  printf("worker_blocks=%zu\n", dp_churn(blocks, 40)); /* starts the reaper */
  fflush(stdout);
  return arg;
}

/* The process must end with its last thread, as glibc ends it, though the reaper lives on. */
static int main_pthread_exit(void) {
  /* alarm() cannot end it: the reaper, all that would be left, blocks every signal. A watchdog
   * process kills it instead, and leaves as soon as the probe is gone. */
  pid_t probe = getpid();
  if (fork() == 0) {
    for (int fd = 0; fd < 1024; fd++)
      close(fd);
    for (int i = 0; i < 3000 && getppid() == probe; i++)
      usleep(10000);
    if (getppid() == probe) kill(probe, SIGKILL);
    _exit(0);
  }
  pthread_t t;
  pthread_create(&t, NULL, last_worker, NULL);
  pthread_exit(NULL);
}

/* glibc runs key destructors in at most PTHREAD_DESTRUCTOR_ITERATIONS rounds; this key's
 * destructor sets it again until the last one, and only then allocates: the thread's first
 * allocation, so its set-up, comes in that round. */
static pthread_key_t late_key;
static int late_rounds;

static void late_destructor(void *value) {
  const long round = (long)value;
  if (round < PTHREAD_DESTRUCTOR_ITERATIONS) {
    pthread_setspecific(late_key, (void *)(round + 1));
    return;
  }
  __atomic_store_n(&late_rounds, (int)round, __ATOMIC_RELAXED);
  void *volatile block = malloc(100);
  free(block);
}

static void *late_thread(void *arg) {
  pthread_setspecific(late_key, (void *)1L);
  return arg;
}

/* A thread whose set-up comes in the last round, on a stack the program maps and unmaps after the
 * join (its static TLS, nicmalloc's per-thread state, lies there) or on one glibc keeps for the
 * next thread, which then starts with zeroed TLS at the same place; malloc_trim asks every thread
 * on nicmalloc's list afterwards. The key is made after nicmalloc set the main thread up, as a
 * program's keys are. */
static int last_round_setup(bool own_stack, int threads) {
  void *volatile first = malloc(100);
  free(first);
  pthread_key_create(&late_key, late_destructor);
  const size_t stack_size = (size_t)1 << 20;
  int joined = 0;
  for (int i = 0; i < threads; i++) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    void *stack = NULL;
    if (own_stack) {
      stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (stack == MAP_FAILED) return 1;
      pthread_attr_setstack(&attr, stack, stack_size);
    }
    pthread_t t;
    if (pthread_create(&t, &attr, late_thread, NULL)) return 1;
    pthread_join(t, NULL);
    pthread_attr_destroy(&attr);
    if (stack) munmap(stack, stack_size);
    joined++;
    malloc_trim(0);
  }
  printf("last_round=%d\njoined=%d\n", __atomic_load_n(&late_rounds, __ATOMIC_RELAXED), joined);
  /* A thread of the usual kind after them: its set-up walks into whatever they left. */
  pthread_t t;
  pthread_create(&t, NULL, last_worker, NULL);
  pthread_join(t, NULL);
  malloc_trim(0);
  printf("survived=1\n");
  return 0;
}

static long threads_now(void) {
  char buf[4096];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
  if (fd >= 0) close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char *t = strstr(buf, "\nThreads:");
  return t ? strtol(t + 9, NULL, 10) : -1;
}

/* Joins the process's own mount namespace, then makes a user namespace: both need the process
 * to be one thread. Returns 0, or the errno of the first refusal (as the exit status). */
static int change_namespaces(int *setns_err, int *unshare_err) {
  int fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  *setns_err = fd < 0 ? errno : setns(fd, CLONE_NEWNS) ? errno : 0;
  if (fd >= 0) close(fd);
  *unshare_err = unshare(CLONE_NEWUSER) ? errno : 0;
  return *setns_err ? *setns_err : *unshare_err;
}

/* A single-threaded program that changes namespaces after nicmalloc's reaper started (at its
 * first dataplane block). A forked child tries first, before any dataplane block of its own and
 * with no reaper: what the machine allows. */
static int namespaces(void) {
  pid_t child = fork();
  if (child == 0) {
    int s, u;
    _exit(change_namespaces(&s, &u));
  }
  int status = 0;
  waitpid(child, &status, 0);
  printf("baseline=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 255);
  void *block = nic_malloc(4096);
  printf("dataplane_before=%d\nthreads_before=%ld\n", nic_is_dataplane(block), threads_now());
  free(block);
  int setns_err, unshare_err;
  change_namespaces(&setns_err, &unshare_err);
  printf("setns=%d\nunshare=%d\nthreads_after=%ld\n", setns_err, unshare_err, threads_now());
  block = nic_malloc(4096);
  printf("dataplane_after=%d\n", nic_is_dataplane(block));
  free(block);
  return 0;
}

int main(int argc, char **argv) {
  alarm(30);
  if (argc >= 2 && !strcmp(argv[1], "cancel-pending")) return cancel_pending();
  if (argc >= 3 && !strcmp(argv[1], "fork-while-reaping")) return fork_while_reaping(atoi(argv[2]));
  if (argc >= 2 && !strcmp(argv[1], "main-pthread-exit")) return main_pthread_exit();
  if (argc >= 2 && !strcmp(argv[1], "namespaces")) return namespaces();
  if (argc >= 3 && !strcmp(argv[1], "last-round-setup"))
    return last_round_setup(!strcmp(argv[2], "own-stack"), argc >= 4 ? atoi(argv[3]) : 1);
  fprintf(stderr, "usage: thread_edges_probe cancel-pending | fork-while-reaping FORKS | "
                  "main-pthread-exit | namespaces | last-round-setup own-stack|cached-stack "
                  "[THREADS]\n");
  return 2;
}
