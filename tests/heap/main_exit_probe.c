/* main_exit_probe: a program that used nicmalloc's API (an endpoint; a post and its poll) and whose
 * main thread calls pthread_exit must end when its last thread does, with exit(0), as glibc ends
 * it, though nicmalloc's threads (the backend's, the fence's, the reaper) live on. alarm() cannot
 * bound the wait: nicmalloc's threads, all that is left, block every signal. So the probe forks
 * the program and waits for it, and kills it at the deadline. Prints key=value lines. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE_S 30

static void done_fn(void *arg, int status) {
  (void)status;
  __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
}

static void say_exit(void) {
  printf("atexit_ran=1\n");
}

/* Whether the main thread has ended (a zombie until the whole process does). */
static int main_ended(void) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)getpid());
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  const ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
  if (fd >= 0) close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')');
  return paren && paren[1] == ' ' && paren[2] == 'Z';
}

/* After the main thread has left: dataplane blocks and control memory posted on a new sim
 * endpoint and registered, then mallinfo2, which must count the control memory still held. */
enum { LATE_BLOCKS = 8, LATE_BYTES = 4 << 20 };
static void work_after_main(void) {
  struct nic_endpoint *ep = nic_sim_endpoint_create(NULL, NULL, 0);
  int failed = ep == NULL, done = 0, posted = 0;
  char *held[LATE_BLOCKS];
  for (int i = 0; i < LATE_BLOCKS; i++) {
    char *dp = nic_malloc(1 << 20);
    held[i] = malloc(LATE_BYTES);
    memset(dp, 1, 4096);
    memset(held[i], 2, LATE_BYTES);
    struct nic_sga sga;
    int rc = ep ? nic_sga_init(&sga, 0) : -1;
    if (!rc) rc = nic_sga_add(&sga, dp, 4096);
    if (!rc) rc = nic_sga_add(&sga, held[i], 30000);
    if (!rc) rc = nic_sga_post(&sga, ep, done_fn, &done);
    for (int t = 0; !rc && t < DEADLINE_S * 1000 && !__atomic_load_n(&done, __ATOMIC_ACQUIRE); t++)
      nic_wait(1);
    struct nic_region_ref ref;
    const int reg = nic_register(held[i], 200000, 0, &ref);
    if (!reg) nic_unregister(&ref);
    failed += rc != 0 || reg != 0;
    posted += !rc && __atomic_exchange_n(&done, 0, __ATOMIC_ACQ_REL);
    free(dp);
  }
  const struct mallinfo2 mi = mallinfo2();
  printf("late_failed=%d\nlate_done=%d\nlate_arena_holds=%d\n", failed, posted,
         mi.arena >= (size_t)LATE_BLOCKS * LATE_BYTES);
  for (int i = 0; i < LATE_BLOCKS; i++)
    free(held[i]);
}

/* The program's last thread: it ends once the main thread has. */
static void *last_thread(void *arg) {
  for (int i = 0; i < DEADLINE_S * 1000 && !main_ended(); i++)
    usleep(1000);
  printf("main_ended=%d\n", main_ended());
  if (arg) work_after_main();
  return NULL;
}

/* post: a dataplane block posted on a sim endpoint and polled until done. Else only the endpoint,
 * which starts the sim's thread and no dataplane chunk. late: the last thread works on after. */
static void program(int post, int late) {
  atexit(say_exit);
  struct nic_endpoint *ep = nic_sim_endpoint_create(NULL, NULL, 0);
  printf("endpoint=%d\n", ep != NULL);
  if (ep && post) {
    int done = 0;
    char *block = nic_malloc(4096);
    memset(block, 1, 4096);
    struct nic_sga sga;
    int rc = nic_sga_init(&sga, 0);
    if (!rc) rc = nic_sga_add(&sga, block, 4096);
    if (!rc) rc = nic_sga_post(&sga, ep, done_fn, &done);
    for (int i = 0; !rc && i < DEADLINE_S * 1000 && !__atomic_load_n(&done, __ATOMIC_ACQUIRE); i++)
      nic_wait(1);
    printf("post_rc=%d\npost_done=%d\n", rc, __atomic_load_n(&done, __ATOMIC_ACQUIRE));
    free(block);
  }
  pthread_t t;
  pthread_create(&t, NULL, last_thread, late ? &t : NULL);
  pthread_exit(NULL);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  const char *cmd = argc > 1 ? argv[1] : "";
  if (strcmp(cmd, "post") && strcmp(cmd, "endpoint") && strcmp(cmd, "late")) {
    fprintf(stderr, "usage: %s post | endpoint | late\n", argv[0]);
    return 2;
  }
  const pid_t child = fork();
  if (child == 0) program(!strcmp(cmd, "post"), !strcmp(cmd, "late"));
  int st = 0;
  pid_t got = 0;
  const time_t end = time(NULL) + DEADLINE_S;
  while (child > 0 && (got = waitpid(child, &st, WNOHANG)) == 0 && time(NULL) < end)
    usleep(10000);
  if (child > 0 && got == 0) {
    kill(child, SIGKILL);
    waitpid(child, &st, 0);
  }
  printf("ended=%d\nexit_status=%d\n", got == child,
         got == child && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return 0;
}
