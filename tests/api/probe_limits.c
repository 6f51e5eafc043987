/* nic_probe: address-space, data and cgroup limits, set before start-up or later. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "probe_common.h"
#include "refuse_syscall.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* as-limit GIB ARGS... / data-limit MIB ARGS...: runs the probe again with ARGS under an
 * address-space (or data) limit, so that nicmalloc starts under it. */
static int run_limited(int resource, unsigned shift, char **argv) {
  const rlim_t bytes = (rlim_t)strtoull(argv[2], NULL, 0) << shift;
  const struct rlimit limit = {bytes, bytes};
  if (setrlimit(resource, &limit)) return 1;
  argv[2] = argv[0];
  execv(argv[0], argv + 2);
  return 1;
}

/* in-cgroup DIR ARGS...: runs the probe again with ARGS inside the cgroup at DIR. */
static int in_cgroup(char **argv) {
  char path[512], pid[32];
  snprintf(path, sizeof path, "%s/cgroup.procs", argv[2]);
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  const int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  if (fd < 0 || write(fd, pid, (size_t)len) != len) return 1;
  close(fd);
  argv[2] = argv[0];
  execv(argv[0], argv + 2);
  return 1;
}

/* Moves into cgroup dir (no limit), backs a step, sets limit on it and waits wait_ms; then
 * whether a block of size bytes is refused. */
static int limit_later(const char *dir, const char *limit_file, const char *limit, size_t size,
                       unsigned wait_ms) {
  char path[512], line[64];
  snprintf(path, sizeof path, "%s/cgroup.procs", dir);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  int len = snprintf(line, sizeof line, "%d\n", (int)getpid());
  if (fd < 0 || write(fd, line, (size_t)len) != len) return 2;
  close(fd);
  void *first = nic_malloc(1 << 20);
  printf("first_dp=%d\n", first && nic_is_dataplane(first));
  snprintf(path, sizeof path, "%s/%s", dir, limit_file);
  fd = open(path, O_WRONLY | O_CLOEXEC);
  len = snprintf(line, sizeof line, "%s\n", limit);
  if (fd < 0 || write(fd, line, (size_t)len) != len) return 3;
  close(fd);
  usleep(wait_ms * 1000u);
  errno = 0;
  void *big = nic_malloc(size);
  printf("got=%d\nerrno=%d\n", big != NULL, errno);
  free(big);
  free(first);
  return 0;
}

/* huge-until-null SIZE: mallocs SIZE-byte blocks (over 16 MiB: mimalloc's huge ones) until one
 * is refused; then a calloc of that size and a realloc of the first block to twice it; after
 * everything is freed, one more malloc. Under a data limit the refusals must be NULL and ENOMEM,
 * the first block kept by the failed realloc. */
static int huge_until_null(size_t size) {
  static char *blocks[4096];
  unsigned n = 0;
  errno = 0;
  while (n < sizeof blocks / sizeof blocks[0] && (blocks[n] = malloc(size))) {
    blocks[n][0] = blocks[n][size - 1] = (char)n;
    n++;
  }
  printf("blocks=%u\nnull_errno=%d\n", n, errno);
  errno = 0;
  void *z = calloc(1, size);
  printf("calloc_null=%d\ncalloc_errno=%d\n", z == NULL, errno);
  free(z);
  if (n) {
    errno = 0;
    char *grown = realloc(blocks[0], 2 * size);
    printf("realloc_null=%d\nrealloc_errno=%d\n", grown == NULL, errno);
    if (grown) blocks[0] = grown;
    printf("realloc_kept=%d\n", blocks[0][0] == 0 && blocks[0][size - 1] == 0);
  }
  for (unsigned i = 0; i < n; i++)
    free(blocks[i]);
  char *again = malloc(size);
  printf("again=%d\n", again != NULL);
  if (again) again[size - 1] = 1;
  free(again);
  return 0;
}

/* refused-arena-commit SIZE: once started, every mprotect fails with ENOMEM (a seccomp filter),
 * as if the room the check before a fresh huge block saw was taken right after it; then one
 * malloc of SIZE bytes. */
static int refused_arena_commit(size_t size) {
  free(malloc(64));
  if (nic_refuse_syscall(SYS_mprotect, -1, ENOMEM)) return 1;
  printf("filtered=1\n");
  fflush(stdout);
  char *p = malloc(size);
  if (p) p[size - 1] = 1;
  printf("survived=%d\n", p != NULL);
  free(p);
  return 0;
}

/* The commands: argv[1] names one, its arguments follow (usage in probe.c). */
int cmd_as_limit(int argc, char **argv) {
  (void)argc;
  return run_limited(RLIMIT_AS, 30, argv);
}

