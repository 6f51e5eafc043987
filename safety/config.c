/* Safety settings, read once on first use (settings.h parses each on its first read), and the
 * shared counters. */
#include "config.h"
#include "fence.h"
#include "log.h"
#include "safety.h"
#include "settings.h"

#include <pthread.h>

struct nic_safety_counters nic_safety_ctr;

/* Defaults are the table's (settings_table.h); NICMALLOC_COPY_THRESHOLD's 512 is the seed
 * paper's crossover. */
static struct nic_safety_config cfg;
static pthread_once_t once = PTHREAD_ONCE_INIT;

enum nic_fence_mode nic_safety_fence_setting(void) {
  /* In the order of NICMALLOC_FENCE's words: off|wait|protect|detect. */
  static const enum nic_fence_mode modes[] = {NIC_FENCE_OFF, NIC_FENCE_WAIT, NIC_FENCE_PROTECT,
                                              NIC_FENCE_DETECT};
  return modes[nic_setting_choice(NIC_S_FENCE)];
}

static void load(void) {
  cfg.copy_threshold = (size_t)nic_setting_number(NIC_S_COPY_THRESHOLD);
  cfg.fence = nic_safety_fence_setting();
  nic_fence_load_settings(&cfg); /* NICMALLOC_FENCE_PROTECT, NICMALLOC_FENCE_DETECT_SAMPLE */
  cfg.fence_timeout_ms = (unsigned)nic_setting_number(NIC_S_FENCE_TIMEOUT_MS);
  /* move|wait */
  cfg.realloc_inflight =
      nic_setting_choice(NIC_S_REALLOC_INFLIGHT) == 1 ? NIC_REALLOC_WAIT : NIC_REALLOC_MOVE;
}

const struct nic_safety_config *nic_safety_config(void) {
  pthread_once(&once, load);
  return &cfg;
}

void nic_safety_config_set(const struct nic_safety_config *c) {
  pthread_once(&once, load);
  cfg = *c;
}
