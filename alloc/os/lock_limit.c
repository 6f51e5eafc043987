/* The memory-lock limit a pin is held to. A backend that pins a registration's pages (io_uring's
 * fixed buffers, verbs memory regions) refuses one over RLIMIT_MEMLOCK with ENOMEM unless the
 * process has CAP_IPC_LOCK. Asked on refusals only (not a fast path), so read each time: the
 * program may change either while it runs. */
#define _GNU_SOURCE
#include "lock_limit.h"

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static int has_ipc_lock(void) {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
  if (syscall(SYS_capget, &header, data)) return 0;
  return (data[CAP_IPC_LOCK / 32].effective >> (CAP_IPC_LOCK % 32)) & 1;
}

uint64_t nic_lock_limit(void) {
  struct rlimit limit;
  if (getrlimit(RLIMIT_MEMLOCK, &limit) || limit.rlim_cur == RLIM_INFINITY || has_ipc_lock())
    return UINT64_MAX;
  return limit.rlim_cur;
}
