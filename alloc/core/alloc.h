/* The allocation core shared by the malloc family, operator new and the nic_* API. */
#ifndef NIC_ALLOC_H
#define NIC_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

/* Where a request goes. */
enum nic_route { NIC_ROUTE_AUTO, NIC_ROUTE_CONTROL, NIC_ROUTE_DATAPLANE };

/* Allocates from the heap the route names (AUTO: the thread's scope and NICMALLOC_DP_MIN_SIZE
 * decide). A dataplane request no chunk can hold follows NICMALLOC_ON_PIN_FAIL. alignment is 0
 * or a power of two. Returns NULL with errno = ENOMEM on failure. */
void *nic_alloc(size_t size, size_t alignment, bool zero, enum nic_route route);
/* nic_alloc for a call from the program whose return address (where the call returns to in the
 * program) is caller, or NULL when it is not known: the router below can then tell a call site
 * without walking the stack. */
void *nic_alloc_from(size_t size, size_t alignment, bool zero, enum nic_route route,
                     const void *caller);

/* nic_alloc without the router below. */
void *nic_alloc_core(size_t size, size_t alignment, bool zero, enum nic_route route);
/* A layer above that decides routes for unmodified programs (routing/profile.c) takes over
 * nic_alloc while it sets this: it routes, then allocates with nic_alloc_core. */
typedef void *(*nic_alloc_router_fn)(size_t size, size_t alignment, bool zero, enum nic_route route,
                                     const void *caller);
extern nic_alloc_router_fn nic_alloc_router __attribute__((visibility("hidden")));

/* Frees after checking p is a live block of ours; otherwise prints one line naming the caller
 * and returns without touching memory. */
void nic_free_named(void *p, const char *caller);

/* realloc: the new block stays in p's heap unless the route asks for dataplane. */
void *nic_realloc_routed(void *p, size_t size, enum nic_route route, const char *caller);

/* Usable size of a live block, 0 (with the error printed) for a pointer that is not one. */
size_t nic_usable_size(const void *p, const char *caller);

/* The core's fields of struct nic_stats: dataplane requests not served, bad frees (collected by
 * alloc/api/stats.c through this). */
struct nic_stats;
void nic_core_fill_stats(struct nic_stats *out);

#endif
