/* Monotonic time for delays, pauses and timeouts. clock_gettime is async-signal-safe, so the
 * fence's fault handlers use these too. */
#ifndef NIC_CLOCK_H
#define NIC_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t nic_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t nic_now_ms(void) {
  return nic_now_ns() / 1000000u;
}

#endif
