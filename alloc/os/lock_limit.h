/* How much memory the process may pin: see lock_limit.c. */
#ifndef NIC_LOCK_LIMIT_H
#define NIC_LOCK_LIMIT_H

#include <stdint.h>

/* RLIMIT_MEMLOCK's soft limit in bytes, or UINT64_MAX when nothing bounds what a pin of ours may
 * take: the limit is infinite, or the process has CAP_IPC_LOCK, which io_uring's fixed buffers
 * and verbs memory regions are then not counted against. */
uint64_t nic_lock_limit(void);

#endif
