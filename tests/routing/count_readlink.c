/* Preloaded ahead of nicmalloc by test_profile: counts readlink calls and prints the count at exit,
 * as a key=value line for probe_runner. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static unsigned long calls;

ssize_t readlink(const char *path, char *buf, size_t cap) {
  static ssize_t (*real)(const char *, char *, size_t);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "readlink");
  __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
  return real(path, buf, cap);
}

__attribute__((destructor)) static void say(void) {
  char line[64];
  int n = snprintf(line, sizeof line, "readlink_calls=%lu\n", calls);
  if (write(STDOUT_FILENO, line, (size_t)n) < 0) return;
}
