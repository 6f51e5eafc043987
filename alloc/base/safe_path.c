/* Where a file a setting names (NICMALLOC_PROFILE, NICMALLOC_STATS_FILE) may be written. It is
 * written by whoever runs the program, root included, often into a shared directory such as /tmp,
 * where another user can plant a symbolic link or a file of their own at the path or at a
 * temporary name, or swap a directory on the way. So, before every write:
 * - the directory, resolved once at start-up, is reached again by walking its components without
 *   following links: a component replaced by a link since start-up is refused. At start-up a link
 *   on the given path, or on the path a link points to, is followed only when root or the
 *   process's effective uid owns it (another user's link in /tmp could otherwise send root's
 *   file into /etc);
 * - every directory on the way must be owned by root or the effective uid, and not writable by
 *   group or others unless sticky (the sticky bit keeps others from renaming or removing our
 *   entries; without it they could swap the file between our checks and our rename);
 * - the file must not be a link, must be a regular file, and must be owned by the effective uid.
 * The writers then never write the file in place: they write a new one under a fresh name
 * (file_aside.h) and rename it over the path.
 * '%' in the file name takes the letters the setting allows, as they stand at the time of
 * writing: "%u" the effective uid, so that workers that drop privileges (nginx: master root,
 * workers www-data) write a file of their own; "%p" the process id, so that every process of a
 * run does; "%%" a percent sign. A name that could be too long once they are expanded, with the
 * bytes the new file's name adds, is refused at start-up: no name is ever cut short.
 * Each kind of refusal is said once per process and setting: a file may be written again. */
#define _GNU_SOURCE
#include "safe_path.h"

#include "file_aside.h"
#include "log.h"
#include "nocancel.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
  REFUSE_LINK_ON_PATH,
  REFUSE_DIR_OWNER,
  REFUSE_DIR_MODE,
  REFUSE_DIR_GONE,
  REFUSE_FILE_LINK,
  REFUSE_FILE_KIND,
  REFUSE_FILE_OWNER,
  REFUSE_FILE_OPEN,
  REFUSE_NAME_LONG,
  REFUSE_KINDS
};

_Static_assert(REFUSE_KINDS <= NIC_SAFE_PATH_REFUSALS, "nic_safe_path.warned is too short");

static void refuse(struct nic_safe_path *p, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(struct nic_safe_path *p, int kind, const char *fmt, ...) {
  if (!nic_first_time(&p->warned[kind])) return;
  char why[PATH_MAX + 128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  nic_log_warn("%s=%s: %s; not written", p->setting, p->given_abs, why);
}

/* A directory others can change under us: owned by another user, or writable by group or
 * others without the sticky bit. */
static bool dir_ok(struct nic_safe_path *p, const struct stat *st, const char *shown) {
  const uid_t me = geteuid();
  if (st->st_uid != me && st->st_uid != 0) {
    refuse(p, REFUSE_DIR_OWNER, "directory %s is owned by uid %u, not by root or uid %u", shown,
           (unsigned)st->st_uid, (unsigned)me);
    return false;
  }
  if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX)) {
    refuse(p, REFUSE_DIR_MODE, "directory %s is writable by %s without the sticky bit", shown,
           st->st_mode & S_IWOTH ? "others" : "its group");
    return false;
  }
  return true;
}

/* The longest name a file may have here: the new file written beside it (file_aside.h) adds
 * NIC_ASIDE_NAME_EXTRA bytes, and its name must be one the file system takes too. */
#define LONGEST_NAME (NAME_MAX - NIC_ASIDE_NAME_EXTRA)

/* The file name with its escapes as they stand now (another effective uid or process id: a worker
 * that dropped privileges, a forked child, writes under another name), or at their longest:
 * 10 digits each, as many as a uid_t or a pid_t may have. Returns its length; the name is written
 * only when it is at most LONGEST_NAME bytes, never cut short (a later escape dropped would make
 * processes share a file). */
static size_t expand_name(const struct nic_safe_path *p, bool longest, char name[NAME_MAX + 1]) {
  size_t n = 0;
  for (const char *t = p->name_tmpl; *t; t++) {
    const char *escape = t[0] == '%' && t[1] ? strchr(p->escapes, t[1]) : NULL;
    char number[16];
    const char *add = number;
    size_t len = 1;
    if (!escape) {
      number[0] = *t;
    } else if (*escape == 'u') {
      len = (size_t)snprintf(number, sizeof number, "%u", longest ? UINT_MAX : (unsigned)geteuid());
    } else if (*escape == 'p') {
      len = (size_t)snprintf(number, sizeof number, "%d", longest ? INT_MAX : (int)getpid());
    } else {
      add = escape;
    }
    if (escape) t++;
    if (n + len <= LONGEST_NAME) memcpy(name + n, add, len);
    n += len;
  }
  if (n <= LONGEST_NAME) name[n] = '\0';
  return n;
}

