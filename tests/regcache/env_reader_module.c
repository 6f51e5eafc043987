/* A library that reads the environment with its own getenv import, as DPDK's EAL and rdma-core's
 * providers do: what test_plugin_env loads after its mark. ENV_READER_NAME tells two copies
 * apart. */
#include <stdlib.h>

#ifndef ENV_READER_NAME
#define ENV_READER_NAME env_reader_get
#endif

__attribute__((visibility("default"))) const char *ENV_READER_NAME(const char *name) {
  return getenv(name);
}
