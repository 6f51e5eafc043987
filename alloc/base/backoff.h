/* Asking again after a refusal that may pass (the kernel short of memory or descriptors for now):
 * not before a second, then two, four... up to a minute while it goes on refusing, and at once
 * again after a success. The caller's lock guards the state. */
#ifndef NIC_BACKOFF_H
#define NIC_BACKOFF_H

#include "clock.h"

#include <stdbool.h>
#include <stdint.h>

struct nic_backoff {
  uint64_t retry_at_ms; /* 0: ask now */
  uint64_t delay_ms;
};

#define NIC_BACKOFF_FIRST_MS 1000u
#define NIC_BACKOFF_MAX_MS 60000u

/* Refused again: the next try waits twice as long as the last (the first waits a second). */
static inline void nic_backoff_refused(struct nic_backoff *b) {
  b->delay_ms = !b->delay_ms                           ? NIC_BACKOFF_FIRST_MS
                : b->delay_ms * 2 > NIC_BACKOFF_MAX_MS ? NIC_BACKOFF_MAX_MS
                                                       : b->delay_ms * 2;
  b->retry_at_ms = nic_now_ms() + b->delay_ms;
}

/* Whether the last refusal is too recent to ask again. */
static inline bool nic_backoff_waiting(const struct nic_backoff *b) {
  return b->retry_at_ms && nic_now_ms() < b->retry_at_ms;
}

static inline void nic_backoff_succeeded(struct nic_backoff *b) {
  *b = (struct nic_backoff){0, 0};
}

#endif
