/* See readable.h. nicmalloc's own memory is answered from its maps (the chunk table, the control
 * arena's commit map) without a system call; anything else is asked of the kernel, which checks
 * the protection as a NIC's registration would. */
#define _GNU_SOURCE
#include "readable.h"

#include "chunks.h"
#include "commit_map.h"
#include "own_stack.h"
#include "page.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#define BATCH 256 /* pages per system call */

/* Without process_vm_readv (a seccomp filter, say): presence alone, as before. */
static bool mapped(uintptr_t first, uintptr_t end) {
  unsigned char vec[BATCH];
  for (uintptr_t a = first; a < end; a += BATCH * NIC_PAGE_SIZE) {
    size_t n = end - a < BATCH * NIC_PAGE_SIZE ? end - a : BATCH * NIC_PAGE_SIZE;
    if (mincore((void *)a, n, vec)) return false;
  }
  return true;
}

/* Reads one byte of every page through the kernel: a page that cannot be read ends the copy
 * short instead of faulting. */
static bool kernel_readable(uintptr_t start, uintptr_t last) {
  const uintptr_t first = start & ~(NIC_PAGE_SIZE - 1),
                  end = (last & ~(NIC_PAGE_SIZE - 1)) + NIC_PAGE_SIZE;
  char sink[BATCH];
  struct iovec local = {.iov_base = sink}, remote[BATCH];
  for (uintptr_t a = first; a < end;) {
    unsigned n = 0;
    for (; n < BATCH && a < end; n++, a += NIC_PAGE_SIZE)
      remote[n] = (struct iovec){.iov_base = (void *)(a < start ? start : a), .iov_len = 1};
    local.iov_len = n;
    ssize_t got = process_vm_readv(gettid(), &local, 1, remote, n, 0);
    if (got < 0 && (errno == ENOSYS || errno == EPERM)) return mapped(first, end);
    if (got != (ssize_t)n) return false;
  }
  return true;
}

bool nic_range_readable(const void *p, size_t len) {
  const uintptr_t start = (uintptr_t)p, last = start + len - 1;
  if (nic_in_dp(p) && nic_in_dp((const void *)last)) { /* every chunk it touches is mapped */
    for (unsigned i = nic_chunk_index(p); i <= nic_chunk_index((const void *)last); i++)
      if (!nic_chunk_readable(i)) return false;
    return true;
  }
  const uintptr_t off = start - nic_commit_map.base, checked = nic_commit_map.checked;
  if (off < checked && last - start < checked - off) {
    for (uintptr_t o = off & ~(NIC_PAGE_SIZE - 1); o <= off + (last - start); o += NIC_PAGE_SIZE)
      if (!nic_commit_map_readable(o)) return false;
    return true;
  }
  if (nic_on_own_stack(start, last)) return true;
  const int saved = errno;
  bool ok = kernel_readable(start, last);
  errno = saved;
  return ok;
}
