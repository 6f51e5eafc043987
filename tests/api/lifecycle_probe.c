/* nic_lifecycle_probe: allocates before main (constructors of the lowest and highest priority),
 * keeps some blocks alive into main, and allocates and frees again in an atexit handler and a
 * destructor. Each stage prints one "<stage>-ok" line, or "FAIL <stage>: <what>" and exits 1.
 * Lines go out with write(2), unbuffered, so that with stdout and stderr on one pipe they
 * appear in order with nicmalloc's report (stdio would flush them after it, at the very end).
 * NIC_LIFECYCLE_EXIT=thread: main ends the process from a thread of its own with exit(0);
 * NIC_LIFECYCLE_EXIT=destructor: the destructor ends it with exit(0), before the destructors of
 * the libraries (nicmalloc's among them) run. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void say(const char *fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n > sizeof line - 2) n = sizeof line - 2;
  line[n++] = '\n';
  ssize_t w = write(STDOUT_FILENO, line, (size_t)n);
  (void)w;
}

static void expect(bool ok, const char *stage, const char *what) {
  if (ok) return;
  say("FAIL %s: %s", stage, what);
  _exit(1);
}

static bool filled_with(const void *p, unsigned char byte, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    if (c[i] != byte) return false;
  return true;
}

/* Allocates and frees a little of everything; the allocator must be whole at every stage. */
static void churn(const char *stage) {
  for (size_t size = 1; size <= (1u << 20); size *= 4) {
    void *c = malloc(size);
    void *z = calloc(1, size);
    void *d = nic_malloc(size);
    void *dz = nic_calloc(size, 1);
    nic_dataplane_begin();
    void *s = malloc(size);
    nic_dataplane_end();
    expect(c && z && d && dz && s, stage, "allocation returned NULL");
    expect(!nic_is_dataplane(c) && !nic_is_dataplane(z), stage, "malloc/calloc not control");
    expect(nic_is_dataplane(d) && nic_is_dataplane(dz) && nic_is_dataplane(s), stage,
           "nic_malloc/nic_calloc/scoped malloc not dataplane");
    expect(filled_with(z, 0, size) && filled_with(dz, 0, size), stage, "calloc not zeroed");
    memset(c, 1, size);
    memset(d, 2, size);
    memset(s, 3, size);
    void *moved = nic_realloc(c, size * 2);
    expect(moved && nic_is_dataplane(moved) && filled_with(moved, 1, size), stage,
           "nic_realloc lost the block or its contents");
    free(moved);
    free(z);
    free(d);
    free(dz);
    free(s);
  }
}

/* Made in the first constructor and kept into main (and some beyond). */
static unsigned char *early_control, *early_zeroed, *early_dp, *early_grown;
/* Made in the last constructor: one freed in the atexit handler, one in the destructor. */
static unsigned char *late_scoped, *late_dp;

enum {
  CONTROL_SIZE = 100,
  ZEROED_SIZE = 1000,
  DP_SIZE = 5000,
  GROWN_SIZE = 100000,
  LATE_DP_SIZE = 70000,
  SCOPED_SIZE = 300
};

__attribute__((constructor(101))) static void first_constructor(void) {
  const char *stage = "ctor101";
  early_control = malloc(CONTROL_SIZE);
  early_zeroed = calloc(ZEROED_SIZE, 1);
  early_dp = nic_malloc(DP_SIZE);
  unsigned char *small = malloc(10);
  expect(early_control && early_zeroed && early_dp && small, stage, "allocation returned NULL");
  expect(filled_with(early_zeroed, 0, ZEROED_SIZE), stage, "calloc not zeroed");
  expect(nic_is_dataplane(early_dp), stage, "nic_malloc not dataplane");
  expect(!nic_is_dataplane(early_control), stage, "malloc not control");
  memset(small, 0x33, 10);
  early_grown = realloc(small, GROWN_SIZE);
  expect(early_grown && filled_with(early_grown, 0x33, 10), stage, "realloc lost contents");
  memset(early_control, 0x11, CONTROL_SIZE);
  memset(early_zeroed, 0x22, ZEROED_SIZE);
  memset(early_dp, 0x44, DP_SIZE);
  memset(early_grown, 0x55, GROWN_SIZE);
  churn(stage);
  say("ctor101-ok");
}

__attribute__((constructor(65535))) static void last_constructor(void) {
  const char *stage = "ctor65535";
  late_dp = nic_calloc(1, LATE_DP_SIZE);
  nic_dataplane_begin();
  late_scoped = malloc(SCOPED_SIZE);
  nic_dataplane_end();
  expect(late_dp && late_scoped, stage, "allocation returned NULL");
  expect(nic_is_dataplane(late_dp) && nic_is_dataplane(late_scoped), stage, "not dataplane");
  expect(filled_with(late_dp, 0, LATE_DP_SIZE), stage, "nic_calloc not zeroed");
  memset(late_dp, 0x66, LATE_DP_SIZE);
  memset(late_scoped, 0x77, SCOPED_SIZE);
  churn(stage);
  say("ctor65535-ok");
}

static void at_exit_handler(void) {
  const char *stage = "atexit";
  expect(filled_with(late_scoped, 0x77, SCOPED_SIZE), stage, "scoped block changed");
  free(late_scoped);
  churn(stage);
  say("atexit-ok");
}

__attribute__((destructor)) static void destructor(void) {
  const char *stage = "destructor";
  expect(filled_with(early_dp, 0x44, DP_SIZE), stage, "first constructor's block changed");
  expect(filled_with(late_dp, 0x66, LATE_DP_SIZE), stage, "last constructor's block changed");
  expect(filled_with(early_grown, 0x55, GROWN_SIZE / 2), stage, "shrunk block changed");
  free(early_dp);
  free(late_dp);
  free(early_grown);
  churn(stage);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  say("destructor-ok dataplane_live=%zu invalid_frees=%llu double_frees=%llu", s.dataplane_live,
      (unsigned long long)s.invalid_frees, (unsigned long long)s.double_frees);
  const char *how = getenv("NIC_LIFECYCLE_EXIT");
  if (how && !strcmp(how, "destructor")) exit(0);
}

static void *exiting_thread(void *arg) {
  (void)arg;
  exit(0);
}

int main(void) {
  const char *stage = "main";
  expect(filled_with(early_control, 0x11, CONTROL_SIZE), stage, "malloc block changed");
  expect(filled_with(early_zeroed, 0x22, ZEROED_SIZE), stage, "calloc block changed");
  expect(filled_with(early_dp, 0x44, DP_SIZE), stage, "nic_malloc block changed");
  expect(filled_with(early_grown, 0x55, GROWN_SIZE), stage, "realloc block changed");
  expect(nic_is_dataplane(early_dp) && !nic_is_dataplane(early_control), stage, "wrong heap");
  free(early_control);
  free(early_zeroed);
  early_grown = realloc(early_grown, GROWN_SIZE / 2);
  expect(early_grown != NULL, stage, "realloc to shrink returned NULL");
  churn(stage);
  expect(atexit(at_exit_handler) == 0, stage, "atexit failed");
  say("main-ok");
  const char *how = getenv("NIC_LIFECYCLE_EXIT");
  pthread_t thread;
  if (how && !strcmp(how, "thread")) {
    expect(pthread_create(&thread, NULL, exiting_thread, NULL) == 0, stage, "no thread");
    for (;;)
      pause();
  }
  return 0;
}
