/* Errors the public API returns to its caller. The caller has the return value, and a program
 * that retries (or ignores it) in a loop must not fill stderr: each kind is said once (one call
 * site, one kind), and every call is counted for nic_get_stats. */
#ifndef NIC_API_ERRORS_H
#define NIC_API_ERRORS_H

#include "log.h"

#include <stdint.h>

struct nic_api_error_counts {
  uint64_t sga;          /* nic_sga_init, nic_sga_add, nic_sga_post */
  uint64_t registration; /* nic_register, nic_unregister, nic_translate */
  uint64_t hold;         /* nic_hold, nic_release */
  uint64_t endpoint;     /* endpoint constructors and destroys, nic_verbs_get_pd */
  uint64_t other;        /* nic_fence_write, nic_get_stats, nic_posix_memalign_site */
};
extern struct nic_api_error_counts nic_api_errors;

#define nic_api_count(family) __atomic_add_fetch(&nic_api_errors.family, 1, __ATOMIC_RELAXED)
#define nic_api_error(family, ...)                                                                 \
  do {                                                                                             \
    nic_api_count(family);                                                                         \
    nic_log_error_once(__VA_ARGS__);                                                               \
  } while (0)
/* The same where the kind depends on a and b (the entry point's name, the errno). */
#define nic_api_error_by(family, a, b, ...)                                                        \
  do {                                                                                             \
    static const char nic_site_;                                                                   \
    nic_api_count(family);                                                                         \
    if (nic_first_time_key((uintptr_t)&nic_site_, (uintptr_t)(a), (uintptr_t)(b)))                 \
      nic_log_error(__VA_ARGS__);                                                                  \
  } while (0)

#endif
