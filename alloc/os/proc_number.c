#define _GNU_SOURCE
#include "proc_number.h"

#include "nocancel.h"
#include "proc_own.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

static long long number_in(int fd, const char *key) {
  char buf[4096]; /* status and meminfo are under 2 KiB */
  if (fd < 0) return -1;
  const ssize_t n = nic_read_nocancel(fd, buf + 1, sizeof buf - 2);
  nic_close_nocancel(fd);
  if (n <= 0) return -1;
  buf[0] = '\n'; /* a key on the first line is found as on any other */
  buf[n + 1] = '\0';
  const char *at = buf + 1;
  if (key) {
    char line[64] = "\n";
    strncat(line, key, sizeof line - 2);
    at = strstr(buf, line);
    if (!at) return -1;
    at += strlen(line);
  }
  char *end;
  const long long v = strtoll(at, &end, 10);
  return end == at ? -1 : v;
}

long long nic_proc_number(const char *path, const char *key) {
  return number_in(nic_open_nocancel(path, O_RDONLY | O_CLOEXEC), key);
}

long long nic_proc_own_number(const char *name, const char *key) {
  return number_in(nic_proc_own_open(name, O_RDONLY | O_CLOEXEC), key);
}
