/* step_pages_probe: one step stays in use (a small block and the first of sixteen 1 MiB blocks)
 * while the other fifteen are freed; mimalloc decommits their spans at once
 * (MIMALLOC_DECOMMIT_DELAY=0) and the release delay is long, so whatever the step gives back is
 * given back inside it. Then fifteen blocks are allocated and written again. The step is
 * registered first with the default backend: "free" runs on the sim (or DPDK's virtual ports),
 * whose registrations follow the pages, and then posts a block written after its pages came
 * back and checks what the NIC read; "held" runs on a backend that holds page references. Prints
 * pinned bytes and resident anonymous memory at each stage, and whether the data read back.
 * "released" runs with small steps and a short release delay instead, so that the steps the freed
 * blocks leave go back whole (a fresh mapping: zeros where the free key was), and frees one of them
 * again. "alternate" frees every other block only: each freed 1 MiB span lies between live blocks,
 * so no 2 MiB-aligned range is free; it also prints the huge pages still mapping the process.
 * "no-drop SCENARIO" runs SCENARIO where the kernel refuses MADV_DONTNEED_LOCKED (before 5.18). */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "proc_kb.h"
#include "refuse_syscall.h"

#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { BLOCKS = 16 };
static const size_t kBlock = 1u << 20;

static int received_ok = -1, posted;
static void receive(void *arg, void *data, size_t len) {
  const char want = *(const char *)arg;
  received_ok = len == 65536;
  for (size_t i = 0; i < len; i++)
    received_ok &= ((const char *)data)[i] == want;
}
static void post_done(void *arg, int status) {
  (void)arg;
  posted = status == 0 ? 1 : -1;
}

/* Posts the first 64 KiB of p through the default backend's NIC (the sim's, or DPDK's port 0,
 * whose net_ring hands the sender's very memory to its own receive queue) and waits for what it
 * delivered. */
static int post_and_check(char *p) {
  const char *backend = getenv("NICMALLOC_BACKEND");
  struct nic_endpoint *ep;
  if (backend && !strcmp(backend, "dpdk")) {
    ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
    if (ep && nic_endpoint_receive(ep, receive, p)) return 0;
  } else {
    ep = nic_sim_endpoint_create(receive, p, 0);
  }
  struct nic_sga sga;
  if (!ep || nic_sga_init(&sga, 0) || nic_sga_add(&sga, p, 65536) ||
      nic_sga_post(&sga, ep, post_done, NULL))
    return 0;
  while (!posted || received_ok < 0)
    nic_poll(0);
  nic_sga_reset(&sga);
  return posted == 1 && received_ok == 1;
}

static void print(const char *tag) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("%s_pinned=%zu\n%s_dropped=%zu\n%s_rss_anon_kb=%ld\n%s_anon_huge_kb=%ld\n", tag,
         s.dataplane_pinned, tag, s.dataplane_dropped, tag,
         nic_proc_kb("/proc/self/status", "RssAnon:"), tag,
         nic_proc_kb("/proc/self/smaps_rollup", "AnonHugePages:"));
}

/* Whether the first page of p is in memory. */
static int resident(const void *p) {
  unsigned char v = 0;
  void *page = (void *)((uintptr_t)p & ~(uintptr_t)4095);
  return mincore(page, 4096, &v) == 0 && (v & 1);
}

/* KiB of the blocks b[i], i odd, that are not in memory. */
static long odd_blocks_gone_kb(char **b) {
  long kb = 0;
  for (int i = 1; i < BLOCKS; i += 2)
    for (size_t off = 0; off < kBlock; off += 4096)
      kb += resident(b[i] + off) ? 0 : 4;
  return kb;
}

/* Steps the reaper may give back: those holding no live block. Waits (bounded) until no more
 * than the steps of keep and b[0] stay pinned. */
static int released_steps(const char *keep, char **b) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  const uintptr_t step = s.pin_step;
  const uintptr_t keep_step = (uintptr_t)keep / step, first_step = (uintptr_t)b[0] / step;
  const uint32_t live_steps = keep_step == first_step ? 1 : 2;
  for (int i = 0; i < 2000; i++) { /* at most 20 s */
    nic_get_stats(&s);
    if (s.steps_pinned <= live_steps) break;
    usleep(10000);
  }
  printf("steps_pinned=%u\nlive_steps=%u\nsteps_released=%llu\n", s.steps_pinned, live_steps,
         (unsigned long long)s.steps_released);
  /* A freed block wholly inside a step of neither keep nor b[0]: that step went back whole. */
  for (int i = BLOCKS - 1; i > 0; i--) {
    const uintptr_t lo = (uintptr_t)b[i] / step, hi = ((uintptr_t)b[i] + kBlock - 1) / step;
    if (lo == hi && lo != keep_step && lo != first_step) return i;
  }
  return -1;
}

