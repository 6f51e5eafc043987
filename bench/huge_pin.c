/* huge_pin: what one dataplane block of each size pins, in a fresh process per size (fork), so
 * nothing else is pinned: the block's usable size and the chunk bytes pinned with it
 * (dataplane_pinned), one line per size. Blocks over 16 MiB get a mimalloc segment of their own
 * (bench/README.md, "Dataplane blocks over 16 MiB").
 *   build/bench/huge_pin [from MiB] [to MiB] [step MiB]      (defaults 5 25 1)
 * Run it with the environment under test (NICMALLOC_PIN_STEP...). */
#define _GNU_SOURCE
#include <nicmalloc.h>

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static void measure(size_t size) {
  void *p = nic_malloc(size);
  struct nic_stats s;
  if (!p || nic_get_stats(&s)) {
    printf("%10zu  failed\n", size);
    return;
  }
  printf("%10.2f MiB  usable %8.2f MiB  pinned %6.1f MiB  pinned/size %.2f\n", (double)size / MIB,
         (double)malloc_usable_size(p) / MIB, (double)s.dataplane_pinned / MIB,
         (double)s.dataplane_pinned / (double)size);
  fflush(stdout);
  free(p);
}

int main(int argc, char **argv) {
  const size_t from = argc > 1 ? strtoul(argv[1], NULL, 0) : 5;
  const size_t to = argc > 2 ? strtoul(argv[2], NULL, 0) : 25;
  const size_t step = argc > 3 ? strtoul(argv[3], NULL, 0) : 1;
  for (size_t mib = from; mib <= to; mib += step ? step : 1) {
    /* A size just over each MiB too: mimalloc rounds huge blocks to 1 MiB (4 MiB over 32). */
    const size_t sizes[2] = {mib * MIB, mib * MIB + 4096};
    for (int i = 0; i < 2; i++) {
      const pid_t pid = fork();
      if (pid == 0) {
        measure(sizes[i]);
        _exit(0);
      }
      if (pid > 0) waitpid(pid, NULL, 0);
    }
  }
  return 0;
}
