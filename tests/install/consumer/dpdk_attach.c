/* A DPDK application's call of nic_dpdk_attach, built against the installed header and
 * libnicmalloc alone (the plugin that does the work is loaded by libnicmalloc, never linked).
 * No EAL runs here, so there is no such port: -EINVAL where the dpdk plugin is installed,
 * -ENODEV where it is not; either way the call opens no backend. */
#include <nicmalloc.h>
#include <stdio.h>

int main(void) {
  const int rc = nic_dpdk_attach(0, 0);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("dpdk_attach: %d, backend %s\n", rc, s.backend);
  return 0;
}
