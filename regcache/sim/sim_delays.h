/* The sim NIC's delay distribution, netem-style: a table of sampled delays drawn uniformly with a
 * seeded generator, so the empirical distribution of the table is the distribution of delays
 * and a seed replays the same sequence (in post order). */
#ifndef NIC_SIM_DELAYS_H
#define NIC_SIM_DELAYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct nic_sim_delays {
  const uint64_t *ns; /* the table, in nanoseconds; NULL = fixed delay */
  size_t n;           /* entries in the table (1 for a fixed delay) */
  uint64_t fixed_ns;  /* the delay when ns is NULL */
  uint64_t state;     /* generator state, from the seed */
  bool builtin;       /* the built-in table */
  bool owned;         /* ns was allocated by nic_sim_delays_load */
};

/* The built-in table: 64 samples, median 5 us, tail to 200 us (see sim_delays.c). */
void nic_sim_delays_builtin(struct nic_sim_delays *d, uint64_t seed);
/* Every draw returns ns: the deterministic mode. */
void nic_sim_delays_fixed(struct nic_sim_delays *d, uint64_t ns);
/* A file with one delay per line in microseconds (decimals allowed, 0 to 10 s); '#' starts a
 * comment; blank lines are skipped. Returns 0, or -errno (-EINVAL for bad content, with *line
 * set to the offending line number, else 0; -ESPIPE for anything but a regular file). On failure
 * *d is untouched. */
int nic_sim_delays_load(struct nic_sim_delays *d, const char *path, uint64_t seed, unsigned *line);
/* The next delay in nanoseconds. */
uint64_t nic_sim_delays_next(struct nic_sim_delays *d);
void nic_sim_delays_release(struct nic_sim_delays *d);

#ifdef __cplusplus
}
#endif
#endif
