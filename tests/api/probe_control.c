/* nic_probe: the control heap: huge blocks, frees, and a full arena. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "probe_common.h"
#include "proc_kb.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

/* Fills and frees a block of size bytes, waits, allocates the same size again: kept_bytes says
 * whether the old contents are still there (the huge cache kept the block, huge_cache.h). */
static int huge_reuse(size_t size, unsigned sleep_ms) {
  unsigned char *p = malloc(size);
  if (!p) return 1;
  memset(p, 0xab, size);
  free(p);
  usleep(sleep_ms * 1000u);
  unsigned char *q = malloc(size);
  if (!q) return 1;
  printf("kept_bytes=%d\n", q == p && q[0] == 0xab && q[size - 1] == 0xab);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("huge_hits=%llu\nhuge_purged=%llu\n", (unsigned long long)s.huge_hits,
         (unsigned long long)s.huge_purged);
  free(q);
  return 0;
}

/* Control frees as NICMALLOC_FREE_CHECK=0 runs them: a freed block is handed out again, and a
 * cached registration covering a freed block is dropped. */
static int control_frees(void) {
  /* 100,000 pairs span 6.4 MB unless freed blocks come back */
  uintptr_t low = UINTPTR_MAX, high = 0;
  for (int i = 0; i < 100000; i++) {
    char *p = malloc(64);
    if (!p) return 1;
    low = (uintptr_t)p < low ? (uintptr_t)p : low;
    high = (uintptr_t)p > high ? (uintptr_t)p : high;
    free(p);
  }
  printf("span=%llu\n", (unsigned long long)(high - low));
  char *b = malloc(3000);
  memset(b, 1, 3000);
  struct nic_region_ref ref;
  const int rc = nic_register(b, 3000, NIC_REG_LOCAL, &ref);
  if (rc == 0) nic_unregister(&ref);
  struct nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  free(b);
  nic_get_stats(&after);
  printf("register_rc=%d\ninvalidations=%llu\n", rc,
         (unsigned long long)(after.rcache_invalidations - before.rcache_invalidations));
  return 0;
}

/* Bytes mapped writable inside mimalloc's first arena (the one MIMALLOC_RESERVE_OS_MEMORY makes
 * before nicmalloc starts), or -1 when there is none. Asked through dlsym: the probe links no
 * mimalloc. */
static long long first_arena_writable(void) {
  void *(*area)(int, size_t *) = (void *(*)(int, size_t *))dlsym(RTLD_DEFAULT, "mi_arena_area");
  size_t size = 0;
  const uintptr_t start = area ? (uintptr_t)area(1, &size) : 0;
  if (!start) return -1;
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  long long writable = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo >= start && hi <= start + size &&
        perms[1] == 'w')
      writable += (long long)(hi - lo);
  }
  if (f) fclose(f);
  return writable;
}

/* Blocks of 16 B to 8 MiB, all freed: how many the free check refused, and how many lay where no
 * arena of nicmalloc's is (above the 20 TiB mimalloc's map covers). */
static int mixed_frees(void) {
  enum { N = 2000 };
  static void *blocks[N];
  unsigned high = 0;
  for (int i = 0; i < N; i++) {
    blocks[i] = malloc((size_t)16 << (i % 20));
    if (!blocks[i]) return 1;
    memset(blocks[i], 7, 16);
    if ((uintptr_t)blocks[i] >= ((uintptr_t)20 << 40)) high++;
  }
  for (int i = 0; i < N; i++)
    free(blocks[i]);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("blocks=%d\nabove_20tib=%u\ninvalid_frees=%llu\ndouble_frees=%llu\n"
         "first_arena_writable=%lld\n",
         N, high, (unsigned long long)s.invalid_frees, (unsigned long long)s.double_frees,
         first_arena_writable());
  return 0;
}

static long resident_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* malloc(1 MiB), 2 MiB, 4 MiB ... up to max, each written at its first and last byte and
 * freed: such blocks must cost address space, not memory. Prints the most the resident set
 * grew while a block was live. Skips (grow_skipped=REASON) where the kernel would refuse such a
 * block to any allocator: an address-space limit, or strict overcommit. */
