/* A setuid-root program linked with -lnicmalloc, run by an unprivileged user in setuid.sh. It
 * does what makes nicmalloc read each setting that names a file, a plugin or arguments: it
 * allocates (site table, profile, sites at start-up) and registers memory (the backend, and
 * with NICMALLOC_BACKEND=dpdk the EAL and its arguments). With the argument dpdk or verbs it also
 * opens that backend by code, as a program may whatever the environment says (DPDK's EAL then
 * starts, rdma-core loads; both read their own environment variables). */
#include <mimalloc.h>
#include <nicmalloc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  /* Unbuffered: MIMALLOC_DESTROY_ON_EXIT's control run frees the heap, a stdout buffer in it
   * included, before the C library flushes it at exit. */
  setvbuf(stdout, NULL, _IONBF, 0);
  char *block = malloc(1 << 16);
  if (!block) return 1;
  memset(block, 1, 1 << 16);
  struct nic_region_ref ref;
  int rc = nic_register(block, 1 << 16, NIC_REG_LOCAL, &ref);
  if (rc == 0) nic_unregister(&ref);
  if (argc > 1 && !strcmp(argv[1], "dpdk")) {
    struct nic_endpoint *ep = nic_dpdk_endpoint_create(0, 0);
    printf("dpdk endpoint %d\n", ep != NULL);
  }
  if (argc > 1 && !strcmp(argv[1], "verbs")) printf("verbs pd %d\n", nic_verbs_get_pd() != NULL);
  printf("mimalloc destroy_on_exit %ld\n", mi_option_get(mi_option_destroy_on_exit));
  printf("probe ok: euid %d uid %d register %d\n", (int)geteuid(), (int)getuid(), rc);
  free(block);
  return 0;
}
