/* A program built without PIE (as Debian's node is) that takes the addresses of malloc and
 * free: the names are then bound to entries of its own procedure linkage table, which calls pass
 * through to nicmalloc's (linked here, or preloaded). nicmalloc must know itself the malloc: it
 * says nothing, routes malloc, and registers memory that is not its own, whose frees it sees.
 * Prints key=value lines. */
#include "nicmalloc.h"

#include <stdio.h>
#include <stdlib.h>

static void *(*volatile malloc_ref)(size_t);
static void (*volatile free_ref)(void *);

static _Alignas(4096) char plain[16384]; /* not nicmalloc's memory */

int main(void) {
  /* Addresses taken in code (an absolute operand, not a data relocation): the linker makes the
   * table entries the names' canonical addresses. */
  malloc_ref = malloc;
  free_ref = free;
  void *p = malloc_ref(4096); /* NICMALLOC_DP_MIN_SIZE=64 makes it a dataplane block */
  printf("malloc_dataplane=%d\n", nic_is_dataplane(p));
  struct nic_region_ref ref;
  const int rc = nic_register(plain, sizeof plain, NIC_REG_LOCAL, &ref);
  printf("register_plain_rc=%d\n", rc);
  if (rc == 0) nic_unregister(&ref);
  free_ref(p);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("invalid_frees=%llu\n", (unsigned long long)s.invalid_frees);
  return 0;
}
