/* Safety settings, read once on first use (not at start-up: a program that never posts never
 * reads them), and the shared counters. */
#include "config.h"
#include "fence.h"
#include "log.h"
#include "safety.h"
#include "settings.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct nic_safety_counters nic_safety_ctr;

static struct nic_safety_config cfg = {.copy_threshold = 512, /* the seed paper's crossover */
                                       .fence = NIC_FENCE_WAIT,
                                       .fence_timeout_ms = 5000,
                                       .detect_sites = true,
                                       .realloc_inflight = NIC_REALLOC_MOVE};
static pthread_once_t once = PTHREAD_ONCE_INIT;

enum nic_fence_mode nic_safety_parse_fence(const char *t) {
  if (!strcmp(t, "off")) return NIC_FENCE_OFF;
  if (!strcmp(t, "wait")) return NIC_FENCE_WAIT;
  if (!strcmp(t, "protect")) return NIC_FENCE_PROTECT;
  if (!strcmp(t, "detect")) return NIC_FENCE_DETECT;
  nic_log_warn("NICMALLOC_FENCE=%s is not valid (expected off, wait, protect or detect); using "
               "wait",
               t);
  return NIC_FENCE_WAIT;
}

static void load(void) {
  const char *t;
  size_t v;
  if ((t = nic_getenv("NICMALLOC_COPY_THRESHOLD"))) {
    if (nic_parse_size(t, &v) && v <= ((size_t)1 << 20))
      cfg.copy_threshold = v;
    else
      nic_log_warn("NICMALLOC_COPY_THRESHOLD=%s is not valid (expected 0 to 1M); using 512", t);
  }
  if ((t = nic_getenv("NICMALLOC_FENCE"))) cfg.fence = nic_safety_parse_fence(t);
  nic_fence_load_settings(&cfg); /* NICMALLOC_FENCE_PROTECT, NICMALLOC_FENCE_DETECT_SAMPLE */
  if ((t = nic_getenv("NICMALLOC_FENCE_TIMEOUT_MS"))) {
    if (nic_parse_count(t, &v) && v >= 1 && v <= 3600000)
      cfg.fence_timeout_ms = (unsigned)v;
    else
      nic_log_warn("NICMALLOC_FENCE_TIMEOUT_MS=%s is not valid (expected 1 to 3600000); using "
                   "5000",
                   t);
  }
  if ((t = nic_getenv("NICMALLOC_REALLOC_INFLIGHT"))) {
    if (!strcmp(t, "move") || !strcmp(t, "wait"))
      cfg.realloc_inflight = t[0] == 'w' ? NIC_REALLOC_WAIT : NIC_REALLOC_MOVE;
    else
      nic_log_warn("NICMALLOC_REALLOC_INFLIGHT=%s is not valid (expected move or wait); using "
                   "move",
                   t);
  }
}

const struct nic_safety_config *nic_safety_config(void) {
  pthread_once(&once, load);
  return &cfg;
}

void nic_safety_config_set(const struct nic_safety_config *c) {
  pthread_once(&once, load);
  cfg = *c;
}
