/* nic_fence_write (every mode but off): a write to memory the NIC may still be reading waits
 * for the DMA. The waiter polls the backend itself, so it makes progress even when no other
 * thread runs completions, and gives up after NICMALLOC_FENCE_TIMEOUT_MS rather than hang. Page
 * granularity: a write next to an in-flight entry, on the same 4 KiB page, waits too.
 * Also here: the hooks through which nic_sga_post reaches protect and detect, and their
 * settings. */
#define _GNU_SOURCE
#include "fence.h"
#include "api_errors.h"
#include "backend.h"
#include "clock.h"
#include "config.h"
#include "export.h"
#include "log.h"
#include "nicmalloc.h"
#include "nocancel.h"
#include "pagecount.h"
#include "safety.h"
#include "settings.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* The caller writes [start, end) next: not only the DMA must be done, the pages must be writable
 * again, or the write is held (a completion drops its references before it releases the pages;
 * fence.h). */
static bool in_flight(uintptr_t start, uintptr_t end) {
  return nic_pc_any(start, end, NIC_PC_DMA_MASK) || nic_fence_any_protected(start, end);
}

int nic_fence_wait(uintptr_t start, uintptr_t end, const char *who, const char *then) {
  if ((!__atomic_load_n(&nic_safety_refs, __ATOMIC_ACQUIRE) ||
       !nic_pc_any(start, end, NIC_PC_DMA_MASK)) &&
      !nic_fence_any_protected(start, end))
    return 0;
  NIC_SAFETY_COUNT(fence_waits, 1);
  const unsigned timeout = nic_safety_config()->fence_timeout_ms;
  const uint64_t deadline = nic_now_ms() + timeout;
  for (unsigned round = 0;; round++) {
    nic_backends_poll(NIC_POLL_COMPLETIONS_ONLY); /* runs completions, ours among them */
    if (!in_flight(start, end)) return 0;
    if (nic_now_ms() >= deadline) break;
    if (round < 64)
      sched_yield();
    else /* 20 us: a DMA takes microseconds, not less; and realloc is no cancellation point */
      nic_pause_nocancel(20000);
  }
  NIC_SAFETY_COUNT(fence_timeouts, 1);
  /* The caller has -ETIMEDOUT, and a program that retries would fill stderr with the same line:
   * said once per caller kind, and counted every time (fence_timeouts). */
  static const char site;
  if (nic_first_time_key((uintptr_t)&site, (uintptr_t)who, 0))
    nic_log_error("%s(%#lx, %lu bytes): the NIC still reads this memory after %u ms "
                  "(NICMALLOC_FENCE_TIMEOUT_MS); %s (said once; fence_timeouts counts them all)",
                  who, (unsigned long)start, (unsigned long)(end - start), timeout, then);
  return -ETIMEDOUT;
}

NIC_EXPORT int nic_fence_write(const void *p, size_t len) {
  if (!nic_pc_user_range(p, len)) {
    nic_api_error(other,
                  "nic_fence_write(%p, %zu): empty or overflowing range (past the user space)", p,
                  len);
    return -NIC_ERANGE;
  }
  if (nic_safety_config()->fence == NIC_FENCE_OFF) return 0;
  const int rc = nic_fence_wait((uintptr_t)p, (uintptr_t)p + len, "nic_fence_write",
                                "giving up with ETIMEDOUT");
  if (rc) nic_api_count(other);
  return rc;
}

void nic_fence_posted(const void *msg, const struct nic_sga_entry *e, uint32_t n) {
  enum nic_fence_mode mode = nic_safety_config()->fence;
  if (mode == NIC_FENCE_PROTECT)
    nic_fence_protect(e, n);
  else if (mode == NIC_FENCE_DETECT)
    nic_fence_detect_posted(msg, e, n);
}

/* Whatever was done at post is undone even if the mode changed since (tests and benchmarks
 * switch it at run time); in off and wait modes these are two loads. */
void nic_fence_completing(const void *msg, int status) {
  if (nic_fence_detect_started()) nic_fence_detect_completing(msg, status);
}

void nic_fence_completed(const struct nic_sga_entry *e, uint32_t n) {
  if (nic_fence_protect_started()) nic_fence_unprotect(e, n);
}

void nic_fence_load_settings(struct nic_safety_config *c) {
  /* In the order of NICMALLOC_FENCE_PROTECT's words: auto|uffd|mprotect. */
  static const enum nic_fence_protect_with with[] = {NIC_PROTECT_AUTO, NIC_PROTECT_UFFD,
                                                     NIC_PROTECT_MPROTECT};
  c->protect_with = with[nic_setting_choice(NIC_S_FENCE_PROTECT)];
  /* A mean in bytes (0: every block), or the word off. */
  c->detect_sites = nic_setting_choice(NIC_S_FENCE_DETECT_SAMPLE) < 0;
  c->detect_mean = (size_t)nic_setting_number(NIC_S_FENCE_DETECT_SAMPLE);
}
