/* The starts of big blocks whose memory went back lately: mappings nicmalloc unmapped or moved
 * (mapped.h), huge control blocks given back to mimalloc, whose segment leaves with them. A second
 * free of one, or a use, finds no block and no key there, and was called a pointer nicmalloc never
 * handed out; the report asks here first. A fixed ring: the last NIC_RELEASED_KEPT only. */
#ifndef NIC_RELEASED_H
#define NIC_RELEASED_H

#include <stdbool.h>

#define NIC_RELEASED_KEPT 64

/* p, the start of a big block, is being given back. */
void nic_released_note(const void *p);
/* Whether p started one of the last NIC_RELEASED_KEPT big blocks given back. A block handed out
 * there since is live and never asked about. */
bool nic_released_lately(const void *p);

#endif
