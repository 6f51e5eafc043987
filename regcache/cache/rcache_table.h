/* From 4 KiB virtual pages to registration-cache region slots: an instance of the runtime's page
 * map (alloc/base/pagemap.h, three levels: 1 GiB, 2 MiB, 4 KiB), one per cache, so a lookup is
 * a few dependent loads and takes no lock. Tables are freed only with the whole table. Writers
 * serialise themselves (the registration cache's lock). */
#ifndef NIC_RCACHE_TABLE_H
#define NIC_RCACHE_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nic_rt;

/* An empty table; NULL when it could not be mapped. */
struct nic_rt *nic_rt_create(void);
/* Unmaps the table and all it mapped; nobody may be reading it. */
void nic_rt_destroy(struct nic_rt *t);

/* Slot for the page holding addr; 0 = none. */
uint32_t nic_rt_get(const struct nic_rt *t, uintptr_t addr);
/* Sets every page of [start, end) (page aligned) to slot. Returns false when a table could not
 * be mapped (then nothing was changed). */
bool nic_rt_set(struct nic_rt *t, uintptr_t start, uintptr_t end, uint32_t slot);
/* Clears the pages of [start, end) that still hold slot. */
void nic_rt_clear(struct nic_rt *t, uintptr_t start, uintptr_t end, uint32_t slot);
/* The first nonzero slot in [*addr, end), skipping absent tables; advances *addr to its page.
 * Returns 0 when there is none. */
uint32_t nic_rt_next(const struct nic_rt *t, uintptr_t *addr, uintptr_t end);

#endif
