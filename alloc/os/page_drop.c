#define _GNU_SOURCE
#include "page_drop.h"

#include "page.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif

/* The system call itself: the interposed madvise (interpose.c) keeps dataplane pages in place. */
static int raw_madvise(void *addr, size_t len, int advice) {
  return syscall(SYS_madvise, addr, len, advice) == 0 ? 0 : -errno;
}

int nic_drop_pages(void *addr, size_t len, bool locked) {
  return raw_madvise(addr, len, locked ? MADV_DONTNEED_LOCKED : MADV_DONTNEED);
}

int nic_refill_pages(void *addr, size_t len) {
  int rc = raw_madvise(addr, len, MADV_POPULATE_WRITE);
  if (rc != -EINVAL) return rc;
  /* Before 5.14: the range is free memory nobody reads, so a write per page is harmless. */
  for (size_t off = 0; off < len; off += NIC_PAGE_SIZE)
    ((volatile char *)addr)[off] = 0;
  return 0;
}
