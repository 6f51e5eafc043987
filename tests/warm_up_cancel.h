/* A probe's first pthread_cancel loads libgcc_s (and allocates): made on a thread of its own
 * before the cancel that matters, so that the victim's own calls are what meets that one. */
#ifndef NIC_TESTS_WARM_UP_CANCEL_H
#define NIC_TESTS_WARM_UP_CANCEL_H

#include <pthread.h>

static void *nic_warm_up_cancel_noop(void *arg) {
  pthread_testcancel();
  return arg;
}

static inline void nic_warm_up_cancel(void) {
  pthread_t t;
  pthread_create(&t, NULL, nic_warm_up_cancel_noop, NULL);
  pthread_cancel(t);
  pthread_join(t, NULL);
}

#endif
