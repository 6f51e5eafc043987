/* nic_probe: RLIMIT_MEMLOCK without CAP_IPC_LOCK, and pins the kernel refuses. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "probe_common.h"

#include <grp.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int low_memlock(size_t block) {
  if (!memlock_limit_set(64 << 10)) return 3;
  errno = 0;
  void *p = nic_malloc(block);
  printf("got=%d\nis_dp=%d\nerrno=%d\n", p != NULL, p ? nic_is_dataplane(p) : 0, errno);
  if (p) {
    memset(p, 0x5a, block);
    free(p);
  }
  print_stats("");
  return 0;
}

/* Without CAP_IPC_LOCK under RLIMIT_MEMLOCK of limit bytes: total bytes of dataplane blocks, each
 * registered with the backend; how many blocks could be, and what is locked. */
static int memlock_steps(size_t limit, size_t total, size_t block) {
  if (!memlock_limit_set(limit)) return 3;
  size_t n = total / block, dp = 0, registered = 0;
  void **blocks = calloc(n, sizeof *blocks);
  for (size_t i = 0; i < n; i++) {
    blocks[i] = nic_malloc(block);
    if (!blocks[i] || !nic_is_dataplane(blocks[i])) continue;
    dp++;
    memset(blocks[i], (int)i, block);
    /* Each step is its own registration: a block across a step end is registered per step. */
    struct nic_stats s = NIC_STATS_INIT;
    nic_get_stats(&s);
    const uintptr_t step = s.pin_step;
    bool all = true;
    for (uintptr_t a = (uintptr_t)blocks[i], end = a + block; a < end;) {
      const uintptr_t next = (a & ~(step - 1)) + step, stop = next < end ? next : end;
      struct nic_region_ref ref;
      if (nic_register((void *)a, stop - a, NIC_REG_LOCAL, &ref) != 0 || !ref.lkey) all = false;
      a = stop;
    }
    registered += all;
  }
  printf("dp=%zu\nregistered=%zu\n", dp, registered);
  print_stats("");
  for (size_t i = 0; i < n; i++)
    free(blocks[i]);
  free(blocks);
  return 0;
}

/* Many requests under the same limits: how often a refused pin is retried, and how many
 * warnings that costs. */
static int low_memlock_fill(size_t total, size_t block) {
  if (!memlock_limit_set(64 << 10)) return 3;
  return dp_alloc(total, block);
}

/* One dataplane request as mode says: malloc, calloc, aligned (1 MiB), aligned32m (past what
 * mimalloc aligns: cut from a larger block) or realloc (a
 * 1 MiB dataplane block grown to size, which must keep its bytes when the growth is refused). */
static char *dp_request(const char *mode, size_t size, int *intact) {
  *intact = 1;
  if (!strcmp(mode, "calloc")) return nic_calloc(1, size);
  if (!strcmp(mode, "aligned")) return nic_aligned_alloc(1 << 20, size);
  if (!strcmp(mode, "aligned32m")) return nic_aligned_alloc(32 << 20, size);
  if (strcmp(mode, "realloc")) return nic_malloc(size);
  const size_t small = 1 << 20;
  unsigned char *old = nic_malloc(small);
  if (!old) return NULL;
  memset(old, 0x3c, small);
  char *p = realloc(old, size);
  if (p) return p;
  const int err = errno;
  for (size_t i = 0; i < small; i++)
    *intact &= old[i] == 0x3c;
  free(old);
  errno = err;
  return NULL;
}

/* pin-refused LIMIT SIZE COUNT MODE [WAIT_MS]: count dataplane requests of size bytes
 * (dp_request's mode) beside a small block that maps the first chunk. LIMIT, unless 0, is
 * RLIMIT_MEMLOCK without CAP_IPC_LOCK. Every block handed out is written whole (a calloc'ed one
 * checked zero first) and kept. Then, with WAIT_MS, up to that long for a step to be given back:
 * one a refused request backed and left. */
