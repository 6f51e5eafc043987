/* NICMALLOC_STATS_FILE: the file the report at exit goes to instead of stderr (stats_file.c). */
#ifndef NIC_STATS_FILE_H
#define NIC_STATS_FILE_H

#include <stdbool.h>

/* Resolves the given path from the directory the process is in (call it before the program can
 * change it) and says now, once, what would refuse a write. */
void nic_stats_file_start(const char *given);

/* Writes the report, with write (which returns 0, or the errno of a write that failed), into a
 * new file next to the path and renames it over the path. Without malloc. False, said with the
 * path and the reason, when the file cannot be written: the path then keeps what it had. */
bool nic_stats_file_write(int (*write)(int fd, void *arg), void *arg);

#endif
