/* nic_probe: runs one allocation scenario under whatever NICMALLOC_* settings its environment
 * holds and prints key=value lines for the test that spawned it. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "proc_kb.h"
#include "refuse_syscall.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* What the kernel says is locked (VmLck, in KiB), or -1. */
static long vmlck_kb(void) {
  return nic_proc_kb("/proc/self/status", "VmLck:");
}

static void print_stats(const char *prefix) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("%schunks_live=%u\n%schunks_created=%llu\n%schunks_released=%llu\n", prefix, s.chunks_live,
         prefix, (unsigned long long)s.chunks_created, prefix,
         (unsigned long long)s.chunks_released);
  printf("%spinned=%zu\n%smapped=%zu\n%slive=%zu\n%scontrol=%zu\n", prefix, s.dataplane_pinned,
         prefix, s.dataplane_mapped, prefix, s.dataplane_live, prefix, s.control_committed);
  printf("%svmlck_kb=%ld\n%sdp_dropped=%zu\n", prefix, vmlck_kb(), prefix, s.dataplane_dropped);
  printf("%spage_kind=%s\n%spage_fallbacks=%llu\n%spin_failures=%llu\n", prefix,
         nic_page_kind_name(s.page_kind), prefix, (unsigned long long)s.page_fallbacks, prefix,
         (unsigned long long)s.pin_failures);
  printf("%sdp_fallbacks=%llu\n%sdp_failures=%llu\n%schunk_size=%zu\n%schunks_max=%u\n", prefix,
         (unsigned long long)s.dataplane_fallbacks, prefix,
         (unsigned long long)s.dataplane_failures, prefix, s.chunk_size, prefix, s.chunks_max);
  printf("%spin_step=%zu\n%ssteps_pinned=%u\n%ssteps_backed=%llu\n%sbacked=%zu\n", prefix,
         s.pin_step, prefix, s.steps_pinned, prefix, (unsigned long long)s.steps_backed, prefix,
         s.dataplane_backed);
}

/* Allocates total bytes in blocks of block bytes with nic_malloc; counts where they landed. */
static int dp_alloc(size_t total, size_t block) {
  size_t n = total / block, dp = 0, nulls = 0, control = 0;
  void **blocks = calloc(n, sizeof *blocks);
  int first_errno = 0;
  for (size_t i = 0; i < n; i++) {
    errno = 0;
    blocks[i] = nic_malloc(block);
    if (!blocks[i]) {
      nulls++;
      if (!first_errno) first_errno = errno;
    } else {
      memset(blocks[i], (int)i, block);
      if (nic_is_dataplane(blocks[i]))
        dp++;
      else
        control++;
    }
  }
  printf("dp=%zu\ncontrol_blocks=%zu\nnulls=%zu\nerrno=%d\n", dp, control, nulls, first_errno);
  print_stats("");
  for (size_t i = 0; i < n; i++)
    free(blocks[i]);
  free(blocks);
  print_stats("after_free_");
  return 0;
}

/* One dataplane block written and registered: whether the registration was handed out, and
 * whether the block kept its bytes. */
static int dp_register(size_t size) {
  char *p = nic_malloc(size);
  if (!p || !nic_is_dataplane(p)) {
    printf("dp=0\n");
    return 0;
  }
  memset(p, 0x5a, size);
  struct nic_region_ref ref;
  const int rc = nic_register(p, size, NIC_REG_LOCAL, &ref);
  int intact = 1;
  for (size_t i = 0; i < size; i++)
    intact &= p[i] == 0x5a;
  printf("dp=1\nregister_rc=%d\nintact=%d\n", rc, intact);
  print_stats("");
  if (rc == 0) nic_unregister(&ref);
  free(p);
  return 0;
}

/* Bytes the process has read so far (rchar of /proc/self/io), or -1. */
static long long read_bytes(void) {
  FILE *f = fopen("/proc/self/io", "r");
  if (!f) return -1;
  char line[128];
  long long n = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "rchar:", 6)) n = strtoll(line + 6, NULL, 10);
  fclose(f);
  return n;
}

/* The size of one read of /proc/self/smaps. */
static long long smaps_bytes(void) {
  int fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[65536];
  long long total = 0;
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    total += n;
  close(fd);
  return total;
}

/* The first dataplane allocation of a process with many mappings (vmas one-page mappings that
 * the kernel cannot merge): the bytes it read, against what one walk of the process's mappings
 * reads. */
static int first_dp_reads(unsigned vmas) {
  for (unsigned i = 0; i < vmas; i++)
    if (mmap(NULL, 4096, i % 2 ? PROT_READ : PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
             -1, 0) == MAP_FAILED)
      return 3;
  free(malloc(64)); /* the control heap is up: only the dataplane's first step is left */
  const long long before = read_bytes();
  void *p = nic_malloc(64);
  const long long after = read_bytes();
  printf("dp=%d\nread_bytes=%lld\nsmaps_bytes=%lld\n", p && nic_is_dataplane(p), after - before,
         smaps_bytes());
  print_stats("");
  free(p);
  return 0;
}