static int pin_refused(size_t limit, size_t size, unsigned count, const char *mode,
                       unsigned wait_ms) {
  if (limit && !memlock_limit_set(limit)) return 3;
  char *keep = nic_malloc(64);
  printf("keep_dp=%d\n", keep && nic_is_dataplane(keep));
  unsigned got = 0, dp = 0, nulls = 0, nonzero = 0, intact = 1;
  int first_errno = 0;
  char **blocks = calloc(count, sizeof *blocks);
  for (unsigned i = 0; i < count; i++) {
    errno = 0;
    int kept = 1;
    char *p = blocks[i] = dp_request(mode, size, &kept);
    intact &= (unsigned)kept;
    if (!p) {
      nulls++;
      if (!first_errno) first_errno = errno;
      continue;
    }
    got++;
    dp += nic_is_dataplane(p);
    if (!strcmp(mode, "calloc"))
      for (size_t off = 0; off < size; off += 4096)
        nonzero += p[off] != 0;
    memset(p, (int)i + 1, size);
  }
  printf("got=%u\ndp=%u\nnulls=%u\nerrno=%d\nnonzero=%u\nintact=%u\nin_segments=%zu\n", got, dp,
         nulls, first_errno, nonzero, intact, stats_now().dataplane_in_use);
  print_stats("");
  const uint64_t deadline = probe_now_ms() + wait_ms;
  while (wait_ms && stats_now().steps_released == 0 && probe_now_ms() < deadline)
    usleep(10000);
  struct nic_stats s = stats_now();
  printf("steps_released=%llu\nafter_pinned=%zu\n", (unsigned long long)s.steps_released,
         s.dataplane_pinned);
  for (unsigned i = 0; i < count; i++)
    free(blocks[i]);
  free(blocks);
  free(keep);
  return 0;
}

/* Registers n dataplane blocks under the same limits: with a backend that pins (uring), the
 * chunk's registration is refused; how often it is asked for again, and warned about. */
static int low_memlock_register(unsigned n, size_t block) {
  if (!memlock_limit_set(64 << 10)) return 3;
  unsigned failures = 0;
  int first_rc = 0;
  for (unsigned i = 0; i < n; i++) {
    void *p = nic_malloc(block);
    struct nic_region_ref ref;
    int rc = p ? nic_register(p, block, 0, &ref) : -ENOMEM;
    if (rc && !failures++) first_rc = rc;
    if (!rc) nic_unregister(&ref);
    free(p);
  }
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("register_failures=%u\nfirst_rc=%d\nbackend=%s\n", failures, first_rc, s.backend);
  return 0;
}

/* One dataplane entry added to a scatter-gather array under kib KiB of RLIMIT_MEMLOCK without
 * CAP_IPC_LOCK: too little for io_uring to pin the chunk, enough for a bounce slab. */
static int low_memlock_sga(rlim_t kib, size_t block) {
  if (!memlock_limit_set(kib << 10)) return 3;
  char *p = nic_malloc(block);
  struct nic_sga sga;
  if (!p || nic_sga_init(&sga, 0)) return 4;
  memset(p, 0x5a, block);
  int rc = nic_sga_add(&sga, p, block);
  int copied =
      rc == 0 && sga.count == 1 && sga.entry[0].addr != p && !memcmp(sga.entry[0].addr, p, block);
  nic_sga_reset(&sga);
  free(p);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("add_rc=%d\ncopied=%d\nbackend=%s\n", rc, copied, s.backend);
  return 0;
}

/* Under limit bytes of RLIMIT_MEMLOCK without CAP_IPC_LOCK, n registrations of small bytes each
 * (apart, so not merged) are cached and let go; then one of big bytes, and the small ones again.
 * Prints what the big one got and what it cost the cache. */
