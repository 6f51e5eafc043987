#include "proc_own.h"

#include "nocancel.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

/* "/proc/thread-self/<name>" or "/proc/self/<name>"; false when the name does not fit. */
static bool path_of(bool thread, const char *name, char *path, size_t cap) {
  const int n = snprintf(path, cap, "/proc/%s/%s", thread ? "thread-self" : "self", name);
  if (n < 0 || (size_t)n >= cap) {
    errno = ENAMETOOLONG;
    return false;
  }
  return true;
}

int nic_proc_own_open(const char *name, int flags) {
  char path[128];
  for (int thread = 1; thread >= 0; thread--) {
    if (!path_of(thread, name, path, sizeof path)) return -1;
    const int fd = nic_open_nocancel(path, flags);
    if (fd >= 0 || !thread) return fd;
  }
  return -1;
}

ssize_t nic_proc_own_readlink(const char *name, char *buf, size_t cap) {
  char path[128];
  for (int thread = 1; thread >= 0; thread--) {
    if (!path_of(thread, name, path, sizeof path)) return -1;
    const ssize_t n = syscall(SYS_readlinkat, AT_FDCWD, path, buf, cap);
    if (n >= 0 || !thread) return n;
  }
  return -1;
}