/* At the cap (run it with a small NICMALLOC_MAX_CHUNKS and NICMALLOC_ON_PIN_FAIL=fail): fills
 * every chunk with block-byte blocks, then checks that room made afterwards is found, both the
 * thread's own free in its current chunk (at once, even after a free elsewhere) and a chunk
 * emptied behind it (after a pause). Prints the counts and whether each request got dataplane
 * memory. */
static int cap_again(size_t block) {
  size_t cap = 1 << 22, n = 0;
  void **blocks = calloc(cap, sizeof *blocks);
  while (n < cap && (blocks[n] = nic_malloc(block)) != NULL)
    n++;
  printf("filled=%zu\nfill_errno=%d\n", n, errno);
  if (n < 2 || n == cap) return 1;
  free(blocks[0]); /* first a free outside the current chunk, which makes no room there */
  blocks[0] = NULL;
  free(blocks[--n]);
  void *again = nic_malloc(block);
  printf("own_free_reused=%d\n", again != NULL && nic_is_dataplane(again));
  if (again) blocks[n++] = again;
  /* The same through malloc inside a dataplane scope, which takes another way in. */
  free(blocks[--n]);
  nic_dataplane_begin();
  again = malloc(block);
  nic_dataplane_end();
  printf("scoped_free_reused=%d\n", again != NULL && nic_is_dataplane(again));
  if (again) blocks[n++] = again;
  /* Empty the lowest chunk; the thread allocates from the highest by now. */
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  uintptr_t lowest = UINTPTR_MAX;
  for (size_t i = 0; i < n; i++)
    if (blocks[i] && (uintptr_t)blocks[i] < lowest) lowest = (uintptr_t)blocks[i];
  const uintptr_t chunk0 = lowest & ~((uintptr_t)s.chunk_size - 1);
  size_t freed = 0;
  for (size_t i = 0; i < n; i++)
    if (blocks[i] && (uintptr_t)blocks[i] - chunk0 < s.chunk_size) {
      free(blocks[i]);
      blocks[i] = NULL;
      freed++;
    }
  usleep(20000); /* past the pause a thread takes after finding every chunk full */
  errno = 0;
  void *later = nic_malloc(block);
  printf("freed_chunk0=%zu\nlater_dataplane=%d\nlater_in_chunk0=%d\nlater_errno=%d\n", freed,
         later != NULL && nic_is_dataplane(later), (uintptr_t)later - chunk0 < s.chunk_size, errno);
  free(later);
  for (size_t i = 0; i < n; i++)
    free(blocks[i]);
  free(blocks);
  print_stats("");
  return 0;
}

/* Root ignores RLIMIT_MEMLOCK through CAP_IPC_LOCK; dropping it makes the limit bite. */
static int drop_ipc_lock(void) {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &header, data)) return -1;
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
  return (int)syscall(SYS_capset, &header, data);
}

