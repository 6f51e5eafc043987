/* A setuid-root program linked with -lnicmalloc, run by an unprivileged user in setuid.sh. It
 * does what makes nicmalloc read each setting that names a file, a plugin or arguments: it
 * allocates (site table, profile, sites at start-up) and registers memory (the backend, and
 * with NICMALLOC_BACKEND=dpdk the EAL and its arguments). */
#include <nicmalloc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void) {
  char *block = malloc(1 << 16);
  if (!block) return 1;
  memset(block, 1, 1 << 16);
  struct nic_region_ref ref;
  int rc = nic_register(block, 1 << 16, NIC_REG_LOCAL, &ref);
  if (rc == 0) nic_unregister(&ref);
  printf("probe ok: euid %d uid %d register %d\n", (int)geteuid(), (int)getuid(), rc);
  free(block);
  return 0;
}
