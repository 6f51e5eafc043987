/* lazy_step_probe: one small dataplane block, 64 KiB written, in a fresh step; then its step
 * registered with the default backend (sim). Prints, at each stage, the step's bytes in memory
 * (mincore over the step), the locked bytes of the mapping that holds the block (/proc/self/smaps
 * "Locked:", summed over the mappings inside the step), and the stats' pinned bytes.
 * "whole": 1 MiB blocks written until a step lies wholly in memory, never registered; the stats
 * are read (which finds that step whole), then one block inside it is freed, so that its pages
 * go back (MIMALLOC_DECOMMIT_DELAY=0), and the stats are read again. Prints, at each read, the
 * stats' pinned bytes and the process's locked bytes in memory (/proc/self/smaps_rollup).
 * At both stages also the THP advice of the mapping that holds the block (smaps "VmFlags": nh
 * small, hg huge, or none).
 * "no-onfault": the first scenario again, where mlock2(MLOCK_ONFAULT) fails with EINVAL as on a
 * kernel without it (a seccomp filter, then the probe runs itself anew under it); prints what
 * mlock2 said to the probe itself.
 * "read-only": a block x written with 'X', then a block p on the same step, never registered,
 * made read-only by the program (mprotect) and added to an array; prints what nic_sga_add said
 * (add_rc), whether x kept every byte (x_intact) and, p writable again, what a second add said.
 * "old-populate SCENARIO": SCENARIO (the first one when none, or "read-only") where
 * madvise(MADV_POPULATE_WRITE) fails with EINVAL as on a kernel before 5.14. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "refuse_syscall.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static size_t resident_bytes(uintptr_t base, size_t len) {
  unsigned char vec[1024];
  size_t n = 0;
  for (size_t off = 0; off < len; off += sizeof vec * 4096) {
    const size_t part = len - off < sizeof vec * 4096 ? len - off : sizeof vec * 4096;
    if (mincore((void *)(base + off), part, vec)) return (size_t)-1;
    for (size_t i = 0; i < part / 4096; i++)
      n += vec[i] & 1;
  }
  return n * 4096;
}

/* Locked kB of the mappings that lie inside [base, base + len). */
static long locked_kb(uintptr_t base, size_t len) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  long kb = 0;
  int inside = 0;
  while (fgets(line, sizeof line, f)) {
    uintptr_t lo, hi;
    if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 && strchr(line, ' ') &&
        line[0] != ' ') {
      inside = lo >= base && hi <= base + len;
      continue;
    }
    if (inside && !strncmp(line, "Locked:", 7)) kb += strtol(line + 7, NULL, 10);
  }
  fclose(f);
  return kb;
}

/* "Locked:" of /proc/self/smaps_rollup: every locked page in memory, which here is dataplane
 * steps only. */
static long rollup_locked_kb(void) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "Locked:", 7)) kb = strtol(line + 7, NULL, 10);
  fclose(f);
  return kb;
}

/* The THP advice on the mapping holding addr: "small" (MADV_NOHUGEPAGE), "huge" (MADV_HUGEPAGE),
 * "none", or "unknown" when smaps cannot be read. */
static const char *thp_advice(uintptr_t addr) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return "unknown";
  char line[512];
  const char *advice = "unknown";
  int inside = 0;
  while (fgets(line, sizeof line, f)) {
    uintptr_t lo, hi;
    if (line[0] != ' ' && sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2) {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && !strncmp(line, "VmFlags:", 8)) {
      advice = strstr(line, " nh") ? "small" : strstr(line, " hg") ? "huge" : "none";
      break;
    }
  }
  fclose(f);
  return advice;
}

static void print_whole(const char *tag) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("%s_pinned=%zu\n%s_locked=%ld\n", tag, s.dataplane_pinned, tag, rollup_locked_kb() * 1024);
}

enum { BLOCKS = 24 };