static int grow_untouched(size_t max) {
  void *room =
      mmap(NULL, max, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (room == MAP_FAILED) {
    printf("grow_skipped=a mapping of %zu bytes is refused here: %s\n", max, strerror(errno));
    return 0;
  }
  munmap(room, max);
  const long start = resident_kib();
  long grown = 0;
  unsigned blocks = 0, usable = 0;
  for (size_t size = (size_t)1 << 20; size <= max; size *= 2) {
    unsigned char *p = malloc(size);
    if (!p) {
      /* Refused where the kernel refuses an accounted mapping of the size (glibc's malloc maps
       * its large blocks so): larger than memory and swap under the overcommit heuristic. */
      void *plain = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (plain == MAP_FAILED) {
        printf("grow_refused_at=%zu\n", size);
        break;
      }
      munmap(plain, size);
      printf("grow_failed_at=%zu\n", size);
      break;
    }
    blocks++;
    p[0] = 1;
    p[size - 1] = 2;
    if (p[0] == 1 && p[size - 1] == 2 && malloc_usable_size(p) >= size) usable++;
    const long now = resident_kib();
    if (now - start > grown) grown = now - start;
    free(p);
  }
  printf("grow_blocks=%u\ngrow_usable=%u\ngrow_rss_kib=%ld\n", blocks, usable, grown);
  return 0;
}

/* The usable size of a fresh 17 MiB block, and whether a written 30 MiB block, freed and taken
 * again for 17 MiB, keeps its page at 25 MiB resident; with limit_gib, under that address-space
 * limit: the probe runs itself again so that nicmalloc starts under it. */
static int huge_usable(const char *self, const char *limit_gib) {
  if (limit_gib) {
    const rlim_t bytes = (rlim_t)strtoull(limit_gib, NULL, 0) << 30;
    const struct rlimit limit = {bytes, bytes};
    if (setrlimit(RLIMIT_AS, &limit)) return 1;
    execl(self, self, "huge-usable", (char *)NULL);
    return 1;
  }
  void *p = malloc((size_t)17 << 20);
  if (!p) return 1;
  printf("huge_usable=%zu\n", malloc_usable_size(p));
  free(p);
  nic_collect();
  char *big = malloc((size_t)30 << 20), *again;
  if (!big) return 1;
  memset(big, 1, (size_t)30 << 20);
  free(big);
  if ((again = malloc((size_t)17 << 20)) != big) return 1;
  unsigned char in_core = 0;
  if (mincore(again + ((size_t)25 << 20), 4096, &in_core)) return 1;
  printf("reused_tail_resident=%d\n", in_core & 1);
  free(again);
  return 0;
}

/* A control block of mib MiB, shrunk in place by realloc, then freed: whether nicmalloc took
 * both calls (no error line, the same pointer back). */
static int big_block(size_t mib) {
  char *p = malloc(mib << 20);
  if (!p) return 4;
  p[0] = 1;
  errno = 0;
  char *q = realloc(p, (mib << 20) * 9 / 10);
  printf("realloc_same=%d\nrealloc_errno=%d\n", q == p, errno);
  free(q ? q : p);
  return 0;
}

/* fill-control: fills the control arena with blocks never written, large ones first, until
 * mimalloc refuses even small ones (the sizes malloc's fast path takes): they must come back
 * NULL with ENOMEM, and once the blocks are freed, small ones must be served again. */
static int fill_control(void) {
  static void *blocks[1 << 16];
  static const size_t sizes[] = {(size_t)256 << 20, (size_t)32 << 20, (size_t)4 << 20,
                                 (size_t)256 << 10, (size_t)8 << 10,  64};
  unsigned n = 0;
  for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p;
    while (n < sizeof blocks / sizeof blocks[0] && (p = malloc(sizes[i])))
      blocks[n++] = p;
  }
  errno = 0;
  const int small_null = malloc(64) == NULL, small_errno = errno;
  errno = 0;
  const int tiny_null = malloc(8) == NULL, tiny_errno = errno;
  errno = 0;
  const int calloc_null = calloc(1, 64) == NULL, calloc_errno = errno;
  for (unsigned i = 0; i < n; i++)
    free(blocks[i]);
  void *again = malloc(64);
  printf("blocks=%u\nsmall_null=%d\nsmall_errno=%d\ntiny_null=%d\ntiny_errno=%d\n", n, small_null,
         small_errno, tiny_null, tiny_errno);
  printf("calloc_null=%d\ncalloc_errno=%d\nagain=%d\n", calloc_null, calloc_errno, again != NULL);
  free(again);
  return 0;
}

/* The commands: argv[1] names one, its arguments follow (usage in probe.c). */
int cmd_big_block(int argc, char **argv) {
  (void)argc;
  return big_block(strtoull(argv[2], NULL, 0));
}

int cmd_fill_control(int argc, char **argv) {
  (void)argc, (void)argv;
  return fill_control();
}

int cmd_huge(int argc, char **argv) {
  (void)argc;
  return huge_reuse(strtoull(argv[2], NULL, 0), (unsigned)atoi(argv[3]));
}

int cmd_mixed_frees(int argc, char **argv) {
  (void)argc, (void)argv;
  return mixed_frees();
}

int cmd_control_frees(int argc, char **argv) {
  (void)argc, (void)argv;
  return control_frees();
}

int cmd_grow_untouched(int argc, char **argv) {
  (void)argc;
  return grow_untouched(strtoull(argv[2], NULL, 0));
}

