/* nic_probe: statistics reads: what they cost and what they print. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "probe_common.h"
#include "proc_kb.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
  if (!map_pages_apart(vmas)) return 3;
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

/* The commands: argv[1] names one, its arguments follow (usage in probe.c). */
int cmd_stats_read(int argc, char **argv) {
  (void)argc, (void)argv;
  return stats_read();
}

int cmd_stats_walk(int argc, char **argv) {
  (void)argc;
  return stats_walk((unsigned)strtoul(argv[2], NULL, 0));
}

int cmd_stats_in_scope(int argc, char **argv) { /* nicmalloc's bookkeeping: control */
  (void)argc, (void)argv;
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

int cmd_stats(int argc, char **argv) {
  (void)argc, (void)argv;
  print_stats("");
  return 0;
}
