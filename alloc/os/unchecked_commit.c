#define _GNU_SOURCE
#include "unchecked_commit.h"

#include "commit_map.h"
#include "log.h"
#include "mi_layout.h"
#include "proc_number.h"
#include "vspace.h"

#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The raw calls: the interposed mmap and munmap would tell the registration cache of pages that
 * nobody could have registered. MAP_NORESERVE as the arena's reservation has it, so that the
 * kernel counts this mapping exactly when it counts the arena's commits. */
static bool mapping_room(size_t len) {
  const long p = syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == -1) return false;
  syscall(SYS_munmap, (void *)p, len);
  return true;
}

/* Under RLIMIT_DATA, what the process has of it (VmData) and len more. */
static bool data_room(size_t len) {
  struct rlimit lim;
  if (getrlimit(RLIMIT_DATA, &lim) || lim.rlim_cur == RLIM_INFINITY) return true;
  const long long kb = nic_proc_own_number("status", "VmData:");
  return kb >= 0 && ((unsigned long long)kb << 10) + len <= lim.rlim_cur;
}

/* Under strict overcommit, len more under CommitLimit, less both reserves the kernel may keep
 * back (the admin's, for a process without CAP_SYS_ADMIN; the user's): one of them too many
 * refuses a commit the kernel would make, never the other way. */
static bool overcommit_room(size_t len) {
  const long long mode = nic_proc_number(NIC_OVERCOMMIT_MODE, NULL);
  if (mode != NIC_OVERCOMMIT_NEVER) return mode >= 0;
  const long long limit = nic_proc_number("/proc/meminfo", "CommitLimit:"),
                  committed = nic_proc_number("/proc/meminfo", "Committed_AS:"),
                  admin = nic_proc_number("/proc/sys/vm/admin_reserve_kbytes", NULL),
                  user = nic_proc_number("/proc/sys/vm/user_reserve_kbytes", NULL);
  if (limit < 0 || committed < 0 || admin < 0 || user < 0) return false;
  return committed + admin + user + (long long)(len >> 10) < limit;
}

/* The mapping asks everything the commit meets, and one thing it does not: RLIMIT_AS counts a
 * new mapping but not a commit inside the arena's reservation, so under a limit a program lowered
 * while it runs (README, "malloc goes on") every huge request was refused. Where that limit
 * alone explains the refusal, the two limits the commit does meet are asked one by one. */
bool nic_commit_room(size_t len) {
  if (mapping_room(len)) return true;
  uint64_t room = 0;
  if (nic_vspace_limit(&room) == UINT64_MAX || room >= len) return false;
  return data_room(len) && overcommit_room(len);
}

size_t nic_huge_commit_bytes(size_t size) {
  const size_t slices = (size >> NIC_MI_SLICE_SHIFT) + 2;
  const size_t header = NIC_MI_SEG_SLICES + (slices + 1) * NIC_MI_PAGE_HEADER;
  const size_t total = header + size + ((size_t)1 << NIC_MI_SLICE_SHIFT);
  return (total + NIC_MI_ARENA_BLOCK - 1) & ~(NIC_MI_ARENA_BLOCK - 1);
}

__thread bool nic_huge_commit_expected __attribute__((tls_model("initial-exec")));

void nic_commit_refused(void *addr, size_t len, int err) {
  const uintptr_t a = (uintptr_t)addr, base = nic_commit_map.base;
  if (!nic_huge_commit_expected || !base || a - base >= nic_commit_map.size) return;
  if (a % NIC_MI_ARENA_BLOCK || len % NIC_MI_ARENA_BLOCK) return; /* a commit mimalloc checks */
  nic_fatal("the kernel refused to commit %zu MiB of the control heap at %p (%s), and mimalloc "
            "2.0.9 uses an arena commit without checking it (the segment of a block over 16 MiB): "
            "aborting before it writes there. Below "
            "vm.overcommit_memory=2's commit limit or RLIMIT_DATA such a request gets ENOMEM; "
            "here another thread or process took the room first",
            len >> 20, addr, strerror(err));
}
