/* The calling thread's own stack: everything from its stack pointer up to the top of the stack it
 * was started on is mapped and writable while it runs, so a range there needs no system call to
 * be proven readable (short scatter-gather entries are often built on the stack); and a cached
 * registration of any of it must go when the thread does (range_kind.h). */
#ifndef NIC_OWN_STACK_H
#define NIC_OWN_STACK_H

#include <stdbool.h>
#include <stdint.h>

/* Learns the calling thread's stack bounds, once per thread. It may allocate (glibc's
 * pthread_getattr_np reads /proc/self/maps for the main thread and allocates a CPU set for every
 * thread): call it only where the program itself could call malloc, never under nicmalloc's
 * locks (an allocation there may publish memory events that take them). */
void nic_own_stack_learn(void);

/* True when [start, last] lies between the caller's stack pointer and the top of its thread's
 * stack. False when unsure: the bounds not learnt (yet, or not available), or running on an
 * alternate signal stack or a coroutine's stack. Never allocates, takes no lock. */
bool nic_on_own_stack(uintptr_t start, uintptr_t last);

/* Whether [start, end) has a page in the calling thread's stack, whatever the stack pointer: false
 * when the bounds are not learnt. *lo and *hi get the bounds when it has. Never allocates. */
bool nic_own_stack_overlaps(uintptr_t start, uintptr_t end, uintptr_t *lo, uintptr_t *hi);

#endif
