/* nic_probe: dataplane allocation and registration. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "probe_common.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Allocates total bytes in blocks of block bytes with nic_malloc; counts where they landed. */
int dp_alloc(size_t total, size_t block) {
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

static void count_sent(void *arg, int status) {
  if (status == 0) ++*(unsigned *)arg;
}

/* Where register-blocks takes its blocks: nic_malloc (dataplane), or a mapping of its own each,
 * a guard page apart (control memory: registration-cache regions). */
static char *next_block(size_t size, bool control) {
  if (!control) {
    char *p = nic_malloc(size);
    return p && nic_is_dataplane(p) ? p : NULL;
  }
  char *p = mmap(NULL, size + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  mprotect(p + size, 4096, PROT_NONE);
  return p;
}

/* n blocks of size bytes, each with one page registered from its middle (a dataplane step of
 * its own at the default step when size is the step): how many registrations were handed out,
 * and the first error. how: "dataplane" (nic_malloc), "control" (a mapping each), or "post"
 * (dataplane, and each registered page also sent on DPDK port 0 and waited for: how many
 * were sent). */
static int register_blocks(unsigned n, size_t size, const char *how) {
  const bool control = !strcmp(how, "control"), post = !strcmp(how, "post");
  struct nic_endpoint *ep = post ? nic_dpdk_endpoint_create(0, 0) : NULL;
  if (post && !ep) return 4;
  unsigned registered = 0, sent = 0;
  int first_error = 0;
  for (unsigned i = 0; i < n; i++) {
    char *p = next_block(size, control);
    if (!p) return 3;
    memset(p, 1, size);
    struct nic_region_ref ref;
    const int rc = nic_register(p + size / 2, 4096, NIC_REG_LOCAL, &ref);
    registered += rc == 0;
    if (rc && !first_error) first_error = rc;
    struct nic_sga sga;
    if (rc || !post || nic_sga_init(&sga, 1) || nic_sga_add(&sga, p + size / 2, 4096)) continue;
    const unsigned before = sent;
    if (nic_sga_post(&sga, ep, count_sent, &sent)) {
      nic_sga_reset(&sga);
      continue;
    }
    for (int waits = 0; sent == before && waits < 100; waits++)
      nic_wait(10);
  }
  struct nic_stats st = NIC_STATS_INIT;
  nic_get_stats(&st);
  printf("registered=%u\nfirst_error=%d\nsent=%u\nbackend=%s\n", registered, first_error, sent,
         st.backend);
  return 0;
}

/* The first dataplane allocation of a process with many mappings (vmas one-page mappings that
 * the kernel cannot merge): the bytes it read, against what one walk of the process's mappings
 * reads. */
static int first_dp_reads(unsigned vmas) {
  if (!map_pages_apart(vmas)) return 3;
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

static int auto_route(size_t size) {
  void *p = malloc(size);
  printf("is_dp=%d\n", nic_is_dataplane(p));
  free(p);
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

/* The commands: argv[1] names one, its arguments follow (usage in probe.c). */
int cmd_dp_alloc(int argc, char **argv) {
  (void)argc;
  return dp_alloc(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
}

int cmd_register_blocks(int argc, char **argv) {
  return register_blocks((unsigned)atoi(argv[2]), strtoull(argv[3], NULL, 0),
                         argc > 4 ? argv[4] : "dataplane");
}

int cmd_dp_register(int argc, char **argv) {
  (void)argc;
  return dp_register(strtoull(argv[2], NULL, 0));
}

int cmd_first_dp_reads(int argc, char **argv) {
  (void)argc;
  return first_dp_reads((unsigned)atoi(argv[2]));
}

int cmd_cap_again(int argc, char **argv) {
  (void)argc;
  return cap_again(strtoull(argv[2], NULL, 0));
}

int cmd_auto(int argc, char **argv) {
  (void)argc;
  return auto_route(strtoull(argv[2], NULL, 0));
}

int cmd_aligned_dp(int argc, char **argv) {
  (void)argc;
  return aligned_dataplane(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
}

/* A thread's first stack walk (a malloc whose site NICMALLOC_FENCE=detect records) inside a
 * dataplane scope: libunwind's thread-local block, which the C library allocates then, is
 * nicmalloc's own memory. Read before the thread exits, which may or may not free that block. */
static void *sampled_in_scope(void *arg) {
  (void)arg;
  nic_dataplane_begin();
  for (int i = 0; i < 64; i++)
    free(malloc(4096));
  nic_dataplane_end();
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("thread_live=%zu\n", s.dataplane_live);
  return NULL;
}

int cmd_sampled_in_scope(int argc, char **argv) {
  (void)argc, (void)argv;
  pthread_t t;
  if (pthread_create(&t, NULL, sampled_in_scope, NULL)) return 1;
  pthread_join(t, NULL);
  return 0;
}
