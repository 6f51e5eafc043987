/* The process's own files under /proc, opened from any thread. /proc/self names the thread-group
 * leader: once the main thread has called pthread_exit while others go on, the leader is a zombie
 * without memory or descriptors, and its mem fails (ESRCH), its maps and fd list are empty, its
 * exe link is gone and its status has no Vm lines. /proc/thread-self (Linux 3.17) names the
 * calling thread, which shares the process's memory and descriptor table; /proc/self is taken
 * where it is missing. No malloc, no cancellation point. */
#ifndef NIC_PROC_OWN_H
#define NIC_PROC_OWN_H

#include <stddef.h>
#include <sys/types.h>

/* Opens /proc/thread-self/<name> ("maps", "mem", "fd"...), else /proc/self/<name>; -1 and errno
 * as open's when neither opens. */
int nic_proc_own_open(const char *name, int flags);
/* readlink of /proc/thread-self/<name>, else of /proc/self/<name> ("exe"). */
ssize_t nic_proc_own_readlink(const char *name, char *buf, size_t cap);

#endif
