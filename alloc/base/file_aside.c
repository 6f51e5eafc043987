/* Files replaced whole: the new file's name and creation, the removal of those a killed writer
 * left, and the descriptors writers hold meanwhile, which a forked child closes. Each writer
 * (alloc/routing/profile_write.c, stats_file.c) decides what it writes and when it renames. */
#define _GNU_SOURCE
#include "file_aside.h"

#include "bounded_lock.h"
#include "dir_names.h"

#include "forklock.h"
#include "nocancel.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* A writer holds three descriptors at most: the profile's and the report's. */
#define HELD_MAX 8

static int held_lock;
static int held[HELD_MAX] = {-1, -1, -1, -1, -1, -1, -1, -1};

void nic_aside_lock(void) {
  while (__atomic_exchange_n(&held_lock, 1, __ATOMIC_ACQUIRE))
    sched_yield();
}

void nic_aside_unlock(void) {
  __atomic_store_n(&held_lock, 0, __ATOMIC_RELEASE);
}

bool nic_aside_lock_bounded(void) {
  return nic_bounded_spin(&held_lock, "report file's descriptors");
}

int nic_aside_note(int fd) {
  for (int i = 0; fd >= 0 && i < HELD_MAX; i++) {
    if (held[i] < 0) {
      held[i] = fd;
      break;
    }
  }
  return fd;
}

void nic_aside_close(int fd) {
  if (fd < 0) return;
  /* Not taken (the report at exit, bounded_lock.h): the descriptor stays open and listed, as
   * closed while listed its number could be reused and a child of fork would close another
   * file; the process is exiting. */
  if (!nic_aside_lock_bounded()) return;
  for (int i = 0; i < HELD_MAX; i++)
    if (held[i] == fd) held[i] = -1;
  nic_close_nocancel(fd);
  nic_aside_unlock();
}

int nic_aside_create(int dirfd, const char *name, char *tmp, size_t cap, const struct stat *cur) {
  const mode_t mode = cur ? cur->st_mode & 0777 : 0644;
  for (int tries = 0; tries < 16; tries++) {
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r) {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      r = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid() ^ ((uint64_t)tries << 56);
    }
    if ((size_t)snprintf(tmp, cap, ".%s.%016llx.tmp", name, (unsigned long long)r) >= cap) {
      errno = ENAMETOOLONG;
      return -1;
    }
    if (!nic_aside_lock_bounded()) {
      errno = EDEADLK;
      return -1;
    }
    int fd = nic_aside_note(nic_openat_nocancel(
        dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    nic_aside_unlock();
    if (fd >= 0 && cur) fchmod(fd, mode); /* exactly: the umask may have taken bits at the open */
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

/* A writer that found no file to replace may be between nic_aside_create and its rename at any
 * time: hence the age. */
#define STALE_S 60
struct stale_walk {
  int dirfd;
  char prefix[NAME_MAX + 2];
  size_t prefix_len;
  time_t old;
};

static void remove_if_stale(const char *entry, void *arg) {
  const struct stale_walk *w = arg;
  const size_t len = strlen(entry);
  struct stat st;
  if (len != w->prefix_len - 2 + NIC_ASIDE_NAME_EXTRA || memcmp(entry, w->prefix, w->prefix_len) ||
      strcmp(entry + len - 4, ".tmp") || fstatat(w->dirfd, entry, &st, AT_SYMLINK_NOFOLLOW) ||
      !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_mtime > w->old)
    return;
  unlinkat(w->dirfd, entry, 0);
}

void nic_aside_remove_stale(int dirfd, const char *name) {
  int fd = nic_openat_nocancel(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return;
  struct stale_walk w = {.dirfd = dirfd, .old = time(NULL) - STALE_S};
  w.prefix_len = (size_t)snprintf(w.prefix, sizeof w.prefix, ".%s.", name);
  nic_dir_names(fd, remove_if_stale, &w);
  nic_close_nocancel(fd);
}

/* A write in progress in the parent is the parent's: the child only closes its copies. */
static void after_fork_child(void) {
  for (int i = 0; i < HELD_MAX; i++) {
    if (held[i] >= 0) nic_close_nocancel(held[i]);
    held[i] = -1;
  }
  held_lock = 0;
}
NIC_FORKLOCK_CUSTOM(aside_files, NIC_FORK_ASIDE_FILES, nic_aside_lock, nic_aside_unlock, NULL,
                    after_fork_child);
