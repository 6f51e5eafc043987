/* Numbers the kernel publishes under /proc, read without malloc (a stack buffer, calls that are
 * no cancellation point): for the checks made before a reservation or a commit, on paths that
 * must not allocate. */
#ifndef NIC_PROC_NUMBER_H
#define NIC_PROC_NUMBER_H

/* The number after key (a line's start, "VmSize:") in the file at path, in the file's own unit
 * (kB in status and meminfo); the file's first number when key is NULL (a sysctl). -1 when the
 * file cannot be read or has no such line. */
long long nic_proc_number(const char *path, const char *key);
/* The same in one of the process's own files ("status"), read through proc_own.h: the main
 * thread's /proc/self/status has no Vm lines once it has left with pthread_exit. */
long long nic_proc_own_number(const char *name, const char *key);

/* vm.overcommit_memory, and its strict mode: every private writable page charged against
 * CommitLimit. */
#define NIC_OVERCOMMIT_MODE "/proc/sys/vm/overcommit_memory"
#define NIC_OVERCOMMIT_NEVER 2

#endif
