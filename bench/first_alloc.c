/* The first dataplane allocation of a fresh process: how long it takes and how much resident and
 * locked memory it adds, against the first control allocation of the same size. Each run is a
 * new process (posix_spawn of this program), so nothing is warm.
 *
 *   first_alloc [runs] [size]      (defaults: 15 runs, 64 bytes)
 *
 * Prints the pin step the runs had and the median, minimum and maximum of each figure (run_all.sh's
 * first-alloc step, whose report states issue #20's target from them). Run it with the
 * environment under test (NICMALLOC_PIN_STEP, NICMALLOC_PAGE_KIND, NICMALLOC_CHUNK_SIZE...).
 * "--child SIZE" is one run: the figures on one line, then the pin step in KiB. */
#define _GNU_SOURCE
#include "bench_median.h"

#include <nicmalloc.h>

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static long status_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, field, n)) kb = strtol(line + n + 1, NULL, 10);
  fclose(f);
  return kb;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One fresh process: control first (its heap is set up by then anyway), then dataplane. The
 * dataplane request's CPU time (user and kernel, this thread) is the figure a loaded machine
 * leaves nearly alone; its wall time waits for the scheduler too. */
static int child(size_t size) {
  long rss0 = status_kb("VmRSS:");
  double t0 = now_ms();
  volatile char *c = malloc(size);
  double t1 = now_ms();
  long rss1 = status_kb("VmRSS:"), lck1 = status_kb("VmLck:");
  double c2 = cpu_ms(), t2 = now_ms();
  volatile char *d = nic_malloc(size);
  double t3 = now_ms(), c3 = cpu_ms();
  long rss2 = status_kb("VmRSS:"), lck2 = status_kb("VmLck:");
  if (!c || !d) return 1;
  c[0] = d[0] = 1;
  struct nic_stats st;
  memset(&st, 0, sizeof st);
  st.size = sizeof st;
  nic_get_stats(&st);
  printf("%.3f %.3f %ld %ld %ld %zu %.3f %zu\n", t1 - t0, t3 - t2, rss1 - rss0, rss2 - rss1,
         lck2 - lck1, st.dataplane_pinned >> 10, c3 - c2, st.pin_step >> 10);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--child")) return child(strtoul(argv[2], NULL, 0));
  int runs = argc > 1 ? atoi(argv[1]) : 15;
  const char *size = argc > 2 ? argv[2] : "64";
  if (runs < 1 || runs > 1000) runs = 15;
  enum { CTL_MS, DP_MS, CTL_RSS, DP_RSS, DP_LCK, DP_PINNED, DP_CPU, FIELDS, STEP = FIELDS };
  static double v[FIELDS + 1][1000];
  for (int r = 0; r < runs; r++) {
    int fd[2];
    if (pipe(fd)) return 1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
    posix_spawn_file_actions_addclose(&fa, fd[0]);
    char *args[] = {argv[0], "--child", (char *)size, NULL};
    pid_t pid;
    if (posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, environ)) return 1;
    close(fd[1]);
    char buf[256] = {0};
    ssize_t n = read(fd[0], buf, sizeof buf - 1);
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    if (n <= 0 ||
        sscanf(buf, "%lf %lf %lf %lf %lf %lf %lf %lf", &v[CTL_MS][r], &v[DP_MS][r], &v[CTL_RSS][r],
               &v[DP_RSS][r], &v[DP_LCK][r], &v[DP_PINNED][r], &v[DP_CPU][r], &v[STEP][r]) != 8) {
      fprintf(stderr, "run %d: the child failed (status %d)\n", r, status);
      return 1;
    }
  }
  static const char *names[FIELDS] = {
      "control first alloc ms",          "dataplane first alloc ms",
      "control first alloc RSS KiB",     "dataplane first alloc RSS KiB",
      "dataplane first alloc VmLck KiB", "dataplane pinned KiB",
      "dataplane first alloc CPU ms"};
  printf("%d fresh processes, %s-byte request, pin step %.0f KiB\n", runs, size, v[STEP][0]);
  for (int f = 0; f < FIELDS; f++) {
    const double median = bench_median(v[f], (size_t)runs);
    printf("  %-32s median %10.3f   min %10.3f   max %10.3f\n", names[f], median, v[f][0],
           v[f][runs - 1]);
  }
  return 0;
}
