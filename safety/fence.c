/* NICMALLOC_FENCE=wait: a write to memory the NIC may still be reading waits for the DMA.
 * The waiter polls the backend itself, so it makes progress even when no other thread runs
 * completions, and gives up after NICMALLOC_FENCE_TIMEOUT_MS rather than hang. Page
 * granularity: a write next to an in-flight entry, on the same 4 KiB page, waits too. */
#define _GNU_SOURCE
#include "backend.h"
#include "log.h"
#include "nicmalloc.h"
#include "pagecount.h"
#include "safety.h"

#include <errno.h>
#include <sched.h>
#include <time.h>

#define NIC_EXPORT __attribute__((visibility("default")))

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int nic_fence_wait(uintptr_t start, uintptr_t end, const char *who) {
  if (!__atomic_load_n(&nic_safety_refs, __ATOMIC_ACQUIRE) ||
      !nic_pc_any(start, end, NIC_PC_DMA_MASK))
    return 0;
  NIC_SAFETY_COUNT(fence_waits, 1);
  const unsigned timeout = nic_safety_config()->fence_timeout_ms;
  const uint64_t deadline = now_ms() + timeout;
  struct nic_backend *b = nic_backend_if_open();
  for (unsigned round = 0;; round++) {
    if (b) b->poll(b, 0); /* runs completions, ours among them */
    if (!nic_pc_any(start, end, NIC_PC_DMA_MASK)) return 0;
    if (now_ms() >= deadline) break;
    if (round < 64) {
      sched_yield();
    } else {
      struct timespec pause = {0, 20000}; /* 20 us: a DMA takes microseconds, not less */
      nanosleep(&pause, NULL);
    }
  }
  NIC_SAFETY_COUNT(fence_timeouts, 1);
  nic_log_error("%s(%#lx, %lu bytes): the NIC still reads this memory after %u ms "
                "(NICMALLOC_FENCE_TIMEOUT_MS); giving up with ETIMEDOUT",
                who, (unsigned long)start, (unsigned long)(end - start), timeout);
  return -ETIMEDOUT;
}

NIC_EXPORT int nic_fence_write(const void *p, size_t len) {
  uintptr_t start = (uintptr_t)p, last;
  if (len == 0 || __builtin_add_overflow(start, len - 1, &last) || last == UINTPTR_MAX) {
    nic_log_error("nic_fence_write(%p, %zu): empty or overflowing range", p, len);
    return -NIC_ERANGE;
  }
  if (nic_safety_config()->fence == NIC_FENCE_OFF) return 0;
  return nic_fence_wait(start, last + 1, "nic_fence_write");
}
