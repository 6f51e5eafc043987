/* The reaper: a background thread that gives empty dataplane chunks back to the OS after
 * NICMALLOC_RELEASE_DELAY_MS, and cached huge control blocks (huge_cache.h) after
 * NICMALLOC_PURGE_DELAY_MS. Started on first need; again in a fork child. */
#ifndef NIC_REAPER_H
#define NIC_REAPER_H

#include <stdbool.h>

/* Idempotent and cheap after the first call. */
void nic_reaper_start(void);
/* One pass, exposed for nic_collect and the tests. */
void nic_reaper_pass(void);
/* Stops the reaper thread and waits for it to end: for the calls that need the process to be
 * one thread (alone_calls.c). True when it was running; nic_reaper_start starts it again. */
bool nic_reaper_stop(void);

#endif
