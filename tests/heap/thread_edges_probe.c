/* thread_edges_probe: threads that meet the allocator at awkward moments (cancelled inside it,
 * forking while the reaper releases chunks, outliving a main thread that called pthread_exit). Each
 * scenario prints key=value lines; alarm() turns a deadlock into SIGALRM. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char **argv) {
  alarm(30);
  if (argc >= 2 && !strcmp(argv[1], "cancel-pending")) return cancel_pending();
  if (argc >= 3 && !strcmp(argv[1], "fork-while-reaping")) return fork_while_reaping(atoi(argv[2]));
  if (argc >= 2 && !strcmp(argv[1], "main-pthread-exit")) return main_pthread_exit();
  fprintf(stderr, "usage: thread_edges_probe cancel-pending | fork-while-reaping FORKS | "
                  "main-pthread-exit\n");
  return 2;
}
