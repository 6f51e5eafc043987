/* Locks taken by a reader that must not wait for ever: the statistics report at exit. exit() may
 * be called from a signal handler (not async-signal-safe, but programs do it) that interrupted the
 * same thread inside nicmalloc with one of these locks held, or while another thread holds one it
 * will not give up before this one lets go of another: a plain lock there hangs the process. A
 * thread between nic_bounded_begin and nic_bounded_end tries each lock for a few milliseconds (not
 * at all when it holds the lock itself), and on failure goes on without the figures it guards;
 * nic_bounded_missed then names the first lock it went without. Other threads, and the same
 * thread outside those calls, lock as they always did. */
#ifndef NIC_BOUNDED_LOCK_H
#define NIC_BOUNDED_LOCK_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>

extern __thread bool nic_bounded_on __attribute__((tls_model("initial-exec")));

void nic_bounded_begin(void);
/* The name given to the first lock not taken since nic_bounded_begin, or NULL when every lock
 * was taken. */
const char *nic_bounded_missed(void);
void nic_bounded_end(void);

bool nic_bounded_try(pthread_mutex_t *m, const char *name);
/* Locks m and returns true; between nic_bounded_begin and nic_bounded_end may instead give up,
 * note name and return false. */
static inline bool nic_bounded_lock(pthread_mutex_t *m, const char *name) {
  if (__builtin_expect(nic_bounded_on, 0)) return nic_bounded_try(m, name);
  pthread_mutex_lock(m);
  return true;
}

/* The same for a spin lock: a word set to 1 by its holder. */
bool nic_bounded_spin_try(int *word, const char *name);
static inline bool nic_bounded_spin(int *word, const char *name) {
  if (__builtin_expect(nic_bounded_on, 0)) return nic_bounded_spin_try(word, name);
  while (__atomic_exchange_n(word, 1, __ATOMIC_ACQUIRE))
    sched_yield();
  return true;
}

#endif
