/* A dpdk plugin as a build of another version of nicmalloc made it: its backend table has
 * another layout (nic_backend_abi differs). libnicmalloc must not open it; if it did, the open
 * says so and ends the process (tests/regcache/plugin_dir.sh). */
#include <stdio.h>
#include <stdlib.h>

__attribute__((visibility("default"))) const unsigned nic_backend_abi = 1;

__attribute__((visibility("default"))) void *nic_backend_dpdk_open(const void *host) {
  (void)host;
  fputs("old plugin opened\n", stderr);
  exit(3);
}
