#include "maps.h"

#include "nocancel.h"
#include "proc_own.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* Linux 6.11 answers for one mapping at a time (PROCMAP_QUERY on the maps file): half a
 * microsecond each, where writing out the whole text took 20 to 80 here, from the first mapping
 * up to the range. The layout is the kernel's ABI (uapi/linux/fs.h), spelt here for older
 * headers. */
struct maps_query {
  uint64_t size, query_flags, query_addr;
  uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
  uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
  uint64_t vma_name_addr, build_id_addr;
};
_Static_assert(sizeof(struct maps_query) == 104, "PROCMAP_QUERY's argument");
#define MAPS_QUERY _IOWR('f', 17, struct maps_query)
enum {
  QUERY_READABLE = 0x01,
  QUERY_WRITABLE = 0x02,
  QUERY_SHARED = 0x08,
  QUERY_COVERING_OR_NEXT = 0x10,
};
static int query_missing; /* the kernel refused the query: the text from then on */

/* 1: walked; 0: the kernel refused the first query, nothing reported; -1: it failed on the way. */
static int walk_by_query(int fd, uintptr_t lo, uintptr_t hi,
                         bool (*fn)(const struct nic_maps_entry *, void *), void *arg) {
  for (uintptr_t a = lo; a < hi;) {
    struct maps_query q = {
        .size = sizeof q, .query_flags = QUERY_COVERING_OR_NEXT, .query_addr = a};
    if (ioctl(fd, MAPS_QUERY, &q)) {
      if (errno == ENOENT) return 1; /* no mapping at or above a */
      if (a != lo) return -1;
      __atomic_store_n(&query_missing, 1, __ATOMIC_RELAXED); /* an older kernel, or a filter */
      return 0;
    }
    if (q.vma_start >= hi) return 1;
    const struct nic_maps_entry e = {
        .start = q.vma_start,
        .end = q.vma_end,
        .readable = q.vma_flags & QUERY_READABLE,
        .writable = q.vma_flags & QUERY_WRITABLE,
        .shared = q.vma_flags & QUERY_SHARED,
        .anonymous = !q.inode && !q.dev_major && !q.dev_minor, /* as 00:00 0 in the text */
    };
    if (!fn(&e, arg)) return 1;
    a = q.vma_end;
  }
  return 1;
}

struct walk {
  uintptr_t lo, hi;
  bool (*fn)(const struct nic_maps_entry *, void *);
  void *arg;
  bool stop;
};

/* "start-end perms offset dev inode path"; a mapping with neither a device nor an inode has no
 * file behind it (the kernel writes 00:00 0 for those alone). */
static void parse_line(struct walk *w, const char *line) {
  char *end;
  struct nic_maps_entry e;
  e.start = strtoul(line, &end, 16);
  if (e.start >= w->hi) { /* in address order: nothing further is wanted */
    w->stop = true;
    return;
  }
  e.end = *end == '-' ? strtoul(end + 1, &end, 16) : e.start;
  const bool perms = end[0] == ' ' && end[1] && end[2] && end[3] && end[4];
  e.readable = perms && end[1] == 'r';
  e.writable = perms && end[2] == 'w';
  e.shared = perms && end[4] == 's';
  e.anonymous = false;
  if (perms) {
    strtoul(end + 5, &end, 16); /* offset */
    const unsigned long major = strtoul(end, &end, 16);
    const unsigned long minor = *end == ':' ? strtoul(end + 1, &end, 16) : 1;
    const unsigned long inode = strtoul(end, &end, 10);
    e.anonymous = major == 0 && minor == 0 && inode == 0 && (*end == ' ' || *end == '\0');
  }
  if (e.end > w->lo && !w->fn(&e, w->arg)) w->stop = true;
}

int nic_maps_walk(uintptr_t lo, uintptr_t hi, bool (*fn)(const struct nic_maps_entry *e, void *arg),
                  void *arg) {
  const int saved = errno;
  int fd = nic_proc_own_open("maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno ? errno : EIO;
    errno = saved;
    return -err;
  }
  if (!__atomic_load_n(&query_missing, __ATOMIC_RELAXED)) {
    const int walked = walk_by_query(fd, lo, hi, fn, arg), err = errno ? errno : EIO;
    errno = saved;
    if (walked) {
      nic_close_nocancel(fd);
      return walked > 0 ? 0 : -err;
    }
  }
  struct walk w = {.lo = lo, .hi = hi, .fn = fn, .arg = arg};
  char buf[4096], line[128]; /* the addresses, permissions, device and inode come first */
  size_t line_len = 0;
  ssize_t n;
  while (!w.stop && (n = nic_read_nocancel(fd, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n && !w.stop; i++) {
      if (buf[i] != '\n') {
        if (line_len < sizeof line - 1) line[line_len++] = buf[i];
        continue;
      }
      line[line_len] = '\0';
      line_len = 0;
      parse_line(&w, line);
    }
  }
  const int err = n < 0 ? (errno ? errno : EIO) : 0;
  nic_close_nocancel(fd);
  errno = saved;
  return -err;
}
