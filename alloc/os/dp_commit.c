#include "dp_commit.h"

struct nic_dp_commit nic_dp_commit;

void nic_dp_commit_set(uintptr_t base, size_t span, int (*commit)(void *addr, size_t len),
                       void (*decommit)(void *addr, size_t len)) {
  nic_dp_commit.commit = commit;
  nic_dp_commit.decommit = decommit;
  nic_dp_commit.span = span;
  __atomic_store_n(&nic_dp_commit.base, base, __ATOMIC_RELEASE);
}
