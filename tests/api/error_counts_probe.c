/* error_counts_probe COMMAND: a call that fails for lack of memory, and what the statistics
 * counted. Memory runs out through the probe's seccomp filter (refuse_syscall.h): mmap and
 * mprotect fail with ENOMEM, so no table, pool block or heap page can be mapped or committed any
 * more. Prints rc (the call's answer), counted (how much its error count grew) and filtered.
 *   hold-pool:  nic_hold, the process's first: no room for its record
 *   hold-pages: nic_hold after one held and let go: a record, but no page-count table there
 *   sga-post:   nic_sga_post of one entry, the thread's heap used up: no room for the message
 * Run with NICMALLOC_BACKEND=sim. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "refuse_syscall.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

static struct nic_stats stats(void) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

/* From now on nothing more can be mapped or committed. 0, or 1 when the kernel took no filter. */
static int run_out_of_memory(void) {
  if (nic_refuse_syscall(SYS_mmap, -1, ENOMEM) || nic_refuse_syscall(SYS_mprotect, -1, ENOMEM))
    return 1;
  printf("filtered=1\n");
  fflush(stdout);
  return 0;
}

static int hold(bool first) {
  char *control = malloc(64), *block = nic_malloc(64);
  if (!control || !block) return 1;
  if (!first && (nic_hold(control) || nic_release(control))) return 1;
  const uint64_t before = stats().hold_errors;
  if (run_out_of_memory()) return 1;
  printf("rc=%d\n", nic_hold(block));
  printf("counted=%llu\n", (unsigned long long)(stats().hold_errors - before));
  return 0;
}

static void done(void *arg, int status) {
  (void)arg, (void)status;
}

/* The heap's committed room, used up with blocks never freed, largest first (the 1 MiB ones
 * are mapped apart and refused at once). */
static void use_up_the_heap(void) {
  static const size_t sizes[] = {1 << 20, 64 << 10, 8 << 10, 1 << 10, 256, 64, 16};
  for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    while (malloc(sizes[i]))
      ;
}

static int sga_post(void) {
  static struct nic_sga sga;
  struct nic_endpoint *ep = nic_sim_endpoint_create(NULL, NULL, 0);
  char *block = nic_malloc(256);
  if (!ep || !block || nic_sga_init(&sga, 0) || nic_sga_add(&sga, block, 100)) return 1;
  const uint64_t before = stats().sga_errors;
  if (run_out_of_memory()) return 1;
  use_up_the_heap();
  printf("rc=%d\n", nic_sga_post(&sga, ep, done, NULL));
  printf("counted=%llu\n", (unsigned long long)(stats().sga_errors - before));
  return 0;
}

int main(int argc, char **argv) {
  const char *command = argc > 1 ? argv[1] : "";
  if (!strcmp(command, "hold-pool")) return hold(true);
  if (!strcmp(command, "hold-pages")) return hold(false);
  if (!strcmp(command, "sga-post")) return sga_post();
  fprintf(stderr, "usage: error_counts_probe hold-pool | hold-pages | sga-post\n");
  return 2;
}