static int memlock_rcache(size_t limit, unsigned n, size_t small, size_t big) {
  if (!memlock_limit_set(limit)) return 3;
  const size_t apart = small + 4096;
  char *smalls = mmap(NULL, n * apart, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *large = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (smalls == MAP_FAILED || large == MAP_FAILED) return 4;
  memset(smalls, 1, n * apart);
  memset(large, 2, big);
  struct nic_region_ref ref;
  unsigned small_failures = 0;
  for (unsigned i = 0; i < n; i++)
    if (nic_register(smalls + i * apart, small, 0, &ref) == 0)
      nic_unregister(&ref);
    else
      small_failures++;
  const struct nic_stats before = stats_now();
  const int big_rc = nic_register(large, big, 0, &ref);
  if (big_rc == 0) nic_unregister(&ref);
  const struct nic_stats after = stats_now();
  for (unsigned i = 0; i < n; i++)
    if (nic_register(smalls + i * apart, small, 0, &ref) == 0) nic_unregister(&ref);
  const struct nic_stats again = stats_now();
  printf("small_failures=%u\nbig_rc=%d\nregions_before=%u\nregions_after=%u\n"
         "evictions=%llu\nhits_again=%llu\nbackend=%s\n",
         small_failures, big_rc, before.rcache_regions, after.rcache_regions,
         (unsigned long long)(after.rcache_evictions - before.rcache_evictions),
         (unsigned long long)(again.rcache_hits - after.rcache_hits), again.backend);
  return 0;
}

/* The commands: argv[1] names one, its arguments follow (usage in probe.c). */
int cmd_low_memlock(int argc, char **argv) {
  (void)argc;
  return low_memlock(strtoull(argv[2], NULL, 0));
}

int cmd_low_memlock_fill(int argc, char **argv) {
  (void)argc;
  return low_memlock_fill(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
}

int cmd_memlock_steps(int argc, char **argv) {
  (void)argc;
  return memlock_steps(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0),
                       strtoull(argv[4], NULL, 0));
}

/* Under a limit of two steps, two threads each take a step for a block they free before they
 * exit; then this thread's block lands in a step that cannot be locked. Once the threads' steps
 * went back, the block is registered (its step faulted in whole first). Prints the steps backed
 * and locked before and after. */
static void *take_a_step(void *arg) {
  (void)arg;
  char *p = nic_malloc(256);
  if (p) memset(p, 1, 256);
  free(p);
  return NULL;
}

static unsigned steps_backed_now(const struct nic_stats *s) {
  return (unsigned)(s->steps_backed - s->steps_released);
}

static int repin(size_t limit, unsigned wait_ms) {
  if (!memlock_limit_set(limit)) return 3;
  for (int i = 0; i < 2; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, take_a_step, NULL)) return 1;
    pthread_join(t, NULL);
  }
  char *block = nic_malloc(1 << 20);
  if (!block || !nic_is_dataplane(block)) return 1;
  memset(block, 2, 1 << 20);
  const struct nic_stats full = stats_now();
  printf("backed_full=%u\npinned_full=%u\n", steps_backed_now(&full), full.steps_pinned);
  const uint64_t deadline = probe_now_ms() + wait_ms;
  while (stats_now().steps_released == 0 && probe_now_ms() < deadline) {
    nic_collect(); /* visits the exited threads' empty segments, which lets their steps go */
    usleep(10000);
  }
  const struct nic_stats before = stats_now();
  struct nic_region_ref ref;
  const int rc = nic_register(block, 1 << 20, 0, &ref);
  const struct nic_stats after = stats_now();
  printf("released=%llu\nregister_rc=%d\nbacked_before=%u\npinned_before=%u\n"
         "backed_after=%u\npinned_after=%u\n",
         (unsigned long long)before.steps_released, rc, steps_backed_now(&before),
         before.steps_pinned, steps_backed_now(&after), after.steps_pinned);
  free(block);
  return 0;
}

int cmd_repin(int argc, char **argv) {
  (void)argc;
  return repin(strtoull(argv[2], NULL, 0), (unsigned)atoi(argv[3]));
}

int cmd_pin_refused(int argc, char **argv) {
  return pin_refused(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0),
                     (unsigned)atoi(argv[4]), argv[5], argc >= 7 ? (unsigned)atoi(argv[6]) : 0);
}

int cmd_low_memlock_register(int argc, char **argv) {
  (void)argc;
  return low_memlock_register((unsigned)atoi(argv[2]), strtoull(argv[3], NULL, 0));
}

int cmd_low_memlock_sga(int argc, char **argv) {
  (void)argc;
  return low_memlock_sga(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
}

/* A user's program (uid nobody when started as root) under an RLIMIT_MEMLOCK of 16 KiB, the
 * backend left to auto: the first array picks one. Prints what it picked; the test reads stderr
 * for lines of libraries nobody asked to load (libibverbs warns of such a limit as it starts). */
int cmd_user_auto_sga(int argc, char **argv) {
  (void)argc, (void)argv;
  const struct rlimit lim = {16 << 10, 16 << 10};
  if (setrlimit(RLIMIT_MEMLOCK, &lim) ||
      (geteuid() == 0 &&
       (setgroups(0, NULL) || setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534)))) {
    printf("setup_failed=%d\n", errno);
    return 0;
  }
  struct nic_sga sga;
  const int rc = nic_sga_init(&sga, 0);
  if (rc == 0) nic_sga_reset(&sga);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("setup_failed=0\ninit=%d\nbackend=%s\n", rc, s.backend);
  return 0;
}

int cmd_memlock_rcache(int argc, char **argv) {
  (void)argc;
  return memlock_rcache(strtoull(argv[2], NULL, 0), (unsigned)atoi(argv[3]),
                        strtoull(argv[4], NULL, 0), strtoull(argv[5], NULL, 0));
}
