/* Which descriptors a backend's open made (open_fds.h). Read with nic_dir_names (no malloc)
 * and raw system calls: no malloc, no cancellation point, under the backend lock. A program thread
 * that opens a descriptor of its own meant for an exec'd child while the backend opens (DPDK
 * takes a tenth of a second, once per process) has it made close-on-exec too, and closed in
 * the process's fork children. */
#define _GNU_SOURCE
#include "open_fds.h"

#include "dir_names.h"
#include "nocancel.h"
#include "proc_own.h"

#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static void mark(struct nic_fd_set *s, long fd) {
  if (fd >= 0 && fd < NIC_FD_SET_MAX) s->bits[fd / 64] |= (uint64_t)1 << (fd % 64);
}

static bool marked(const struct nic_fd_set *s, long fd) {
  return fd >= 0 && fd < NIC_FD_SET_MAX && (s->bits[fd / 64] >> (fd % 64) & 1);
}

static long parse_fd(const char *name) {
  long fd = 0;
  if (!*name) return -1;
  for (; *name; name++) {
    if (*name < '0' || *name > '9' || fd > NIC_FD_SET_MAX) return -1;
    fd = fd * 10 + (*name - '0');
  }
  return fd;
}

struct fd_walk {
  struct nic_fd_set *set;
  int dir;
};

static void mark_named(const char *name, void *arg) {
  const struct fd_walk *w = arg;
  const long fd = parse_fd(name);
  if (fd != w->dir) mark(w->set, fd);
}

/* Every open descriptor into s; false when the fd directory cannot be read. */
static bool list_proc(struct nic_fd_set *s) {
  const int dir = nic_proc_own_open("fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return false;
  struct fd_walk w = {.set = s, .dir = dir};
  nic_dir_names(dir, mark_named, &w);
  nic_close_nocancel(dir);
  return true;
}

static void list_fcntl(struct nic_fd_set *s) {
  struct rlimit lim;
  long top = NIC_FD_SET_MAX;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < (rlim_t)top) top = (long)lim.rlim_cur;
  for (long fd = 0; fd < top; fd++)
    if (fcntl((int)fd, F_GETFD) >= 0) mark(s, fd);
}

void nic_fds_snapshot(struct nic_fd_set *s) {
  memset(s, 0, sizeof *s);
  if (!list_proc(s)) list_fcntl(s);
}

/* The backends' own descriptors. Anonymous inodes (eventfd, epoll, timerfd) share one inode,
 * so the identity kept cannot tell them apart: only a number the program closed under a backend
 * (a bug of its own, which breaks that backend anyway) and reused for the same kind of
 * descriptor is mistaken. */
#define ADOPTED_MAX 64
static struct adopted {
  int fd;
  dev_t dev;
  ino_t ino;
  mode_t type;
} adopted[ADOPTED_MAX];
static unsigned adopted_count;

void nic_fds_adopt(int fd) {
  struct stat st;
  if (fd < 0 || adopted_count == ADOPTED_MAX || fstat(fd, &st) != 0) return;
  adopted[adopted_count++] =
      (struct adopted){.fd = fd, .dev = st.st_dev, .ino = st.st_ino, .type = st.st_mode & S_IFMT};
}

unsigned nic_fds_adopt_new(const struct nic_fd_set *before) {
  static struct nic_fd_set now; /* 8 KiB: not on the program's stack; under the backend lock */
  nic_fds_snapshot(&now);
  unsigned set = 0;
  for (long fd = 0; fd < NIC_FD_SET_MAX; fd++) {
    if (!marked(&now, fd) || marked(before, fd)) continue;
    nic_fds_adopt((int)fd);
    const int flags = fcntl((int)fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC) && fcntl((int)fd, F_SETFD, flags | FD_CLOEXEC) == 0)
      set++;
  }
  return set;
}

unsigned nic_fds_close_adopted(void) {
  unsigned closed = 0;
  for (unsigned i = 0; i < adopted_count; i++) {
    const struct adopted *a = &adopted[i];
    struct stat st;
    if (fstat(a->fd, &st) == 0 && st.st_dev == a->dev && st.st_ino == a->ino &&
        (st.st_mode & S_IFMT) == a->type && nic_close_nocancel(a->fd) == 0)
      closed++;
  }
  adopted_count = 0;
  return closed;
}
