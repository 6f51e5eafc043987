/* The lasting thread (lasting_thread.h): parked on a semaphore between calls, so it costs a
 * stack and nothing else. */
#define _GNU_SOURCE
#include "lasting_thread.h"

#include "thread.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

static struct {
  pid_t pid; /* the process the thread runs in; a child of fork has none (it does not survive) */
  sem_t go, done;
  void (*fn)(void *);
  void *arg;
} lasting;

static void wait_for(sem_t *s) {
  while (sem_wait(s) != 0 && errno == EINTR) {
  }
}

static void *lasting_main(void *unused) {
  (void)unused;
  for (;;) {
    wait_for(&lasting.go);
    lasting.fn(lasting.arg);
    sem_post(&lasting.done);
  }
  return NULL;
}

bool nic_run_on_lasting_thread(void (*fn)(void *), void *arg) {
  if (lasting.pid != getpid()) {
    if (sem_init(&lasting.go, 0, 0) || sem_init(&lasting.done, 0, 0)) return false;
    sigset_t mask;
    nic_signals_but_faults(&mask);
    pthread_t thread;
    if (nic_own_thread_create(&thread, "nicmalloc-open", lasting_main, NULL, &mask) != 0)
      return false;
    pthread_detach(thread);
    lasting.pid = getpid();
  }
  lasting.fn = fn;
  lasting.arg = arg;
  sem_post(&lasting.go);
  wait_for(&lasting.done);
  return true;
}
