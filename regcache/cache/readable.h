/* Whether a range can be read without a fault, for the scatter-gather copies and the
 * registration cache. mincore alone is not enough: it reports a page of a PROT_NONE mapping as
 * mapped, and such pages are all around nicmalloc's heaps (the reserved dataplane range outside
 * mapped chunks, the control arena beyond what mimalloc committed). */
#ifndef NIC_READABLE_H
#define NIC_READABLE_H

#include <stdbool.h>
#include <stddef.h>

/* len > 0 and p + len does not overflow (the callers check). */
bool nic_range_readable(const void *p, size_t len);

#endif