static int low_memlock(size_t block) {
  struct rlimit lim = {64 << 10, 64 << 10};
  if (setrlimit(RLIMIT_MEMLOCK, &lim) || drop_ipc_lock()) {
    printf("setup_failed=%d\n", errno);
    return 3;
  }
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
  struct rlimit lim = {limit, limit};
  if (setrlimit(RLIMIT_MEMLOCK, &lim) || drop_ipc_lock()) {
    printf("setup_failed=%d\n", errno);
    return 3;
  }
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

static uint64_t probe_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct nic_stats stats_now(void) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

static void drop_message(void *arg, void *data, size_t len) {
  (void)arg, (void)data, (void)len;
}
static int step_posts_done;
static void step_post_done(void *arg, int status) {
  (void)arg, (void)status;
  step_posts_done++;
}

/* A 20 MiB block gets a step of its own beside a small block that keeps the chunk live; it is
 * registered, then freed: after a nic_hold of it (hold 1), or after a post of it to a sim
 * endpoint whose completion nothing polls for yet (hold 2). Waits up to wait_ms for the step to
 * be given back, ends the hold or polls the post's completion, then says what the block's stale
 * pointer translates to and what a new block there gets. */
static int step_release(int hold, unsigned wait_ms) {
  void *keep = nic_malloc(64);
  const size_t big = 20u << 20;
  char *b = nic_malloc(big);
  if (!keep || !b) return 1;
  memset(b, 1, big);
  struct nic_region_ref ref;
  int rc = nic_register(b, 4096, NIC_REG_LOCAL, &ref);
  printf("first_rc=%d\nfirst_lkey=%u\n", rc, ref.lkey);
  printf("pinned_before=%zu\nbacked_before=%zu\n", stats_now().dataplane_pinned,
         stats_now().dataplane_backed);
  if (hold == 1 && nic_hold(b)) return 1;
  struct nic_endpoint *ep = hold == 2 ? nic_sim_endpoint_create(drop_message, NULL, 0) : NULL;
  if (hold == 2) {
    struct nic_sga sga;
    if (!ep || nic_sga_init(&sga, 0) || nic_sga_add(&sga, b, 1 << 20) ||
        nic_sga_post(&sga, ep, step_post_done, NULL))
      return 1;
  }
  free(b);
  const uint64_t deadline = probe_now_ms() + wait_ms;
  while (stats_now().steps_released == 0 && probe_now_ms() < deadline)
    usleep(10000);
  printf("released_while_held=%llu\n", (unsigned long long)stats_now().steps_released);
  if (hold) {
    if (hold == 1) nic_release(b);
    while (hold == 2 && !step_posts_done)
      nic_poll(0);
    const uint64_t again = probe_now_ms() + 10000;
    while (stats_now().steps_released == 0 && probe_now_ms() < again)
      usleep(10000);
  }
  struct nic_stats s = stats_now();
  printf("released=%llu\npinned_after=%zu\nbacked_after=%zu\nvmlck_after_kb=%ld\n",
         (unsigned long long)s.steps_released, s.dataplane_pinned, s.dataplane_backed, vmlck_kb());
  rc = nic_translate(b, 4096, &ref);
  printf("stale_rc=%d\nstale_lkey=%u\n", rc, ref.lkey);
  char *c = nic_malloc(big);
  if (!c) return 1;
  memset(c, 2, big);
  printf("same_place=%d\n", c == b);
  rc = nic_register(c, 4096, NIC_REG_LOCAL, &ref);
  printf("again_rc=%d\nagain_lkey=%u\n", rc, ref.lkey);
  printf("pinned_again=%zu\nbacked_again=%zu\n", stats_now().dataplane_pinned,
         stats_now().dataplane_backed);
  free(c);
  free(keep);
  return 0;
}

/* Many requests under the same limits: how often a refused pin is retried, and how many
 * warnings that costs. */
static int low_memlock_fill(size_t total, size_t block) {
  struct rlimit lim = {64 << 10, 64 << 10};
  if (setrlimit(RLIMIT_MEMLOCK, &lim) || drop_ipc_lock()) {
    printf("setup_failed=%d\n", errno);
    return 3;
  }
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
  if (limit) {
    struct rlimit lim = {limit, limit};
    if (setrlimit(RLIMIT_MEMLOCK, &lim) || drop_ipc_lock()) {
      printf("setup_failed=%d\n", errno);
      return 3;
    }
  }
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
  struct rlimit lim = {64 << 10, 64 << 10};
  if (setrlimit(RLIMIT_MEMLOCK, &lim) || drop_ipc_lock()) {
    printf("setup_failed=%d\n", errno);
    return 3;
  }
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
  struct rlimit lim = {kib << 10, kib << 10};
  if (setrlimit(RLIMIT_MEMLOCK, &lim) || drop_ipc_lock()) {
    printf("setup_failed=%d\n", errno);
    return 3;
  }
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

/* A child forked after dataplane chunks exist reads the parent's blocks, frees one and
 * allocates from both heaps; its first write to a chunk page is a copy-on-write fault. */
static int fork_child(size_t block) {
  unsigned char *a = nic_malloc(block), *b = nic_malloc(block);
  if (!a || !b) {
    printf("setup_failed=%d\n", errno);
    return 3;
  }
  memset(a, 0x11, block);
  memset(b, 0x22, block);
  print_stats("before_fork_");
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30); /* a deadlock becomes SIGALRM */
    int ok = a[0] == 0x11 && a[block - 1] == 0x11 && b[0] == 0x22;
    free(b);
    unsigned char *c = nic_malloc(block), *d = malloc(block);
    if (!c || !d) _exit(4);
    memset(c, 0x33, block);
    memset(d, 0x44, block);
    free(c);
    free(d);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) {
    printf("fork_failed=%d\n", errno);
    return 3;
  }
  printf("child_exit=%d\nchild_signal=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
         WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  int intact = a[0] == 0x11 && a[block - 1] == 0x11 && b[0] == 0x22 && b[block - 1] == 0x22;
  memset(a, 0x55, block); /* the parent still writes its own pages */
  printf("parent_intact=%d\n", intact);
  free(a);
  free(b);
  print_stats("");
  return 0;
}

/* A number from a sysfs file, or 0. */
static long read_long(const char *path) {
  FILE *f = fopen(path, "r");
  long v = 0;
  if (f && fscanf(f, "%ld", &v) != 1) v = 0;
  if (f) fclose(f);
  return v;
}

/* The race a fork handler in the child cannot close: right after each fork the parent writes
 * every 4 KiB page of its blocks (on hugetlb steps, a copy-on-write of each huge page the child
 * shares; with the pool empty the kernel takes the page from the child, which dies of SIGBUS at
 * its next touch), then tells the child, which reads every page (it must see the bytes of the
 * fork), frees and allocates. Counts the children that died or read wrong bytes. */
static int fork_write_race(unsigned rounds, size_t total, size_t block, bool register_first) {
  const size_t n = total / block, page = 4096;
  unsigned char **blocks = calloc(n, sizeof *blocks);
  if (!blocks) return 3;
  signal(SIGPIPE, SIG_IGN); /* a child that died before reading the pipe */
  for (size_t i = 0; i < n; i++) {
    blocks[i] = nic_malloc(block);
    if (!blocks[i]) {
      printf("setup_failed=%d\n", errno);
      return 3;
    }
    memset(blocks[i], 1, block);
  }
  if (register_first) { /* pins the step with the backend (io_uring: FOLL_PIN) */
    struct nic_region_ref ref;
    printf("register_rc=%d\n", nic_register(blocks[0], block, 0, &ref));
  }
  print_stats("before_fork_");
  /* The race needs the pool empty: the free pages of others are held meanwhile (not inherited,
   * so that only the blocks' pages are shared). */
  const size_t huge = 2ul << 20;
  const long avail = read_long("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages") -
                     read_long("/sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages");
  size_t ballast_len = avail > 0 ? (size_t)avail * huge : 0;
  void *ballast = ballast_len
                      ? mmap(NULL, ballast_len, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0)
                      : MAP_FAILED;
  if (ballast == MAP_FAILED)
    ballast_len = 0;
  else
    madvise(ballast, ballast_len, MADV_DONTFORK);
  printf("ballast_pages=%zu\n", ballast_len / huge);
  fflush(stdout);
  unsigned deaths = 0, sigbus = 0, wrong = 0, fork_failures = 0;
  unsigned char at_fork = 1;
  for (unsigned r = 0; r < rounds; r++, at_fork ^= 0xff) {
    int fds[2];
    if (pipe(fds)) return 3;
    pid_t pid = fork();
    if (pid == 0) {
      alarm(30); /* a deadlock becomes SIGALRM */
      close(fds[1]);
      char go;
      if (read(fds[0], &go, 1) != 1) _exit(5);
      int ok = 1;
      for (size_t i = 0; i < n; i++)
        for (size_t off = 0; off < block; off += page)
          ok &= blocks[i][off] == at_fork;
      free(blocks[0]);
      unsigned char *c = nic_malloc(block);
      if (!c) _exit(4);
      memset(c, 0x33, block);
      free(c);
      _exit(ok ? 0 : 1);
    }
    close(fds[0]);
    if (pid < 0) {
      fork_failures++;
      close(fds[1]);
      continue;
    }
    for (size_t i = 0; i < n; i++)
      for (size_t off = 0; off < block; off += page)
        blocks[i][off] = at_fork ^ 0xff;
    if (write(fds[1], "g", 1) != 1 && errno != EPIPE) return 3;
    close(fds[1]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status)) {
      deaths++;
      sigbus += WTERMSIG(status) == SIGBUS;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      wrong++;
    }
  }
  int intact = 1;
  for (size_t i = 0; i < n; i++)
    for (size_t off = 0; off < block; off += page)
      intact &= blocks[i][off] == at_fork;
  printf("rounds=%u\nchild_deaths=%u\nchild_sigbus=%u\nchild_wrong=%u\nfork_failures=%u\n"
         "parent_intact=%d\n",
         rounds, deaths, sigbus, wrong, fork_failures, intact);
  if (ballast_len) munmap(ballast, ballast_len);
  if (ballast_len) munmap(ballast, ballast_len);
  for (size_t i = 0; i < n; i++)
    free(blocks[i]);
  free(blocks);
  print_stats("");
  return 0;
}

