/* The usable bytes of live control blocks, read when asked from the headers of mimalloc's pages
 * in the control arena (mallinfo): the control heap counts nothing on its fast paths. */
#ifndef NIC_CONTROL_LIVE_H
#define NIC_CONTROL_LIVE_H

#include <stdbool.h>
#include <stddef.h>

/* Sums, over the pages of every mimalloc segment in the control arena, the blocks in use times
 * the block size. A block another thread freed counts as live until its page's owner takes the
 * free back (at its next allocation there, as mimalloc's own counts do). False (and *live 0)
 * without a control arena, or where mimalloc's headers are not laid out as 2.0.9's. */
bool nic_control_live(size_t *live);

#endif