int cmd_huge_usable(int argc, char **argv) {
  return huge_usable(argv[0], argc >= 3 ? argv[2] : NULL);
}

/* glibc's own names for its allocator, declared by no header. */
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *p);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);
extern int __posix_memalign(void **out, size_t alignment, size_t size);

/* Blocks crossing between the standard names and glibc's: each allocation is ours (ours=1 counts
 * those nic_is_dataplane calls dataplane, which under NICMALLOC_DP_MIN_SIZE=64 is every one),
 * freed through the other family; then a double free through __libc_free, reported. */
static int libc_names(void) {
  const long page = sysconf(_SC_PAGESIZE);
  int dataplane = 0, aligned = 1, zeroed = 1, kept;
  char *a = malloc(100);
  memset(a, 1, 100);
  __libc_free(a);
  char *b = __libc_malloc(200);
  memset(b, 2, 200);
  dataplane += nic_is_dataplane(b) == 1;
  const size_t usable = malloc_usable_size(b);
  b = realloc(b, 5000);
  free(b);
  char *c = __libc_memalign(64, 100);
  dataplane += nic_is_dataplane(c) == 1;
  aligned &= (uintptr_t)c % 64 == 0;
  free(c);
  char *d = malloc(300);
  memset(d, 3, 300);
  d = __libc_realloc(d, 3000);
  dataplane += nic_is_dataplane(d) == 1;
  kept = d[0] == 3 && d[299] == 3;
  free(d);
  unsigned char *e = __libc_calloc(10, 100);
  dataplane += nic_is_dataplane(e) == 1;
  for (int i = 0; i < 1000; i++)
    zeroed &= e[i] == 0;
  free(e);
  char *f = __libc_valloc(100), *g = __libc_pvalloc(100);
  dataplane += (nic_is_dataplane(f) == 1) + (nic_is_dataplane(g) == 1);
  aligned &= (uintptr_t)f % (uintptr_t)page == 0 && (uintptr_t)g % (uintptr_t)page == 0;
  free(f);
  free(g);
  void *h = NULL;
  const int rc = __posix_memalign(&h, 128, 100);
  dataplane += h && nic_is_dataplane(h) == 1;
  aligned &= (uintptr_t)h % 128 == 0;
  free(h);
  char *x = malloc(100);
  free(x);
  __libc_free(x);
  printf("usable_ok=%d\naligned=%d\nkept=%d\nzeroed=%d\ndataplane=%d\nposix_rc=%d\n", usable >= 200,
         aligned, kept, zeroed, dataplane, rc);
  return 0;
}

int cmd_libc_names(int argc, char **argv) {
  (void)argc, (void)argv;
  return libc_names();
}

/* Calls that succeed, counted where they changed errno (set to a marker before each), on this
 * thread and four more; then a refused malloc (ENOMEM) and realloc(p, 0), which frees. */
enum { ERRNO_MALLOC, ERRNO_REALLOC, ERRNO_FREE, ERRNO_CALLOC, ERRNO_ALIGNED, ERRNO_KINDS };
static int errno_changed[ERRNO_KINDS];
#define ERRNO_KEPT(kind, call)                                                                     \
  do {                                                                                             \
    errno = EDOM;                                                                                  \
    call;                                                                                          \
    if (errno != EDOM) __atomic_add_fetch(&errno_changed[kind], 1, __ATOMIC_RELAXED);              \
  } while (0)

static void errno_rounds(int rounds, size_t size) {
  for (int i = 0; i < rounds; i++) {
    char *p, *q = NULL;
    ERRNO_KEPT(ERRNO_MALLOC, p = malloc(size + (size_t)(i % 7) * 1000));
    if (!p) continue;
    p[0] = 1;
    ERRNO_KEPT(ERRNO_REALLOC, q = realloc(p, size * 2 + 100));
    ERRNO_KEPT(ERRNO_FREE, free(q ? q : p));
    ERRNO_KEPT(ERRNO_CALLOC, p = calloc(1, size));
    ERRNO_KEPT(ERRNO_FREE, free(p));
    ERRNO_KEPT(ERRNO_ALIGNED, p = aligned_alloc(4096, size));
    ERRNO_KEPT(ERRNO_FREE, free(p));
  }
}

static void *errno_thread(void *arg) {
  (void)arg;
  errno_rounds(500, 3000);
  return NULL;
}

