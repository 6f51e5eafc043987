/* The names in a directory, read without malloc (opendir allocates): getdents64 into a buffer on
 * the stack. For the fork handler's and the exit report's callers, and code that runs where
 * malloc may be nicmalloc's own, mid-call. */
#ifndef NIC_DIR_NAMES_H
#define NIC_DIR_NAMES_H

/* Calls each(name, arg) for every entry of the open directory dirfd, "." and ".." included,
 * reading from the directory's current offset. */
void nic_dir_names(int dirfd, void (*each)(const char *name, void *arg), void *arg);

#endif
