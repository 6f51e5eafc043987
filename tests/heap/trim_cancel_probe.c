/* trim_cancel_probe: malloc_trim and nic_poll with a cancel pending, beside a thread that handed
 * out its event set (nic_thread_event_fd), so that every ask writes to that thread's eventfd.
 * Neither call is a cancellation point: the cancel must act at the victim's next one. Each step
 * prints a key=value line as it ends, so that a hang shows where; alarm() ends a deadlock with
 * SIGALRM. A fresh process per scenario. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "warm_up_cancel.h"

#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEADLOCK_S 30

/* A thread with dataplane heaps and its event set handed out. Told to go, it either polls with a
 * cancel pending and ends, or waits to be told to end. */
struct holder {
  pthread_barrier_t ready, go, done;
  int cancel_at_poll;
  int fd, past_poll;
};

static void *holder_main(void *arg) {
  struct holder *h = arg;
  void *block = nic_malloc(4096);
  h->fd = nic_thread_event_fd();
  pthread_barrier_wait(&h->ready);
  pthread_barrier_wait(&h->go); /* an ask was made meanwhile */
  if (h->cancel_at_poll) {
    pthread_cancel(pthread_self());
    nic_poll(0); /* reads its eventfd, and writes it again while a pass is left */
    h->past_poll = 1;
    pthread_testcancel();
    return NULL;
  }
  pthread_barrier_wait(&h->done);
  free(block);
  return NULL;
}

struct trimmer {
  int past, trimmed;
};

static void *trimmer_main(void *arg) {
  struct trimmer *v = arg;
  pthread_cancel(pthread_self());
  v->trimmed = malloc_trim(0);
  v->past = 1;
  pthread_testcancel();
  return NULL;
}

static void *short_lived(void *arg) {
  free(malloc(100));
  return arg;
}

/* What the victim may have left locked: thread start and exit, fork. */
static void after_victim(struct holder *h, pthread_t holder) {
  pthread_t t;
  const int created = pthread_create(&t, NULL, short_lived, NULL) == 0;
  if (created) pthread_join(t, NULL);
  printf("new_thread=%d\n", created);
  const pid_t child = fork();
  if (child == 0) _exit(42);
  int st = 0;
  printf("fork_child=%d\n",
         child > 0 && waitpid(child, &st, 0) == child && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  pthread_barrier_wait(&h->done);
  pthread_join(holder, NULL);
  printf("holder_joined=1\n");
}

static pthread_t start_holder(struct holder *h, int cancel_at_poll) {
  memset(h, 0, sizeof *h);
  h->cancel_at_poll = cancel_at_poll;
  pthread_barrier_init(&h->ready, NULL, 2);
  pthread_barrier_init(&h->go, NULL, 2);
  pthread_barrier_init(&h->done, NULL, 2);
  pthread_t t;
  pthread_create(&t, NULL, holder_main, h);
  pthread_barrier_wait(&h->ready);
  printf("holder_fd=%d\n", h->fd >= 0);
  return t;
}

/* trim: the victim trims with a cancel pending; the ask writes to the holder's eventfd under the
 * thread list's lock, which every thread exit and fork takes. */
static int cmd_trim(void) {
  struct holder h;
  const pthread_t holder = start_holder(&h, 0);
  struct trimmer v = {0, -1};
  pthread_t t;
  void *r = NULL;
  pthread_create(&t, NULL, trimmer_main, &v);
  pthread_join(t, &r);
  printf("victim_cancelled=%d\nvictim_past=%d\nvictim_trimmed=%d\n", r == PTHREAD_CANCELED, v.past,
         v.trimmed >= 0);
  pthread_barrier_wait(&h.go);
  after_victim(&h, holder);
  return 0;
}

/* poll: malloc_trim asks the holder, whose nic_poll then answers with a cancel pending: it reads
 * the eventfd, and writes it again while a pass is left. */
static int cmd_poll(void) {
  struct holder h;
  const pthread_t holder = start_holder(&h, 1);
  malloc_trim(0);
  pthread_barrier_wait(&h.go);
  void *r = NULL;
  pthread_join(holder, &r);
  printf("holder_cancelled=%d\nholder_past_poll=%d\n", r == PTHREAD_CANCELED, h.past_poll);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  alarm(DEADLOCK_S);
  nic_warm_up_cancel();
  if (!nic_sim_endpoint_create(NULL, NULL, 0)) {
    printf("endpoint=none\n");
    return 0;
  }
  const char *cmd = argc > 1 ? argv[1] : "";
  if (!strcmp(cmd, "trim")) return cmd_trim();
  if (!strcmp(cmd, "poll")) return cmd_poll();
  fprintf(stderr, "usage: %s trim | poll\n", argv[0]);
  return 2;
}
