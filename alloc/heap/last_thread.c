/* A program whose main thread ends with pthread_exit ends when its last thread does: glibc then
 * calls exit(0). nicmalloc's threads never end, and glibc counts them, so such a process lived on
 * forever once its own threads were gone, held up by ours; and as ours block the program's
 * signals, a SIGTERM stayed pending with no thread to take it. The reaper asks now and then
 * whether nicmalloc's own threads (an exact count: nic_own_threads_live) are all that is left
 * beside a main thread that has already exited, and if so does what glibc would have done. */
#include "last_thread.h"

#include "nocancel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The fields of a /proc stat file after the command name, which may hold spaces and ')'. */
static const char *stat_fields(const char *path, char *buf, size_t cap) {
  int fd = nic_open_nocancel(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  ssize_t n = nic_read_nocancel(fd, buf, cap - 1);
  nic_close_nocancel(fd);
  if (n <= 0) return NULL;
  buf[n] = '\0';
  const char *close_paren = strrchr(buf, ')');
  return close_paren && close_paren[1] == ' ' ? close_paren + 2 : NULL;
}

long nic_thread_count(void) {
  char buf[1024];
  /* Field 3 (state) comes first; num_threads is field 20. The thread group's count, which the
   * leader's file keeps while it is a zombie: /proc/self is right here and below, where the
   * leader's own state is what is asked. */
  const char *f = stat_fields("/proc/self/stat", buf, sizeof buf);
  for (int field = 3; f && field < 20; field++)
    f = (f = strchr(f, ' ')) ? f + 1 : NULL;
  return f ? strtol(f, NULL, 10) : -1;
}

bool nic_only_background_left(unsigned own_threads) {
  char buf[1024];
  /* The main thread stays counted as a zombie until the whole process ends. */
  if (nic_thread_count() != (long)own_threads + 1) return false;
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)getpid());
  const char *f = stat_fields(path, buf, sizeof buf);
  return f && f[0] == 'Z';
}
