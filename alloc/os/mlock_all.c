/* mlockall, interposed to say why MCL_CURRENT is refused under a finite memory-lock limit. The
 * kernel refuses mlockall(MCL_CURRENT) with ENOMEM to a process without CAP_IPC_LOCK whose mapped
 * address space exceeds RLIMIT_MEMLOCK, reserved and never-touched space included, before it
 * locks anything. nicmalloc's control arena (up to 4 TiB, uncommitted) and its tables (about
 * 1.1 GiB of them for that arena, read-only zero pages until used) so make the call fail in a
 * program that locks itself within a finite limit, as it does without nicmalloc (measured: a
 * program run as nobody under the default 8 MiB). Locking mapping by mapping in its place would
 * not do: the tables, and the library's own static data (13.5 MiB), are over such limits. So the
 * first such refusal is said once, with nicmalloc's part and the ways out; the call's answer is
 * the kernel's. With CAP_IPC_LOCK (root) the call succeeds, and populates the tables' zero pages:
 * 0.5 s, and about 47 MiB of resident memory (mimalloc alone: 34 MiB, its first segment). */
#define _GNU_SOURCE
#include "export.h"
#include "log.h"
#include "vspace.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static void explain(void) {
  struct rlimit limit;
  const uint64_t ours = nic_vspace_held();
  const uint64_t mapped = nic_vspace_mapped();
  /* Whether the program's own mappings would be refused too is not known (nicmalloc's static
   * tables are mapped with it): the line says what part is ours. */
  if (getrlimit(RLIMIT_MEMLOCK, &limit) || limit.rlim_cur == RLIM_INFINITY || !mapped ||
      mapped <= limit.rlim_cur || !ours)
    return;
  nic_log_warn_once("mlockall(MCL_CURRENT) was refused (ENOMEM): the kernel tests the whole mapped "
                    "address space (%llu MiB) against RLIMIT_MEMLOCK (%llu MiB), and %llu MiB of "
                    "it is nicmalloc's reserved address space and tables, never committed. With "
                    "CAP_IPC_LOCK, or an unlimited memory-lock limit, the call succeeds",
                    (unsigned long long)(mapped >> 20), (unsigned long long)(limit.rlim_cur >> 20),
                    (unsigned long long)(ours >> 20));
}

NIC_EXPORT int mlockall(int flags) {
  const int rc = (int)syscall(SYS_mlockall, flags);
  if (rc && errno == ENOMEM && (flags & MCL_CURRENT)) {
    explain();
    errno = ENOMEM;
  }
  return rc;
}
