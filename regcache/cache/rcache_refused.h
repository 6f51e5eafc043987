/* Ranges a backend refused to register though the process can read them (-EFAULT: io_uring pins
 * every fixed buffer for writing, so read-only memory and shared mappings of disk files are
 * refused; verbs refuses write access to read-only memory). The answer holds as long as the
 * mapping does, and finding it again costs a read of /proc/self/maps and a system call per
 * request: the registration cache remembers it, and answers -EFAULT at once to a request inside
 * a refused range, for that cache and no more access than was refused. The caller copies such
 * memory instead (safety/sga.c).
 *
 * A refusal comes from the flags of the mapping (the kernel pins page by page, but refuses by
 * its mapping's flags), so a request inside one mapping is remembered for the whole mapping.
 * What changes a mapping forgets every remembered range it touches: an unmap, a mapping over it,
 * mremap, madvise dropping its pages, mprotect (nic_rcache_refused_forget, lock-free, from the
 * cache's watcher). A change that slips between a refusal and its being remembered is missed:
 * the memory is then copied until the next change there, which is slower, never wrong. */
#ifndef NIC_RCACHE_REFUSED_H
#define NIC_RCACHE_REFUSED_H

#include <stdbool.h>
#include <stdint.h>

/* Under the registration cache's lock. owner: the cache the backend refused for. */
void nic_rcache_refused_note_locked(const void *owner, uintptr_t start, uintptr_t end,
                                    unsigned access);
bool nic_rcache_refused_covers_locked(const void *owner, uintptr_t start, uintptr_t end,
                                      unsigned access);
/* Every range of owner forgotten (its cache destroyed); owner NULL: every range (a fork child,
 * whose backends are not the parent's). */
void nic_rcache_refused_drop_locked(const void *owner);

/* Lock-free, from any thread and under any lock: forgets the ranges [start, end) touches. One
 * load when nothing is remembered. */
void nic_rcache_refused_forget(uintptr_t start, uintptr_t end);

#endif
