/* The start-up steps' runner: the order is in startup.h. */
#include "startup.h"

#include <sched.h>

NIC_REGISTRY_DECLARE(struct nic_startup_step, nic_startup_steps);

enum { START_NOT_STARTED, START_RUNNING, START_DONE };
static int start_state;
static __thread bool starting __attribute__((tls_model("initial-exec")));

static void run_steps(void) {
  for (unsigned rank = 0; rank < NIC_START_RANKS; rank++)
    NIC_REGISTRY_EACH(struct nic_startup_step, nic_startup_steps, s) {
      if (s->rank == rank) s->run();
    }
}

void nic_startup_slow(void) {
  int expected = START_NOT_STARTED;
  if (__atomic_compare_exchange_n(&start_state, &expected, START_RUNNING, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    starting = true;
    run_steps();
    starting = false;
    __atomic_store_n(&start_state, START_DONE, __ATOMIC_RELEASE);
    return;
  }
  if (starting) return; /* re-entered from a step on this thread */
  while (__atomic_load_n(&start_state, __ATOMIC_ACQUIRE) != START_DONE)
    sched_yield();
}

bool nic_started(void) {
  return __atomic_load_n(&start_state, __ATOMIC_ACQUIRE) == START_DONE;
}
