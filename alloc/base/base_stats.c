/* The base layer's fields of struct nic_stats (collected by alloc/api/stats.c through this). */
#include "base_stats.h"

#include "api_errors.h"
#include "log.h"
#include "nicmalloc.h"

static uint64_t get(const uint64_t *counter) {
  return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

void nic_base_fill_stats(struct nic_stats *out) {
  out->sga_errors = get(&nic_api_errors.sga);
  out->registration_errors = get(&nic_api_errors.registration);
  out->hold_errors = get(&nic_api_errors.hold);
  out->endpoint_errors = get(&nic_api_errors.endpoint);
  out->other_api_errors = get(&nic_api_errors.other);
  out->log_lines_dropped = nic_log_dropped();
}
