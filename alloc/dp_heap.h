/* Dataplane allocation: each thread has one mimalloc heap per chunk arena. */
#ifndef NIC_DP_HEAP_H
#define NIC_DP_HEAP_H

#include <stdbool.h>
#include <stddef.h>

/* Returns NULL (errno untouched) when no chunk can hold the request: cap reached, mapping or
 * pinning refused, or the request larger than a chunk. The caller applies the policy. */
void *nic_dp_alloc(size_t size, size_t alignment, bool zero);
/* Largest request a chunk can hold. */
size_t nic_dp_max_request(void);

#endif
