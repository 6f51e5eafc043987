/* NICMALLOC_PROFILE's path and the checks made before each write (profile_path.c). */
#ifndef NIC_PROFILE_PATH_H
#define NIC_PROFILE_PATH_H

#include <stdbool.h>
#include <stddef.h>

/* Resolves the directory of the given path and says now, once, what would refuse a write.
 * False when there is nothing to write to at all. */
bool nic_prof_path_start(const char *given);
/* The path as given, made absolute: for messages. */
const char *nic_prof_path_shown(void);
/* An O_PATH descriptor of the checked directory, reached without following links, and the file
 * name for the current effective uid; -1 when refused (said once). */
int nic_prof_path_open_dir(char *name, size_t cap);
/* The file, opened for reading and checked (regular, ours, not a link): -1 when there is none,
 * -2 when refused (said once). */
int nic_prof_path_open_file(int dirfd, const char *name);

#endif
