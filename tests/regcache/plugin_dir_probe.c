/* Leaves the directory it was started in, then makes a dpdk endpoint (NICMALLOC_BACKEND=dpdk
 * and NICMALLOC_DPDK_VDEV set by tests/regcache/plugin_dir.sh): the plugin must be found
 * however libnicmalloc was found, by a relative path or through a symbolic link. */
#include <nicmalloc.h>
#include <stdio.h>
#include <unistd.h>

int main(void) {
  if (chdir("/") != 0) return 2;
  struct nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  printf("dpdk endpoint: %s\n", ep ? "made" : "none");
  if (ep) nic_dpdk_endpoint_destroy(ep);
  return 0;
}