static int errno_kept(void) {
  errno_rounds(5000, 24);
  errno_rounds(10, 20u << 20);
  pthread_t threads[4];
  for (int i = 0; i < 4; i++)
    if (pthread_create(&threads[i], NULL, errno_thread, NULL)) return 1;
  for (int i = 0; i < 4; i++)
    pthread_join(threads[i], NULL);
  errno = EDOM;
  void *refused = malloc(SIZE_MAX / 2);
  const int refused_errno = errno;
  char *p = malloc(100);
  errno = EDOM;
  void *freed = realloc(p, 0);
  const int freed_errno = errno;
  printf("malloc_changed=%d\nrealloc_changed=%d\nfree_changed=%d\ncalloc_changed=%d\n"
         "aligned_changed=%d\nrefused=%d\nrefused_enomem=%d\nrealloc0_kept=%d\n",
         errno_changed[ERRNO_MALLOC], errno_changed[ERRNO_REALLOC], errno_changed[ERRNO_FREE],
         errno_changed[ERRNO_CALLOC], errno_changed[ERRNO_ALIGNED], refused == NULL,
         refused_errno == ENOMEM, freed == NULL && freed_errno == EDOM);
  return 0;
}

int cmd_errno_kept(int argc, char **argv) {
  (void)argc, (void)argv;
  return errno_kept();
}

/* Requests larger than the machine's memory and swap together: under the kernel's default
 * overcommit heuristic glibc's malloc gets NULL for them (its mmap is refused), and so must
 * ours, rather than a block whose writing calls the OOM killer. */
static int too_large(void) {
  FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
  int mode = -1;
  if (!f || fscanf(f, "%d", &mode) != 1) mode = -1;
  if (f) fclose(f);
  const long mem_kib = nic_proc_kb("/proc/meminfo", "MemTotal:"),
             swap_kib = nic_proc_kb("/proc/meminfo", "SwapTotal:");
  if (mem_kib <= 0) return 1;
  const size_t huge = (size_t)2 * (size_t)(mem_kib + (swap_kib > 0 ? swap_kib : 0)) * 1024;
  errno = 0;
  void *m = malloc(huge);
  const int malloc_errno = errno;
  void *c = calloc(huge / 4096, 4096);
  char *keep = malloc((size_t)1 << 30); /* a mapped block, grown by realloc to the same size */
  if (!keep) return 1;
  keep[0] = 5;
  char *grown = realloc(keep, huge);
  const int kept = (grown ? grown : keep)[0] == 5;
  printf("overcommit_mode=%d\nmalloc_refused=%d\nmalloc_enomem=%d\ncalloc_refused=%d\n"
         "realloc_refused=%d\nkept=%d\n",
         mode, m == NULL, malloc_errno == ENOMEM, c == NULL, grown == NULL, kept);
  free(grown ? grown : keep);
  free(m);
  free(c);
  return 0;
}

int cmd_too_large(int argc, char **argv) {
  (void)argc, (void)argv;
  return too_large();
}

/* A block whose first page the program made PROT_NONE (a guard page on a stack it allocated)
 * freed without making it readable again; then a pointer into memory that is no block. */
static int guarded_free(void) {
  const long page = sysconf(_SC_PAGESIZE);
  void *stack = NULL;
  if (posix_memalign(&stack, (size_t)page, 256 << 10)) return 1;
  memset(stack, 1, 256 << 10);
  if (mprotect(stack, (size_t)page, PROT_NONE)) return 1;
  free(stack);
  static char not_a_block[64];
  free(not_a_block + 16);
  puts("survived=1");
  return 0;
}

int cmd_guarded_free(int argc, char **argv) {
  (void)argc, (void)argv;
  return guarded_free();
}

/* count frees and reallocs of pointers that are no block, then a double free: how many were
 * counted. */
int cmd_bad_frees(int argc, char **argv) {
  (void)argc;
  const long count = atol(argv[2]);
  static char not_a_block[64];
  for (long i = 0; i < count; i++)
    if (i % 2)
      free(not_a_block + 16);
    else if (realloc(not_a_block + 16, 100))
      return 1;
  char *block = malloc(100);
  if (!block) return 1;
  free(block);
  free(block);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("invalid_frees=%llu\ndouble_frees=%llu\n", (unsigned long long)s.invalid_frees,
         (unsigned long long)s.double_frees);
  return 0;
}

/* Run under Valgrind by the test: the program's own blocks, then (with "nic") a block of
 * nicmalloc's API; the address space the process holds (Valgrind's and the program's). */
static int valgrind_run(bool nic) {
  char *block = malloc(100);
  if (!block) return 1;
  memset(block, 1, 100);
  free(block);
  if (nic) {
    char *dp = nic_malloc(4096);
    if (!dp) return 1;
    memset(dp, 2, 4096);
    nic_free(dp);
  }
  printf("vm_kb=%ld\n", nic_proc_kb("/proc/self/status", "VmSize:"));
  puts("done=1");
  return 0;
}

int cmd_valgrind_run(int argc, char **argv) {
  return valgrind_run(argc > 2 && !strcmp(argv[2], "nic"));
}
