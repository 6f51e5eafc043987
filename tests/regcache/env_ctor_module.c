/* A library that reads the environment in its constructor, as libnl does under rdma-core (NLDBG,
 * NLSYSCONFDIR), and sets a variable there, as DPDK's drivers do for rdma-core: what
 * test_plugin_env loads while the environment is hidden. */
#include <stdio.h>
#include <stdlib.h>

static char seen_var[256], seen_runtime[256];

static void copy(char *to, const char *from) {
  snprintf(to, 256, "%s", from ? from : "(null)");
}

__attribute__((constructor)) static void read_at_load(void) {
  copy(seen_var, getenv("NIC_TEST_CTOR_VAR"));
  copy(seen_runtime, getenv("RUNTIME_DIRECTORY"));
  setenv("NIC_TEST_SET_BY_LIBRARY", "set at load", 1);
}

__attribute__((visibility("default"))) const char *env_ctor_seen(int which) {
  return which ? seen_runtime : seen_var;
}