/* "double": a block whose pages went back is freed again, reallocated and asked its size: each
 * is a freed block, reported and ignored, and the live bytes stay those of the live blocks. */
static int double_free(char *keep, char **b, int whole_steps) {
  int victim = -1;
  if (whole_steps)
    victim = released_steps(keep, b);
  else
    for (int i = 1; i < BLOCKS && victim < 0; i++)
      if (!resident(b[i])) victim = i;
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("victim=%d\nbefore_live=%zu\nbefore_double_frees=%llu\n", victim, s.dataplane_live,
         (unsigned long long)s.double_frees);
  if (victim < 0) return 0;
  free(b[victim]);
  printf("realloc_null=%d\n", realloc(b[victim], 100) == NULL);
  printf("usable=%zu\n", malloc_usable_size(b[victim]));
  nic_get_stats(&s);
  printf("after_live=%zu\nafter_double_frees=%llu\n", s.dataplane_live,
         (unsigned long long)s.double_frees);
  /* The blocks' pages come back for new blocks, and mimalloc still counts right. */
  for (int i = 1; i < BLOCKS; i++)
    if (!(b[i] = nic_malloc(kBlock))) return 1;
  for (int i = 1; i < BLOCKS; i++)
    free(b[i]);
  free(b[0]);
  free(keep);
  nic_get_stats(&s);
  printf("end_live=%zu\n", s.dataplane_live);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 2 && !strcmp(argv[1], "no-drop")) {
    if (nic_refuse_syscall(__NR_madvise, MADV_DONTNEED_LOCKED, EINVAL)) return 77;
    execv(argv[0], argv + 1);
    return 1;
  }
  const int held = argc > 1 && !strcmp(argv[1], "held");
  const int released = argc > 1 && !strcmp(argv[1], "released");
  const int twice = released || (argc > 1 && !strcmp(argv[1], "double"));
  const int alternate = argc > 1 && !strcmp(argv[1], "alternate");
  char *keep = nic_malloc(64);
  char *b[BLOCKS];
  for (int i = 0; i < BLOCKS; i++) {
    b[i] = nic_malloc(kBlock);
    if (!keep || !b[i]) return 1;
    memset(b[i], 'a' + i, kBlock);
  }
  /* All in one step: otherwise a whole step could empty, which is another mechanism ("released"
   * wants just that). */
  struct nic_stats st = NIC_STATS_INIT;
  nic_get_stats(&st);
  const size_t step = st.pin_step;
  int same = 1;
  for (int i = 0; i < BLOCKS; i++)
    same &= (uintptr_t)b[i] / step == (uintptr_t)keep / step;
  printf("one_step=%d\npage_kind_%s=1\n", same, nic_page_kind_name(st.page_kind));
  struct nic_region_ref ref;
  printf("register_rc=%d\n", nic_register(b[0], 4096, NIC_REG_LOCAL, &ref));
  print("full");
  for (int i = 1; i < BLOCKS; i++)
    if (!alternate || i % 2) free(b[i]);
  nic_collect();
  print("freed");
  if (alternate) printf("freed_gone_kb=%ld\n", odd_blocks_gone_kb(b));
  if (twice) return double_free(keep, b, released);
  int intact = 1;
  for (size_t off = 0; off < kBlock; off += 4096)
    intact &= b[0][off] == 'a';
  for (int i = 1; i < BLOCKS; i++) {
    if (alternate && !(i % 2)) continue;
    b[i] = nic_malloc(kBlock);
    if (!b[i]) return 1;
    memset(b[i], 'A' + i, kBlock);
  }
  for (int i = 1; i < BLOCKS; i++)
    for (size_t off = 0; off < kBlock; off += 4096)
      intact &= b[i][off] == (alternate && !(i % 2) ? 'a' : 'A') + i;
  printf("intact=%d\n", intact);
  print("again");
  if (!held) printf("sent_intact=%d\n", post_and_check(b[5]));
  return 0;
}
