/* NIC translation-cache pressure: what the NIC must hold for the addresses actually posted.
 * Every posted entry goes through one process-wide translation-cache model (regcache/
 * tcache_model.h, sized by the NICMALLOC_SIM_TCACHE* settings, whatever the backend); its
 * sliding window gives the working set of regions and pages, and pressure is that working set
 * as a percentage of the cache's capacity. Above 100%, the NIC is missing translations on the
 * hot path, so nic_sga_add copies small entries that would need a new registration instead,
 * until the working set is back under 90%. */
#ifndef NIC_PRESSURE_H
#define NIC_PRESSURE_H

#include "nicmalloc.h"

#include <stdbool.h>
#include <stdint.h>

/* Records the entries of one post, copies included (as lookups of their bounce slab's). */
void nic_pressure_note(const struct nic_sga_entry *entries, unsigned n);
/* True from when the working set exceeds the cache until it is under 90% of it: one relaxed
 * load. */
bool nic_pressure_high(void);
/* Counts a small entry copied because of pressure. */
void nic_pressure_count_copy(void);
void nic_pressure_fill_stats(struct nic_stats *out);
/* Writes the three regions with the most entries posted ("chunk 0 step 3: 812 entries, cache
 * region near 0x7f...: 40 entries") to buf. */
void nic_pressure_describe(char *buf, size_t cap);

#endif
