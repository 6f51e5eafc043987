/* map_refused_probe: dataplane requests aligned beyond what mimalloc serves, made once no new
 * mapping can be had (RLIMIT_AS lowered under the address space in use, after the dataplane's
 * reservation and first chunk). Their blocks come from the chunk, but the table that notes
 * over-aligned blocks cannot grow: the requests fall back. Prints how many came back, errno,
 * and the fallbacks counted; stderr carries what the user is told. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

int main(void) {
  char *first = nic_malloc(64); /* reserves the range, maps and backs the first chunk */
  if (!first) return 2;
  struct rlimit lim = {0, RLIM_INFINITY};
  getrlimit(RLIMIT_AS, &lim);
  lim.rlim_cur = 1 << 20; /* below what is mapped: every new mapping is refused */
  if (setrlimit(RLIMIT_AS, &lim)) return 3;
  int got = 0, err = 0;
  for (int i = 0; i < 3; i++) {
    errno = 0;
    void *p = nic_aligned_alloc((size_t)32 << 20, 4096);
    got += p != NULL;
    if (!p) err = errno;
  }
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("got=%d\nenomem=%d\nfallbacks=%llu\nfailures=%llu\n", got, err == ENOMEM,
         (unsigned long long)s.dataplane_fallbacks, (unsigned long long)s.dataplane_failures);
  return 0;
}