static int auto_route(size_t size) {
  void *p = malloc(size);
  printf("is_dp=%d\n", nic_is_dataplane(p));
  free(p);
  return 0;
}

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

/* nic_aligned_alloc(alignment, size): what it returned, and whether the block works. */
static int aligned_dataplane(size_t alignment, size_t size) {
  errno = 0;
  unsigned char *p = nic_aligned_alloc(alignment, size);
  printf("aligned_errno=%d\n", p ? 0 : errno);
  if (p) {
    printf("aligned_ok=%d\n", (uintptr_t)p % alignment == 0);
    printf("aligned_dp=%d\n", nic_is_dataplane(p));
    p[0] = 1;
    p[size - 1] = 2;
    printf("aligned_usable_ok=%d\n", malloc_usable_size(p) >= size);
    free(p);
  }
  print_stats("");
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

/* n threads released at once each make their first dataplane allocation: with room for all of
 * them in one chunk, one chunk must be mapped, not one per thread. */
static pthread_barrier_t start_line;
static void *first_dp_alloc(void *arg) {
  pthread_barrier_wait(&start_line);
  void *p = nic_malloc((size_t)(uintptr_t)arg);
  return (void *)(uintptr_t)(p && nic_is_dataplane(p));
}

static int threads_start(unsigned n, size_t size) {
  pthread_t threads[64];
  if (n == 0 || n > 64 || pthread_barrier_init(&start_line, NULL, n)) return 1;
  for (unsigned i = 0; i < n; i++)
    if (pthread_create(&threads[i], NULL, first_dp_alloc, (void *)(uintptr_t)size)) return 1;
  unsigned dp = 0;
  for (unsigned i = 0; i < n; i++) {
    void *ok = NULL;
    pthread_join(threads[i], &ok);
    dp += ok != NULL;
  }
  printf("dataplane_threads=%u\n", dp);
  print_stats("");
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

/* What any program does at start-up, with no nicmalloc call: blocks of many sizes (1 MiB ones
 * are dataplane under NICMALLOC_DP_MIN_SIZE), grown and freed; then the fallbacks taken. */
static int guest_start(void) {
  char *blocks[64];
  for (unsigned i = 0; i < 64; i++) {
    const size_t size = (size_t)16 << (i % 17);
    blocks[i] = malloc(size);
    if (!blocks[i]) return 1;
    memset(blocks[i], (int)i, size);
  }
  for (unsigned i = 0; i < 64; i += 2) {
    char *grown = realloc(blocks[i], (size_t)24 << (i % 17));
    if (!grown) return 1;
    blocks[i] = grown;
  }
  for (unsigned i = 0; i < 64; i++)
    free(blocks[i]);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("chunks_created=%llu\npage_fallbacks=%llu\npin_failures=%llu\n",
         (unsigned long long)s.chunks_created, (unsigned long long)s.page_fallbacks,
         (unsigned long long)s.pin_failures);
  printf("vspace_refusals=%llu\nchunk_refusals=%llu\ndp_fallbacks=%llu\n",
         (unsigned long long)s.vspace_refusals, (unsigned long long)s.chunk_refusals,
         (unsigned long long)s.dataplane_fallbacks);
  return 0;
}

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

/* no-uring ARGS... / no-populate ARGS... / no-getrandom ARGS...: runs the probe again with ARGS
 * where a system call fails, as under a container's seccomp profile: io_uring_setup or getrandom
 * with ENOSYS, or madvise(MADV_POPULATE_WRITE) with ENOMEM, as when memory cannot be had. */
static int refusing(char **argv, int nr, int advice, int err) {
  if (nic_refuse_syscall(nr, advice, err)) return 1;
  argv[1] = argv[0];
  execv(argv[0], argv + 1);
  return 1;
}

/* NICMALLOC_FENCE=protect: a fresh thread's first nicmalloc bookkeeping (the heap mimalloc
 * keeps it in) lands among the program's blocks; one message posts all of them, and the post
 * itself must not wait for its own DMA. */
static int post_done;
static void count_done(void *arg, int status) {
  (void)arg;
  (void)status;
  __atomic_add_fetch(&post_done, 1, __ATOMIC_RELEASE);
}

static void *post_beside_bookkeeping(void *arg) {
  (void)arg;
  static char *blocks[NIC_SGA_CAPACITY];
  const unsigned half = 8, size = 3000; /* the size class of mimalloc's heap struct */
  for (unsigned i = 0; i < half; i++)
    memset(blocks[i] = malloc(size), (int)i, size);
  struct nic_endpoint *ep = nic_sim_endpoint_create(NULL, NULL, 0); /* first internal block */
  struct nic_sga sga;
  if (!ep || nic_sga_init(&sga, 0)) return (void *)1;
  for (unsigned i = half; i < sga.max; i++)
    memset(blocks[i] = malloc(size), (int)i, size);
  for (unsigned i = 0; i < sga.max; i++)
    if (nic_sga_add(&sga, blocks[i], size)) return (void *)1;
  if (nic_sga_post(&sga, ep, count_done, NULL)) return (void *)1;
  while (!__atomic_load_n(&post_done, __ATOMIC_ACQUIRE))
    nic_poll(0);
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
  return NULL;
}

/* NICMALLOC_FENCE=protect on the sim backend: one dataplane block posted, and while its DMA
 * is under way (NICMALLOC_SIM_DELAYS holds it) a write to a second block 64 KiB further on, in
 * no page the post covers. Prints whether the post was in flight before and after that write,
 * whether the write was held, and the backing page kind. */
static int protect_neighbour(void) {
  const size_t size = 64 << 10;
  char *sent = nic_malloc(size), *beside = nic_malloc(size);
  if (!sent || !beside || !nic_is_dataplane(sent) || !nic_is_dataplane(beside)) return 1;
  memset(sent, 1, size);
  memset(beside, 2, size);
  struct nic_endpoint *ep = nic_sim_endpoint_create(NULL, NULL, 0);
  struct nic_sga sga;
  if (!ep || nic_sga_init(&sga, 0) || nic_sga_add(&sga, sent, 4096) ||
      nic_sga_post(&sga, ep, count_done, NULL))
    return 1;
  struct nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  const int in_flight_before = !__atomic_load_n(&post_done, __ATOMIC_ACQUIRE);
  memset(beside, 3, size);
  const int in_flight_after = !__atomic_load_n(&post_done, __ATOMIC_ACQUIRE);
  nic_get_stats(&after);
  while (!__atomic_load_n(&post_done, __ATOMIC_ACQUIRE))
    nic_poll(0);
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
  printf("in_flight_before=%d\nin_flight_after=%d\nheld_writes=%llu\npage_kind=%s\n",
         in_flight_before, in_flight_after,
         (unsigned long long)(after.fence_held_writes - before.fence_held_writes),
         nic_page_kind_name(after.page_kind));
  return 0;
}

/* The free key, learnt as a peer could learn it: from a freed block's second word. */
/* The read system calls (/proc/self/io) a dataplane step backed costs: count blocks of size
 * bytes, each on steps of its own, kept until the end. */
static long long read_calls(void) {
  FILE *f = fopen("/proc/self/io", "r");
  char line[128];
  long long n = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "syscr:", 6)) n = strtoll(line + 6, NULL, 10);
  if (f) fclose(f);
  return n;
}

