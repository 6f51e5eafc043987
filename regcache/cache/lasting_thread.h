/* A thread of nicmalloc's that lives as long as the process, for work whose allocations do too.
 *
 * A plugin backend's open (DPDK's EAL, rdma-core) makes thousands of blocks that live until exit,
 * in the mimalloc heap of the thread that opens it. When that thread exits, its segments hold
 * them and go to mimalloc's abandoned list, which mimalloc 2.0.9 walks at every later thread
 * exit (alloc/heap/thread.h): with DPDK opened on a thread that had exited, every later thread's
 * start and exit took 370 us instead of 30 (bench/thread_exit_cost.c). Such work runs here
 * instead when the caller is not the main thread. */
#ifndef NIC_LASTING_THREAD_H
#define NIC_LASTING_THREAD_H

#include <stdbool.h>

/* Runs fn(arg) on the lasting thread, started on first use (in this process: a child of fork
 * starts its own), with every signal but the faults blocked, and waits for it. False, fn not
 * run, when the thread cannot be started. Callers take turns under a lock of their own (the
 * backend lock). */
bool nic_run_on_lasting_thread(void (*fn)(void *), void *arg);

#endif
