/* Bounded lock waits for the statistics report at exit (bounded_lock.h). */
#define _GNU_SOURCE
#include "bounded_lock.h"

#include "clock.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

/* Long enough for a lock another thread holds for a usual critical section (a step's populate
 * may take longer: its figures are then missing), short enough that a report with every lock
 * held adds a fraction of a second to the exit. */
#define WAIT_NS (5 * 1000 * 1000)

__thread bool nic_bounded_on __attribute__((tls_model("initial-exec")));
static __thread const char *missed __attribute__((tls_model("initial-exec")));

void nic_bounded_begin(void) {
  missed = NULL;
  nic_bounded_on = true;
}

const char *nic_bounded_missed(void) {
  return missed;
}

void nic_bounded_end(void) {
  nic_bounded_on = false;
}

static bool give_up(const char *name) {
  if (!missed) missed = name;
  return false;
}

static void pause_briefly(void) {
  const struct timespec ts = {0, 100 * 1000};
  nanosleep(&ts, NULL); /* async-signal-safe, as the rest of the wait */
}

/* glibc keeps the holder's thread id in a normal mutex: one this thread holds is not waited for,
 * as it cannot be let go while this thread waits. */
static bool held_by_me(pthread_mutex_t *m) {
#ifdef __GLIBC__
  return __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED) == gettid();
#else
  (void)m;
  return false;
#endif
}

bool nic_bounded_try(pthread_mutex_t *m, const char *name) {
  const uint64_t until = nic_now_ns() + WAIT_NS;
  /* First: a recursive mutex (the registration caches') this thread holds would be taken again,
   * and what it guards read halfway through a change. */
  if (held_by_me(m)) return give_up(name);
  for (;;) {
    if (!pthread_mutex_trylock(m)) return true;
    if (nic_now_ns() >= until) return give_up(name);
    pause_briefly();
  }
}

bool nic_bounded_spin_try(int *word, const char *name) {
  const uint64_t until = nic_now_ns() + WAIT_NS;
  while (__atomic_exchange_n(word, 1, __ATOMIC_ACQUIRE)) {
    if (nic_now_ns() >= until) return give_up(name);
    pause_briefly();
  }
  return true;
}