static int step_reads(unsigned count, size_t size) {
  void *first = nic_malloc(size); /* the chunk, the thread's heap and the first look made */
  const unsigned long long backed_before = stats_now().steps_backed;
  const long long reads_before = read_calls();
  void **blocks = calloc(count, sizeof *blocks);
  for (unsigned i = 0; i < count; i++)
    if (!(blocks[i] = nic_malloc(size))) return 1;
  const long long reads = read_calls() - reads_before - 1; /* less the stats read between */
  const unsigned long long steps = stats_now().steps_backed - backed_before;
  printf("steps=%llu\nreads=%lld\n", steps, reads);
  for (unsigned i = 0; i < count; i++)
    free(blocks[i]);
  free(blocks);
  free(first);
  return 0;
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

/* The process's anonymous memory before and after its first statistics reads, nothing posted. */
static int stats_read(void) {
  const long before = nic_proc_kb("/proc/self/status", "RssAnon:");
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  const long after = nic_proc_kb("/proc/self/status", "RssAnon:");
  nic_get_stats(&s);
  printf("anon_kb_before=%ld\nanon_kb_after=%ld\n", before, after);
  printf("cache_capacity=%llu\nworking_set=%llu\n", (unsigned long long)s.nic_cache_capacity,
         (unsigned long long)s.nic_working_set);
  return 0;
}

/* What a statistics read reads in a process with vmas more mappings and a dataplane step. */
static int stats_walk(unsigned vmas) {
  for (unsigned i = 0; i < vmas; i++)
    if (mmap(NULL, 4096, i % 2 ? PROT_READ : PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
             -1, 0) == MAP_FAILED)
      return 3;
  char *control = malloc(8 << 20);
  void *dp = nic_malloc(64);
  if (!control || !dp) return 1;
  memset(control, 1, 8 << 20);
  struct nic_stats s = NIC_STATS_INIT;
  const long long before = read_bytes();
  nic_get_stats(&s);
  const long long after = read_bytes();
  printf("read_bytes=%lld\nsmaps_bytes=%lld\n", after - before, smaps_bytes());
  printf("control_resident=%zu\ncontrol_committed=%zu\n", s.control_resident, s.control_committed);
  free(dp);
  free(control);
  return 0;
}

static int print_free_key(void) {
  uintptr_t *volatile block = malloc(48);
  free(block);
  printf("free_key=%llx\n", (unsigned long long)block[1]);
  return 0;
}

/* Runs the scenario argv[2]... with address space layout randomisation off, so that two runs
 * differ only in what they draw. 77: the kernel (or a seccomp filter) refused. */
static int fixed_layout(char **argv) {
  const int persona = personality(0xffffffff);
  if (persona == -1 || personality((unsigned long)persona | ADDR_NO_RANDOMIZE) == -1) return 77;
  argv[1] = argv[0];
  execv(argv[0], argv + 1);
  return 1;
}

static int post_beside(void) {
  pthread_t t;
  void *failed = (void *)1;
  if (pthread_create(&t, NULL, post_beside_bookkeeping, NULL) || pthread_join(t, &failed) || failed)
    return 1;
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("held_writes=%llu\nposts_done=%d\n", (unsigned long long)s.fence_held_writes, post_done);
  return 0;
}

/* Opens the backend NICMALLOC_BACKEND names (a plugin says what it opened when verbose). */
static void open_backend(void) {
  struct nic_sga sga;
  printf("sga_init=%d\n", nic_sga_init(&sga, 1));
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("backend=%s\n", s.backend);
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc >= 4 && !strcmp(argv[1], "as-limit")) return run_limited(RLIMIT_AS, 30, argv);
  if (argc >= 4 && !strcmp(argv[1], "as-limit-kib")) return run_limited(RLIMIT_AS, 10, argv);
  if (argc >= 2 && !strcmp(argv[1], "guest-start")) return guest_start();
  if (argc >= 2 && !strcmp(argv[1], "low-memlock-guest")) { /* the same without CAP_IPC_LOCK */
    struct rlimit lim = {64 << 10, 64 << 10};
    if (setrlimit(RLIMIT_MEMLOCK, &lim) || drop_ipc_lock()) return 3;
    return guest_start();
  }
  if (argc >= 3 && !strcmp(argv[1], "no-uring"))
    return refusing(argv, __NR_io_uring_setup, -1, ENOSYS);
  if (argc >= 3 && !strcmp(argv[1], "no-getrandom"))
    return refusing(argv, __NR_getrandom, -1, ENOSYS);
  if (argc >= 3 && !strcmp(argv[1], "fixed-layout")) return fixed_layout(argv);
  if (argc >= 2 && !strcmp(argv[1], "free-key")) return print_free_key();
  if (argc >= 2 && !strcmp(argv[1], "stats-read")) return stats_read();
  if (argc >= 3 && !strcmp(argv[1], "stats-walk"))
    return stats_walk((unsigned)strtoul(argv[2], NULL, 0));
  if (argc >= 4 && !strcmp(argv[1], "step-reads"))
    return step_reads((unsigned)strtoul(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
  if (argc >= 7 && !strcmp(argv[1], "limit-later"))
    return limit_later(argv[2], argv[3], argv[4], strtoull(argv[5], NULL, 0),
                       (unsigned)strtoul(argv[6], NULL, 0));
  if (argc >= 3 && !strcmp(argv[1], "no-populate"))
    return refusing(argv, __NR_madvise, 23 /* MADV_POPULATE_WRITE */, ENOMEM);
  if (argc >= 3 && !strcmp(argv[1], "big-block")) return big_block(strtoull(argv[2], NULL, 0));
  if (argc >= 2 && !strcmp(argv[1], "fill-control")) return fill_control();
  if (argc >= 2 && !strcmp(argv[1], "uring-endpoint")) { /* which backend; can one be made? */
    errno = 0;
    struct nic_endpoint *ep = nic_uring_endpoint_create(STDOUT_FILENO);
    struct nic_stats s = NIC_STATS_INIT;
    nic_get_stats(&s);
    printf("endpoint=%d\nerrno=%d\nbackend=%s\n", ep != NULL, errno, s.backend);
    return 0;
  }
  if (argc >= 4 && !strcmp(argv[1], "in-cgroup")) return in_cgroup(argv);
  if (argc >= 4 && !strcmp(argv[1], "data-limit")) return run_limited(RLIMIT_DATA, 20, argv);
  if (argc >= 3 && !strcmp(argv[1], "first-dp-reads"))
    return first_dp_reads((unsigned)atoi(argv[2]));
  if (argc >= 3 && !strcmp(argv[1], "dp-register")) return dp_register(strtoull(argv[2], NULL, 0));
  if (argc >= 4 && !strcmp(argv[1], "dp-alloc"))
    return dp_alloc(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
  if (argc >= 3 && !strcmp(argv[1], "low-memlock")) return low_memlock(strtoull(argv[2], NULL, 0));
  if (argc >= 4 && !strcmp(argv[1], "low-memlock-fill"))
    return low_memlock_fill(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
  if (argc >= 4 && !strcmp(argv[1], "step-release"))
    return step_release(atoi(argv[2]), (unsigned)atoi(argv[3]));
  if (argc >= 5 && !strcmp(argv[1], "memlock-steps"))
    return memlock_steps(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0),
                         strtoull(argv[4], NULL, 0));
  if (argc >= 6 && !strcmp(argv[1], "pin-refused"))
    return pin_refused(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0),
                       (unsigned)atoi(argv[4]), argv[5], argc >= 7 ? (unsigned)atoi(argv[6]) : 0);
  if (argc >= 4 && !strcmp(argv[1], "low-memlock-register"))
    return low_memlock_register((unsigned)atoi(argv[2]), strtoull(argv[3], NULL, 0));
  if (argc >= 4 && !strcmp(argv[1], "low-memlock-sga"))
    return low_memlock_sga(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
  if (argc >= 3 && !strcmp(argv[1], "fork-child")) return fork_child(strtoull(argv[2], NULL, 0));
  if (argc >= 5 && !strcmp(argv[1], "fork-write-race"))
    return fork_write_race((unsigned)atoi(argv[2]), strtoull(argv[3], NULL, 0),
                           strtoull(argv[4], NULL, 0), argc >= 6 && !strcmp(argv[5], "register"));
  if (argc >= 3 && !strcmp(argv[1], "auto")) return auto_route(strtoull(argv[2], NULL, 0));
  if (argc >= 3 && !strcmp(argv[1], "cap-again")) return cap_again(strtoull(argv[2], NULL, 0));
  if (argc >= 4 && !strcmp(argv[1], "threads-start"))
    return threads_start((unsigned)atoi(argv[2]), strtoull(argv[3], NULL, 0));
  if (argc >= 4 && !strcmp(argv[1], "huge"))
    return huge_reuse(strtoull(argv[2], NULL, 0), (unsigned)atoi(argv[3]));
  if (argc >= 2 && !strcmp(argv[1], "control-frees")) return control_frees();
  if (argc >= 3 && !strcmp(argv[1], "grow-untouched"))
    return grow_untouched(strtoull(argv[2], NULL, 0));
  if (argc >= 4 && !strcmp(argv[1], "aligned-dp"))
    return aligned_dataplane(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
  if (argc >= 2 && !strcmp(argv[1], "huge-usable"))
    return huge_usable(argv[0], argc >= 3 ? argv[2] : NULL);
  if (argc >= 2 && !strcmp(argv[1], "sites")) { /* sites ID...: which are on */
    for (int i = 2; i < argc; i++)
      printf("site_%s=%d\n", argv[i], nic_site_is_enabled((uint32_t)atoi(argv[i])));
    return 0;
  }
  if (argc >= 2 && !strcmp(argv[1], "open-backend")) {
    open_backend();
    return 0;
  }
  if (argc >= 3 && !strcmp(argv[1], "stderr-reused")) { /* close fd 2; a file takes its number */
    close(STDERR_FILENO);
    const int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    printf("file_fd=%d\n", fd);
    fflush(stdout);
    if (write(fd, "data\n", 5) != 5) return 1;
    char on_stack[32];
    free(on_stack); /* an error line, which must not land in the file */
    if (argc >= 4 && !strcmp(argv[3], "open-backend")) open_backend(); /* a plugin's lines */
    struct nic_stats s = NIC_STATS_INIT;
    nic_get_stats(&s);
    printf("dropped=%llu\n", (unsigned long long)s.log_lines_dropped);
    return 0;
  }
  if (argc >= 2 && !strcmp(argv[1], "stats-in-scope")) { /* nicmalloc's bookkeeping: control */
    nic_dataplane_begin();
    struct nic_stats s = NIC_STATS_INIT;
    nic_get_stats(&s);
    const int null_fd = open("/dev/null", O_WRONLY);
    nic_print_stats(null_fd);
    close(null_fd);
    nic_dataplane_end();
    print_stats("");
    return 0;
  }
  if (argc >= 2 && !strcmp(argv[1], "post-beside-bookkeeping")) return post_beside();
  if (argc >= 2 && !strcmp(argv[1], "protect-neighbour")) return protect_neighbour();
  if (argc >= 2 && !strcmp(argv[1], "stats")) {
    print_stats("");
    return 0;
  }
  fprintf(
      stderr,
      "usage: nic_probe dp-alloc TOTAL BLOCK | low-memlock BLOCK | low-memlock-fill TOTAL BLOCK | "
      "low-memlock-register N BLOCK | pin-refused LIMIT SIZE COUNT MODE [WAIT_MS] | "
      "low-memlock-sga KIB "
      "BLOCK | memlock-steps LIMIT TOTAL BLOCK "
      "| "
      "fork-child BLOCK | fork-write-race ROUNDS TOTAL BLOCK [register] | auto SIZE | cap-again "
      "BLOCK | huge "
      "SIZE SLEEP_MS | huge-usable [GIB] | "
      "grow-untouched MAX | aligned-dp ALIGNMENT SIZE | "
      "threads-start N SIZE | stats | stats-in-scope | stderr-reused FILE [open-backend] | "
      "open-backend | as-limit GIB "
      "ARGS... | data-limit MIB ARGS... | in-cgroup DIR ARGS... | no-uring ARGS... | "
      "no-getrandom ARGS... | fixed-layout ARGS... | free-key | uring-endpoint | "
      "post-beside-bookkeeping | fill-control\n");
  return 2;
}