int cmd_as_limit_kib(int argc, char **argv) {
  (void)argc;
  return run_limited(RLIMIT_AS, 10, argv);
}

/* as-limit-later GIB: lowers the address-space limit to GIB after start-up, then maps a MiB
 * (twice) and mallocs a small block. */
int cmd_as_limit_later(int argc, char **argv) {
  (void)argc;
  const rlim_t bytes = (rlim_t)strtoull(argv[2], NULL, 0) << 30;
  const struct rlimit limit = {bytes, bytes};
  if (setrlimit(RLIMIT_AS, &limit)) return 1;
  void *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  printf("mmap_errno=%d\n", m == MAP_FAILED ? errno : 0);
  void *p = malloc(64);
  printf("small_malloc=%d\n", p != NULL);
  free(p);
  return 0;
}

static unsigned long long vm_size(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long long kib = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %llu kB", &kib) == 1) break;
  if (f) fclose(f);
  return kib << 10;
}

/* as-limit-huge MIB SIZE...: lowers the address-space limit to what the process maps and MIB
 * more, after start-up, then mallocs each SIZE in turn (blocks over 16 MiB: a segment of their
 * own, committed inside the control arena's reservation) and writes it whole. */
int cmd_as_limit_huge(int argc, char **argv) {
  free(malloc(64));
  const rlim_t bytes = vm_size() + ((rlim_t)strtoull(argv[2], NULL, 0) << 20);
  const struct rlimit limit = {bytes, RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &limit)) return 1;
  for (int i = 3; i < argc; i++) {
    const size_t size = strtoull(argv[i], NULL, 0);
    errno = 0;
    char *p = malloc(size);
    printf("got_%s=%d\nerrno_%s=%d\n", argv[i], p != NULL, argv[i], errno);
    if (p) memset(p, 1, size);
    free(p);
  }
  return 0;
}

/* dp-room [none]: under an address-space limit (as-limit), the room it leaves when main starts
 * and the dataplane bytes reserved by then; whether a dataplane block is had (none: none is
 * asked for); how much the program can still map after it (64 MiB pieces, given back). */
int cmd_dp_room(int argc, char **argv) {
  const bool ask = !(argc > 2 && strcmp(argv[2], "none") == 0);
  struct rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) || limit.rlim_cur == RLIM_INFINITY) return 1;
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  const unsigned long long before = vm_size();
  printf("reserved_before_mib=%zu\n", s.dataplane_reserved >> 20);
  void *block = ask ? nic_malloc(4096) : NULL;
  printf("dp=%d\n", block && nic_is_dataplane(block));
  enum { kPieces = 1024 };
  const size_t piece = (size_t)64 << 20;
  static void *pieces[kPieces];
  unsigned n = 0;
  while (n < kPieces &&
         (pieces[n] = mmap(NULL, piece, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                           0)) != MAP_FAILED)
    n++;
  for (unsigned i = 0; i < n; i++)
    munmap(pieces[i], piece);
  nic_get_stats(&s);
  printf("room_before_mib=%llu\nmappable_mib=%llu\nreserved_mib=%zu\n",
         (unsigned long long)(limit.rlim_cur - before) >> 20, (unsigned long long)n * (piece >> 20),
         s.dataplane_reserved >> 20);
  print_stats("");
  free(block);
  return 0;
}

/* mlockall-limited: under an 8 MiB memory-lock limit and without CAP_IPC_LOCK (root drops to
 * nobody), locks everything twice. */
int cmd_mlockall_limited(int argc, char **argv) {
  (void)argc, (void)argv;
  const struct rlimit limit = {8 << 20, 8 << 20};
  if (setrlimit(RLIMIT_MEMLOCK, &limit)) return 1;
  if (geteuid() == 0 && (setgroups(0, NULL) || setgid(65534) || setuid(65534))) return 1;
  for (int i = 0; i < 2; i++)
    printf("mlockall_errno_%d=%d\n", i, mlockall(MCL_CURRENT) ? errno : 0);
  return 0;
}

int cmd_data_limit(int argc, char **argv) {
  (void)argc;
  return run_limited(RLIMIT_DATA, 20, argv);
}

int cmd_in_cgroup(int argc, char **argv) {
  (void)argc;
  return in_cgroup(argv);
}

int cmd_limit_later(int argc, char **argv) {
  (void)argc;
  return limit_later(argv[2], argv[3], argv[4], strtoull(argv[5], NULL, 0),
                     (unsigned)strtoul(argv[6], NULL, 0));
}

int cmd_huge_until_null(int argc, char **argv) {
  (void)argc;
  return huge_until_null(strtoull(argv[2], NULL, 0));
}

int cmd_refused_arena_commit(int argc, char **argv) {
  (void)argc;
  return refused_arena_commit(strtoull(argv[2], NULL, 0));
}
