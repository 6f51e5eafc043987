#include "maps.h"

#include "nocancel.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

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

bool nic_maps_walk(uintptr_t lo, uintptr_t hi,
                   bool (*fn)(const struct nic_maps_entry *e, void *arg), void *arg) {
  int fd = nic_open_nocancel("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
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
  nic_close_nocancel(fd);
  return true;
}