int nic_safe_path_open_dir(struct nic_safe_path *p, char name[NAME_MAX + 1]) {
  const size_t len = expand_name(p, false, name);
  if (len > LONGEST_NAME) { /* nic_safe_path_start refused any name that could be */
    refuse(p, REFUSE_NAME_LONG, "the file name would have %zu bytes, over %d", len, LONGEST_NAME);
    return -1;
  }
  int fd = nic_open_nocancel("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) || !dir_ok(p, &st, "/")) goto fail;
  char walked[PATH_MAX] = "";
  size_t walked_len = 0;
  for (const char *at = p->dir; *at;) {
    while (*at == '/')
      at++;
    if (!*at) break;
    const char *end = strchr(at, '/');
    size_t len = end ? (size_t)(end - at) : strlen(at);
    char comp[NAME_MAX + 1];
    if (len > NAME_MAX || walked_len + len + 2 > sizeof walked) goto fail;
    memcpy(comp, at, len);
    comp[len] = '\0';
    walked[walked_len++] = '/';
    memcpy(walked + walked_len, comp, len + 1);
    walked_len += len;
    int next = nic_openat_nocancel(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (next < 0) {
      if (errno == ELOOP || errno == ENOTDIR)
        refuse(p, REFUSE_DIR_GONE, "%s is no longer the directory it was at start-up but a link",
               walked);
      else
        refuse(p, REFUSE_DIR_GONE, "directory %s cannot be opened (%s)", walked, strerror(errno));
      goto fail;
    }
    nic_close_nocancel(fd);
    fd = next;
    if (fstat(fd, &st) || !dir_ok(p, &st, walked)) goto fail;
    at += len;
  }
  return fd;
fail:
  if (fd >= 0) nic_close_nocancel(fd);
  return -1;
}

int nic_safe_path_open_file(struct nic_safe_path *p, int dirfd, const char *name) {
  int fd = nic_openat_nocancel(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
  if (fd < 0) {
    if (errno == ENOENT) return -1;
    struct stat st;
    if (errno == ELOOP ||
        (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))) {
      refuse(p, REFUSE_FILE_LINK, "%s/%s is a symbolic link", p->dir, name);
    } else {
      refuse(p, REFUSE_FILE_OPEN, "%s/%s cannot be opened (%s)", p->dir, name, strerror(errno));
    }
    return -2;
  }
  struct stat st;
  const uid_t me = geteuid();
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    refuse(p, REFUSE_FILE_KIND, "%s/%s is not a regular file", p->dir, name);
  } else if (st.st_uid != me) {
    refuse(p, REFUSE_FILE_OWNER,
           "%s/%s is owned by uid %u, not by uid %u (put %%u in the file name "
           "for a file per user)",
           p->dir, name, (unsigned)st.st_uid, (unsigned)me);
  } else {
    return fd;
  }
  nic_close_nocancel(fd);
  return -2;
}

/* The given directory path with every link on it resolved, as realpath does, but a link is
 * followed only when root or the effective uid owns it: each one, the links that others point
 * to included (root's link in /tmp may point at another user's). Each component is opened
 * without following (O_PATH | O_NOFOLLOW), and a link's owner and target are read from that one
 * open, so no link can be swapped in between. False, said, otherwise. */
static bool resolve_dir(struct nic_safe_path *p, const char *path, char out[PATH_MAX]) {
  char todo[PATH_MAX], next[PATH_MAX], target[PATH_MAX];
  size_t out_len = 0;
  unsigned links = 0;
  const uid_t me = geteuid();
  snprintf(todo, sizeof todo, "%s", path);
  out[0] = '\0';
  int cur = nic_open_nocancel("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  const char *at = todo;
  int err = cur < 0 ? errno : 0;
  while (!err) {
    while (*at == '/')
      at++;
    if (!*at) break;
    const size_t len = strcspn(at, "/");
    char comp[NAME_MAX + 1];
    if (len > NAME_MAX) {
      err = ENAMETOOLONG;
      break;
    }
    memcpy(comp, at, len);
    comp[len] = '\0';
    at += len;
    if (!strcmp(comp, ".")) continue;
    if (!strcmp(comp, "..")) { /* out holds no link: its parent is the lexical one */
      char *slash = strrchr(out, '/');
      out_len = slash ? (size_t)(slash - out) : 0;
      out[out_len] = '\0';
      const int up = nic_openat_nocancel(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
      nic_close_nocancel(cur);
      cur = up;
      err = cur < 0 ? errno : 0;
      continue;
    }
    const int fd = nic_openat_nocancel(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
      err = errno;
      if (fd >= 0) nic_close_nocancel(fd);
      break;
    }
    if (S_ISLNK(st.st_mode)) {
      if (st.st_uid != me && st.st_uid != 0) {
        refuse(p, REFUSE_LINK_ON_PATH, "%s/%s is a symbolic link of uid %u", out, comp,
               (unsigned)st.st_uid);
        nic_close_nocancel(fd);
        nic_close_nocancel(cur);
        return false;
      }
      const ssize_t n = readlinkat(fd, "", target, sizeof target);
      nic_close_nocancel(fd);
      if (n <= 0 || (size_t)n >= sizeof target || ++links > 40) {
        err = n <= 0 ? errno : (size_t)n >= sizeof target ? ENAMETOOLONG : ELOOP;
        break;
      }
      target[n] = '\0';
      if ((size_t)snprintf(next, sizeof next, "%s/%s", target, at) >= sizeof next) {
        err = ENAMETOOLONG;
        break;
      }
      memcpy(todo, next, sizeof todo);
      at = todo;
      if (target[0] == '/') { /* from the root again */
        out_len = 0;
        out[0] = '\0';
        nic_close_nocancel(cur);
        cur = nic_open_nocancel("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        err = cur < 0 ? errno : 0;
      }
      continue;
    }
    if (!S_ISDIR(st.st_mode) || out_len + len + 2 > PATH_MAX) {
      err = S_ISDIR(st.st_mode) ? ENAMETOOLONG : ENOTDIR;
      nic_close_nocancel(fd);
      break;
    }
    out[out_len++] = '/';
    memcpy(out + out_len, comp, len + 1);
    out_len += len;
    nic_close_nocancel(cur);
    cur = fd;
  }
  if (cur >= 0) nic_close_nocancel(cur);
  if (err) {
    nic_log_warn("%s=%s cannot be written (%s)", p->setting, p->given_abs, strerror(err));
    return false;
  }
  if (!out[0]) snprintf(out, PATH_MAX, "/");
  return true;
}

bool nic_safe_path_start(struct nic_safe_path *p, const char *given) {
  char full[PATH_MAX];
  int n = 0;
  if (given[0] != '/') {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) cwd[0] = '\0';
    n = snprintf(full, sizeof full, "%s/%s", cwd, given);
  } else {
    n = snprintf(full, sizeof full, "%s", given);
  }
  snprintf(p->given_abs, sizeof p->given_abs, "%s",
           n > 0 && (size_t)n < sizeof full ? full : given);
  char *slash = strrchr(full, '/');
  const char *base = slash ? slash + 1 : "";
  if (n <= 0 || (size_t)n >= sizeof full || !*base || !strcmp(base, ".") || !strcmp(base, "..") ||
      strlen(base) > NAME_MAX) {
    nic_log_warn("%s=%s: not a path to a file (or too long); ignored", p->setting, given);
    return false;
  }
  snprintf(p->name_tmpl, sizeof p->name_tmpl, "%s", base);
  char name[NAME_MAX + 1];
  const size_t longest = expand_name(p, true, name);
  if (longest > LONGEST_NAME) {
    nic_log_warn("%s=%s: the file name is too long: it may have %zu bytes (%s), over the %d a "
                 "name may have here (%d less the %d that the new file written beside it adds); "
                 "ignored",
                 p->setting, p->given_abs, longest,
                 strchr(p->escapes, 'p') ? "%p and %u at 10 digits" : "%u at 10 digits",
                 LONGEST_NAME, NAME_MAX, NIC_ASIDE_NAME_EXTRA);
    return false;
  }
  *slash = '\0';
  if (!full[0]) snprintf(full, sizeof full, "/");
  if (!resolve_dir(p, full, p->dir)) return false;
  if (!strcmp(p->dir, "/")) p->dir[0] = '\0'; /* the walk adds the slashes */
  /* Said now, not after the whole run; a refusal here is said once and the check is made again
   * at each write, where a worker may have another uid. */
  int dirfd = nic_safe_path_open_dir(p, name);
  if (dirfd < 0) return true;
  if (faccessat(AT_FDCWD, p->dir[0] ? p->dir : "/", W_OK | X_OK, AT_EACCESS)) {
    nic_log_warn("%s=%s cannot be written (%s)", p->setting, p->given_abs, strerror(errno));
    nic_close_nocancel(dirfd);
    return false;
  }
  int fd = nic_safe_path_open_file(p, dirfd, name);
  if (fd >= 0) nic_close_nocancel(fd);
  nic_close_nocancel(dirfd);
  return true;
}
