#define _GNU_SOURCE
#include "unchecked_commit.h"

#include "commit_map.h"
#include "log.h"
#include "mi_layout.h"

#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The raw calls: the interposed mmap and munmap would tell the registration cache of pages that
 * nobody could have registered. MAP_NORESERVE as the arena's reservation has it, so that the
 * kernel counts this mapping exactly when it counts the arena's commits. */
bool nic_commit_room(size_t len) {
  const long p = syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == -1) return false;
  syscall(SYS_munmap, (void *)p, len);
  return true;
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
