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

/* "start-end perms offset dev inode path" */
static void parse_line(struct walk *w, const char *line) {
  char *end;
  struct nic_maps_entry e;
  e.start = strtoul(line, &end, 16);
  if (e.start >= w->hi) { /* in address order: nothing further is wanted */
    w->stop = true;
    return;
  }
  e.end = *end == '-' ? strtoul(end + 1, &end, 16) : e.start;
  e.writable = end[0] == ' ' && end[1] && end[2] == 'w';
  if (e.end > w->lo && !w->fn(&e, w->arg)) w->stop = true;
}

bool nic_maps_walk(uintptr_t lo, uintptr_t hi,
                   bool (*fn)(const struct nic_maps_entry *e, void *arg), void *arg) {
  int fd = nic_open_nocancel("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct walk w = {.lo = lo, .hi = hi, .fn = fn, .arg = arg};
  char buf[4096], line[64]; /* the addresses and permissions come first */
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