static int whole_step(size_t step_len) {
  static const size_t block = (size_t)1 << 20;
  char *b[BLOCKS];
  for (int i = 0; i < BLOCKS; i++) {
    b[i] = nic_malloc(block);
    if (!b[i] || !nic_is_dataplane(b[i])) return 1;
    memset(b[i], 'a' + i, block);
  }
  /* A block inside a step that is wholly in memory. */
  int victim = -1;
  for (int i = 0; i < BLOCKS && victim < 0; i++) {
    const uintptr_t step = (uintptr_t)b[i] & ~(uintptr_t)(step_len - 1);
    if (((uintptr_t)b[i] + block - 1) / step_len == step / step_len &&
        resident_bytes(step, step_len) == step_len)
      victim = i;
  }
  printf("victim=%d\n", victim);
  if (victim < 0) return 1;
  print_whole("whole");
  print_whole("whole_again");
  free(b[victim]);
  nic_collect();
  printf("victim_resident=%zu\n", resident_bytes((uintptr_t)b[victim], block));
  print_whole("freed");
  return 0;
}

static void print(const char *tag, uintptr_t step, size_t len) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("%s_resident=%zu\n%s_locked_kb=%ld\n%s_pinned=%zu\n%s_advice=%s\n", tag,
         resident_bytes(step, len), tag, locked_kb(step, len), tag, s.dataplane_pinned, tag,
         thp_advice(step));
}

static int read_only_part(size_t step_len) {
  enum { X_LEN = 4 * 4096, P_LEN = 2 * 4096 };
  unsigned char *x = nic_aligned_alloc(4096, X_LEN), *p = nic_aligned_alloc(4096, P_LEN);
  if (!x || !p || !nic_is_dataplane(x) || !nic_is_dataplane(p)) return 1;
  if ((uintptr_t)x / step_len != (uintptr_t)p / step_len) return 1;
  memset(x, 'X', X_LEN);
  memset(p, 'R', P_LEN);
  if (mprotect(p, P_LEN, PROT_READ)) return 1;
  struct nic_sga sga;
  if (nic_sga_init(&sga, 0)) return 1;
  printf("add_rc=%d\n", nic_sga_add(&sga, p, P_LEN));
  int intact = 1;
  for (size_t i = 0; i < X_LEN; i++)
    intact &= x[i] == 'X';
  printf("x_intact=%d\n", intact);
  /* By the system call: nicmalloc takes a writable mprotect of dataplane memory for mimalloc's
   * commit, which needs no call, and leaves the pages as they are. */
  if (syscall(SYS_mprotect, p, P_LEN, PROT_READ | PROT_WRITE)) return 1;
  nic_sga_reset(&sga);
  printf("writable_add_rc=%d\n", nic_sga_add(&sga, p, P_LEN));
  nic_sga_reset(&sga);
  free(p);
  free(x);
  return 0;
}

int main(int argc, char **argv) {
  const size_t step_len = (size_t)strtoull(getenv("NICMALLOC_PIN_STEP"), NULL, 0) << 20;
  if (argc > 1 && !strcmp(argv[1], "whole")) return whole_step(step_len);
  if (argc > 1 && !strcmp(argv[1], "read-only")) return read_only_part(step_len);
  if (argc > 1 && !strcmp(argv[1], "old-populate")) {
    if (nic_refuse_syscall(SYS_madvise, 23 /* MADV_POPULATE_WRITE */, EINVAL)) return 1;
    execl(argv[0], argv[0], argc > 2 ? argv[2] : "plain", (char *)NULL);
    return 1;
  }
  if (argc > 1 && !strcmp(argv[1], "no-onfault")) {
    if (nic_refuse_syscall(SYS_mlock2, -1, EINVAL)) return 1;
    execl(argv[0], argv[0], "refused", (char *)NULL);
    return 1;
  }
  if (argc > 1 && !strcmp(argv[1], "refused")) {
    static char page[4096];
    printf("mlock2_errno=%d\n",
           syscall(SYS_mlock2, page, sizeof page, 1 /* MLOCK_ONFAULT */) ? errno : 0);
  }
  char *p = nic_malloc(65536);
  if (!p || !nic_is_dataplane(p)) {
    printf("dataplane=0\n");
    return 1;
  }
  memset(p, 0x5a, 65536);
  const uintptr_t step = (uintptr_t)p & ~(uintptr_t)(step_len - 1);
  printf("step_len=%zu\n", step_len);
  print("touched", step, step_len);
  struct nic_region_ref ref;
  const int rc = nic_register(p, 65536, NIC_REG_LOCAL, &ref);
  printf("register_rc=%d\n", rc);
  print("registered", step, step_len);
  int intact = 1;
  for (size_t i = 0; i < 65536; i++)
    intact &= p[i] == 0x5a;
  printf("intact=%d\n", intact);
  if (rc == 0) nic_unregister(&ref);
  free(p);
  return 0;
}
