/* Where a file a setting names may be written, and the checks made before each write
 * (safe_path.c). */
#ifndef NIC_SAFE_PATH_H
#define NIC_SAFE_PATH_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#define NIC_SAFE_PATH_REFUSALS 9

/* One setting's path. Static, zeroed but for the two names: a writer at exit must not allocate. */
struct nic_safe_path {
  const char *setting; /* "NICMALLOC_PROFILE", for messages */
  const char *escapes; /* the letters '%' takes in the file name: u (euid), p (pid), % (itself) */
  char given_abs[PATH_MAX];
  char dir[PATH_MAX]; /* resolved at start-up */
  char name_tmpl[NAME_MAX + 1];
  int warned[NIC_SAFE_PATH_REFUSALS];
};

/* Resolves the directory of the given path (a relative one from the current directory) and says
 * now, once, what would refuse a write. False when there is nothing to write to at all. */
bool nic_safe_path_start(struct nic_safe_path *p, const char *given);
/* An O_PATH descriptor of the checked directory, reached without following links, and the file
 * name with its escapes as they stand now, whole; -1 when refused (said once). */
int nic_safe_path_open_dir(struct nic_safe_path *p, char name[NAME_MAX + 1]);
/* The file, opened for reading and checked (regular, ours, not a link): -1 when there is none,
 * -2 when refused (said once). */
int nic_safe_path_open_file(struct nic_safe_path *p, int dirfd, const char *name);

#endif
