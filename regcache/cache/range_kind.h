/* What backs a range, for the registration cache's misses: whether a registration of it may be
 * kept after its request, because its pages can only be replaced by calls the cache hears of
 * (events.h), and whether the process may write it.
 *
 * Kept: private anonymous memory (the heap, anonymous mappings, the calling thread's stack while
 * its exit hook is sure to say the stack leaves: thread.h). Not kept, registered for each
 * request instead:
 * - shared or file-backed memory: a hole punched in the file, a truncate, another process's
 *   write to it, each replaces or changes its pages with no call of this process's to see;
 * - another thread's stack, known by its thread block (thread.h): glibc unmaps and maps stacks
 *   by calls nobody sees once the thread is gone, and only the thread's own exit hook could
 *   tell;
 * - anything when /proc/self/maps cannot be read.
 * Not told apart: memory that a raw system call (syscall(SYS_munmap)), io_uring's
 * IORING_OP_MADVISE or process_madvise (another process's through a pidfd, or the process's
 * own) drops, and the stack of a thread nicmalloc never set up (it neither allocated nor called
 * the API). */
#ifndef NIC_RANGE_KIND_H
#define NIC_RANGE_KIND_H

#include <stdint.h>

#define NIC_RANGE_CACHEABLE 1u
#define NIC_RANGE_WRITABLE 2u

/* What nic_range_kind needs that may allocate (the calling thread's stack bounds, its set-up):
 * call it where the program could call malloc, under no lock of nicmalloc's. */
void nic_range_kind_prepare(uintptr_t start, uintptr_t end);
/* NIC_RANGE_* of [start, end), page-aligned and readable. Never allocates; reads
 * /proc/self/maps unless the range lies in the control arena, and takes the thread list's lock. */
unsigned nic_range_kind(uintptr_t start, uintptr_t end);

#endif
