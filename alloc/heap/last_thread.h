/* Whether nicmalloc's background threads are all that is left of the program. */
#ifndef NIC_LAST_THREAD_H
#define NIC_LAST_THREAD_H

#include <stdbool.h>

/* True when the main thread has exited (pthread_exit) and the process has exactly own_threads
 * other threads: nicmalloc's own (nic_own_threads_live), which never count more than the kernel
 * does. Reads two small /proc files. */
bool nic_only_background_left(unsigned own_threads);

/* The process's threads now (the kernel's count, exited main thread included), or -1. */
long nic_thread_count(void);

#endif
