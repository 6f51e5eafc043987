#include "smaps.h"

#include "nocancel.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct walk {
  uintptr_t lo, hi;
  bool (*fn)(const struct nic_smaps_entry *, void *);
  void *arg;
  struct nic_smaps_entry cur;
  bool have, stop;
};

static void finish(struct walk *w) {
  if (w->have && w->cur.end > w->lo && w->cur.start < w->hi && !w->fn(&w->cur, w->arg))
    w->stop = true;
  w->have = false;
}

/* Mapping headers start with a lowercase hex address; fields start with a capital. */
static void parse_line(struct walk *w, char *line) {
  if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')) {
    finish(w);
    char *end;
    w->cur.start = strtoul(line, &end, 16);
    w->cur.end = *end == '-' ? strtoul(end + 1, &end, 16) : w->cur.start;
    w->cur.writable = end[0] == ' ' && end[2] == 'w';
    w->cur.rss_kb = w->cur.anon_huge_kb = 0;
    w->have = true;
  } else if (w->have && !strncmp(line, "Rss:", 4)) {
    w->cur.rss_kb = strtoul(line + 4, NULL, 10);
  } else if (w->have && !strncmp(line, "AnonHugePages:", 14)) {
    w->cur.anon_huge_kb = strtoul(line + 14, NULL, 10);
  }
}

bool nic_smaps_walk(uintptr_t lo, uintptr_t hi,
                    bool (*fn)(const struct nic_smaps_entry *e, void *arg), void *arg) {
  int fd = nic_open_nocancel("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct walk w = {.lo = lo, .hi = hi, .fn = fn, .arg = arg};
  char buf[4096], line[256];
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
  if (!w.stop) finish(&w);
  nic_close_nocancel(fd);
  return true;
}
