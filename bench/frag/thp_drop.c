/* thp_drop MIB: what the kernel does when 64 KiB pieces of mlocked transparent huge pages are
 * given back, as alloc/heap/step_pages.c does inside a THP step. Maps MIB MiB with
 * MADV_HUGEPAGE, locks and writes it, drops every other 64 KiB (MADV_DONTNEED_LOCKED), waits
 * 3 s, then writes half of the dropped pieces again. Prints, at each stage, the process's Rss and
 * AnonHugePages (smaps_rollup) and the system's MemFree, AnonHugePages and THP split counters
 * (/proc/meminfo, /proc/vmstat). A benchmark: it asserts nothing. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif

static long value(const char *file, const char *key) {
  FILE *f = fopen(file, "r");
  char line[256];
  long v = -1;
  const size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, n) && (line[n] == ':' || line[n] == ' '))
      v = strtol(line + n + 1, NULL, 10);
  if (f) fclose(f);
  return v;
}

static void show(const char *stage) {
  printf("%-9s Rss %8ld kB AnonHugePages %8ld kB | system MemFree %9ld kB AnonHugePages %9ld kB "
         "thp_split_pmd %ld thp_deferred_split_page %ld thp_split_page %ld\n",
         stage, value("/proc/self/smaps_rollup", "Rss"),
         value("/proc/self/smaps_rollup", "AnonHugePages"), value("/proc/meminfo", "MemFree"),
         value("/proc/meminfo", "AnonHugePages"), value("/proc/vmstat", "thp_split_pmd"),
         value("/proc/vmstat", "thp_deferred_split_page"), value("/proc/vmstat", "thp_split_page"));
}

int main(int argc, char **argv) {
  const size_t huge = (size_t)2 << 20, piece = (size_t)64 << 10;
  const size_t len = (size_t)(argc > 1 ? atol(argv[1]) : 512) << 20;
  char *raw = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return perror("mmap"), 1;
  char *p = (char *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
  if (madvise(p, len, MADV_HUGEPAGE)) perror("madvise(MADV_HUGEPAGE)");
  if (mlock(p, len)) return perror("mlock (RLIMIT_MEMLOCK?)"), 1;
  memset(p, 1, len);
  show("written");
  for (size_t off = 0; off < len; off += 2 * piece)
    if (madvise(p + off, piece, MADV_DONTNEED_LOCKED)) return perror("MADV_DONTNEED_LOCKED"), 1;
  show("dropped");
  sleep(3);
  show("3 s later");
  for (size_t off = 0; off < len / 2; off += 2 * piece)
    memset(p + off, 2, piece);
  show("rewritten");
  return 0;
}
