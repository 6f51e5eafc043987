/* NICMALLOC_STATS_FILE. Settings reach every program a process runs, so NICMALLOC_STATS=1 under a
 * build tool had each compiler it ran print a report into the output the tool reads and checks.
 * A file per process (%p in its name) leaves stderr alone. It is made as the profile is
 * (safe_path.h: no link followed, no other user's file or changeable directory; file_aside.h: a
 * new file renamed over the path, so the path holds a whole report), but never merged: each
 * write replaces the file. */
#define _GNU_SOURCE
#include "stats_file.h"

#include "file_aside.h"
#include "log.h"
#include "safe_path.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct nic_safe_path path = {.setting = "NICMALLOC_STATS_FILE", .escapes = "pu%"};
static bool usable;

void nic_stats_file_start(const char *given) {
  usable = nic_safe_path_start(&path, given);
}

/* A new file next to name, written and renamed over it; said when that fails. */
static bool replace(int dirfd, const char *name, int cur, int (*write)(int fd, void *arg),
                    void *arg) {
  char tmp[NAME_MAX + 32];
  struct stat cur_st;
  const bool have_cur = cur >= 0 && !fstat(cur, &cur_st);
  const int fd = nic_aside_create(dirfd, name, tmp, sizeof tmp, have_cur ? &cur_st : NULL);
  if (fd < 0) {
    nic_log_warn("%s=%s: no new file can be made in %s/ (%s); no report", path.setting,
                 path.given_abs, path.dir, strerror(errno));
    return false;
  }
  int err = write(fd, arg);
  nic_aside_close(fd);
  const char *what = "cannot be written";
  if (!err && renameat(dirfd, tmp, dirfd, name)) {
    err = errno;
    what = "cannot be replaced";
  }
  if (!err) return true;
  unlinkat(dirfd, tmp, 0);
  nic_log_warn("%s=%s: %s/%s %s (%s); no report", path.setting, path.given_abs, path.dir, name,
               what, strerror(err));
  return false;
}

bool nic_stats_file_write(int (*write)(int fd, void *arg), void *arg) {
  if (!usable) return false;
  char name[NAME_MAX + 1];
  if (!nic_aside_lock_bounded()) {
    nic_log_warn("%s=%s: a lock was held at exit; no report", path.setting, path.given_abs);
    return false;
  }
  const int dirfd = nic_aside_note(nic_safe_path_open_dir(&path, name));
  const int cur = dirfd < 0 ? -2 : nic_aside_note(nic_safe_path_open_file(&path, dirfd, name));
  nic_aside_unlock();
  const bool written = cur != -2 && replace(dirfd, name, cur, write, arg);
  nic_aside_close(cur);
  nic_aside_close(dirfd);
  return written;
}
