/* See dir_names.h. */
#define _GNU_SOURCE
#include "dir_names.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

void nic_dir_names(int dirfd, void (*each)(const char *name, void *arg), void *arg) {
  char buf[8192];
  for (long got; (got = syscall(SYS_getdents64, dirfd, buf, sizeof buf)) > 0;)
    for (long at = 0; at < got;) {
      const struct dirent64 *e = (const struct dirent64 *)(buf + at);
      at += e->d_reclen;
      each(e->d_name, arg);
    }
}
