/* The fork-lock registry: the order and the decisions are in forklock.h. */
#define _GNU_SOURCE /* PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP */
#include "forklock.h"
#include "nocancel.h"
#include "startup.h"

/* Made by the linker around the entries; weak so that a link without any entry still works,
 * hidden so that no other module's table of the same name can stand in for ours. */
extern const struct nic_forklock __start_nic_forklocks[]
    __attribute__((weak, visibility("hidden")));
extern const struct nic_forklock __stop_nic_forklocks[] __attribute__((weak, visibility("hidden")));

#define EACH_AT(rank_, e)                                                                          \
  for (const struct nic_forklock *e = __start_nic_forklocks; e < __stop_nic_forklocks; e++)        \
    if (e->rank == (rank_))

/* fork is no cancellation point, and the child inherits a cancel pending on the forking thread:
 * the hooks (which close descriptors, wait for the reaper) must not act on it, in either. */
static __thread int cancel_at_fork __attribute__((tls_model("initial-exec")));

void nic_forklock_prepare(void) {
  cancel_at_fork = nic_cancel_off();
  for (unsigned r = 0; r < NIC_FORK_RANKS; r++)
    EACH_AT(r, e) {
      if (e->mutex)
        pthread_mutex_lock(e->mutex);
      else if (e->acquire)
        e->acquire();
    }
}

void nic_forklock_parent(void) {
  for (unsigned r = NIC_FORK_RANKS; r-- > 0;)
    EACH_AT(r, e) {
      if (e->mutex)
        pthread_mutex_unlock(e->mutex);
      else if (e->release)
        e->release();
    }
  nic_cancel_restore(cancel_at_fork);
}

/* Locks are made anew rather than unlocked: in the child the forking thread has another
 * thread id, which a recursive mutex checks on unlock. All of them first: a hook may take any. */
void nic_forklock_child(void) {
  for (unsigned r = 0; r < NIC_FORK_RANKS; r++)
    EACH_AT(r, e) {
      if (e->mutex && e->recursive)
        *e->mutex = (pthread_mutex_t)PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
      else if (e->mutex)
        pthread_mutex_init(e->mutex, NULL);
      else if (e->reset)
        e->reset();
    }
  for (unsigned r = 0; r < NIC_FORK_RANKS; r++)
    EACH_AT(r, e) {
      if (e->child) e->child();
    }
  nic_cancel_restore(cancel_at_fork);
}

/* May allocate: the start-up flag sends that allocation past us. */
static void install_fork_handler(void) {
  pthread_atfork(nic_forklock_prepare, nic_forklock_parent, nic_forklock_child);
}
NIC_STARTUP_STEP(fork_handler, NIC_START_FORK, install_fork_handler);
