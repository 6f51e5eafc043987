/* The reaper: a background thread that gives empty dataplane chunks back to the OS after
 * NICMALLOC_RELEASE_DELAY_MS, and cached huge control blocks (huge_cache.h) after
 * NICMALLOC_PURGE_DELAY_MS. Started on first need; again in a fork child. */
#ifndef NIC_REAPER_H
#define NIC_REAPER_H

/* Idempotent and cheap after the first call. */
void nic_reaper_start(void);
/* One pass, exposed for nic_collect and the tests. */
void nic_reaper_pass(void);

#endif
