#include "log.h"

#include "config.h"
#include "nocancel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* vsnprintf with integer and string conversions does not allocate in glibc; we never format
 * floating point here for that reason. */
static size_t format_line(char *buf, size_t cap, const char *prefix, const char *fmt, va_list ap) {
  int n = snprintf(buf, cap, "%s", prefix);
  if (n < 0) n = 0;
  int m = vsnprintf(buf + n, cap - (size_t)n, fmt, ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > cap - 2) len = cap - 2;
  if (len == 0 || buf[len - 1] != '\n') buf[len++] = '\n';
  return len;
}

static void write_all(int fd, const char *buf, size_t len) {
  if (fd < 0) return;
  while (len > 0) {
    ssize_t w = nic_write_nocancel(fd, buf, len);
    if (w <= 0) return;
    buf += w;
    len -= (size_t)w;
  }
}

static void log_with_prefix(const char *prefix, const char *fmt, va_list ap) {
  char buf[512];
  size_t len = format_line(buf, sizeof buf, prefix, fmt, ap);
  write_all(nic_log_fd(), buf, len);
}

void nic_log_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_with_prefix("nicmalloc: error: ", fmt, ap);
  va_end(ap);
}

void nic_log_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_with_prefix("nicmalloc: warning: ", fmt, ap);
  va_end(ap);
}

void nic_log_warn_text(const char *prefix, const char *text) {
  int fd = nic_log_fd();
  static const char head[] = "nicmalloc: warning: ";
  write_all(fd, head, sizeof head - 1);
  write_all(fd, prefix, strlen(prefix));
  write_all(fd, text, strlen(text));
  write_all(fd, "\n", 1);
}

void nic_log_info(const char *fmt, ...) {
  if (!nic_config()->verbose) return;
  va_list ap;
  va_start(ap, fmt);
  log_with_prefix("nicmalloc: ", fmt, ap);
  va_end(ap);
}

void nic_log_v(enum nic_log_level level, const char *fmt, va_list ap) {
  if (level == NIC_LOG_INFO && !nic_config()->verbose) return;
  log_with_prefix(level == NIC_LOG_ERROR  ? "nicmalloc: error: "
                  : level == NIC_LOG_WARN ? "nicmalloc: warning: "
                                          : "nicmalloc: ",
                  fmt, ap);
}

#define KINDS 128

struct kind {
  int state; /* 0 free, 1 being written, 2 ready */
  uintptr_t site, a, b;
};
static struct kind kinds[KINDS];

bool nic_first_time_key(uintptr_t site, uintptr_t a, uintptr_t b) {
  for (unsigned i = 0; i < KINDS; i++) {
    struct kind *k = &kinds[i];
    int state = __atomic_load_n(&k->state, __ATOMIC_ACQUIRE);
    if (state == 2 && k->site == site && k->a == a && k->b == b) return false;
    if (state == 0) {
      int expected = 0;
      if (!__atomic_compare_exchange_n(&k->state, &expected, 1, false, __ATOMIC_ACQUIRE,
                                       __ATOMIC_RELAXED)) {
        i--; /* taken under us: look at it again */
        continue;
      }
      k->site = site;
      k->a = a;
      k->b = b;
      __atomic_store_n(&k->state, 2, __ATOMIC_RELEASE);
      return true;
    }
  }
  return false;
}

void nic_log_fallback(bool explicit_setting_refused, const char *fmt, ...) {
  if (!explicit_setting_refused && !nic_config()->verbose) return;
  va_list ap;
  va_start(ap, fmt);
  log_with_prefix(explicit_setting_refused ? "nicmalloc: warning: " : "nicmalloc: ", fmt, ap);
  va_end(ap);
}

void nic_fatal(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_with_prefix("nicmalloc: fatal: ", fmt, ap);
  va_end(ap);
  abort();
}

size_t nic_fdprintf(int fd, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n <= 0) return 0;
  size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
  write_all(fd, buf, len);
  return len;
}
