/* Calls that change which pages back an address range tell the layers above first
 * (events.h: pages_leaving), so that the registration cache never hands the NIC a registration
 * that still pins the old pages, and the sim NIC keeps the old pages' bytes for posts still to
 * read them; and again once the call has returned (pages_left), for what another thread
 * registered in between (a miss that pinned the old pages while the call was on its way).
 * Preloaded or linked into the program, nicmalloc's definitions also catch
 * mimalloc's own commits and decommits (it calls mprotect, madvise and munmap through the PLT),
 * which the control arena's commit map records once they succeeded; loaded later, libmimalloc's
 * imports are pointed at the static bodies below (mimalloc_imports.h). Each forwards to the system
 * call directly, as glibc does. Pages a call maps anew are invalidated after it too: that catches
 * some of what went by a path none of these saw (os_mmap says what not). mprotect goes through a
 * watcher that protects pages itself, if there is one (events.h). */
#define _GNU_SOURCE
#include "as_limit.h"
#include "commit_map.h"
#include "dp_commit.h"
#include "events.h"
#include "export.h"
#include "imports.h"
#include "late_decommit.h"
#include "mimalloc_imports.h"
#include "page.h"
#include "unchecked_commit.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *raw_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset) {
  long r = syscall(SYS_mmap, addr, len, prot, flags, fd, offset);
  return r == -1 ? MAP_FAILED : (void *)r;
}

static void *os_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset) {
  /* Only a fixed mapping can replace pages the cache knows. */
  const bool fixed = flags & (MAP_FIXED | MAP_FIXED_NOREPLACE);
  if (fixed) {
    nic_late_decommit_forget(addr, len);
    nic_publish_pages_leaving((uintptr_t)addr, len);
  }
  void *p = raw_mmap(addr, len, prot, flags, fd, offset);
  if (fixed) nic_publish_pages_left((uintptr_t)addr, len);
  if (p == MAP_FAILED) {
    nic_as_limit_mapping_refused();
    return p;
  }
  /* Anywhere but over a fixed mapping the pages are fresh: a region still cached there lost its
   * pages by a path none of these calls saw (a raw system call). This catches only what the
   * program maps through here afterwards: the C library maps a thread's stack by its own call,
   * as it unmaps the one before, so a thread's stack is dropped at its exit instead
   * (heap/thread.h: nic_thread_stack_watched). */
  if (fixed)
    nic_commit_map_note(p, len, NIC_PAGES_GONE); /* no blocks */
  else
    nic_publish_range_stale((uintptr_t)p, len);
  return p;
}

NIC_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset) {
  return os_mmap(addr, len, prot, flags, fd, offset);
}

NIC_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t offset) {
  return os_mmap(addr, len, prot, flags, fd, offset);
}

static int os_munmap(void *addr, size_t len) {
  nic_late_decommit_forget(addr, len);
  nic_publish_pages_leaving((uintptr_t)addr, len);
  int rc = (int)syscall(SYS_munmap, addr, len);
  nic_publish_pages_left((uintptr_t)addr, len);
  if (rc == 0) nic_commit_map_note(addr, len, NIC_PAGES_GONE);
  return rc;
}

NIC_EXPORT int munmap(void *addr, size_t len) {
  return os_munmap(addr, len);
}

NIC_EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
  void *new_addr = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    new_addr = va_arg(ap, void *);
    va_end(ap);
    nic_late_decommit_forget(new_addr, new_len);
    nic_publish_pages_leaving((uintptr_t)new_addr, new_len);
  }
  nic_late_decommit_forget(old, old_len);
  nic_publish_pages_leaving((uintptr_t)old, old_len);
  long r = syscall(SYS_mremap, old, old_len, new_len, flags, new_addr);
  if (flags & MREMAP_FIXED) nic_publish_pages_left((uintptr_t)new_addr, new_len);
  nic_publish_pages_left((uintptr_t)old, old_len);
  if (r == -1) {
    nic_as_limit_mapping_refused();
    return MAP_FAILED;
  }
  if ((void *)r != old || new_len > old_len)
    nic_publish_range_stale((uintptr_t)r, new_len); /* see mmap */
  /* Pages that left, or arrived from elsewhere: either way no block of the arena is there. */
  if ((void *)r != old) {
    nic_commit_map_note(old, old_len, NIC_PAGES_GONE);
    nic_commit_map_note((void *)r, new_len, NIC_PAGES_GONE);
  } else if (new_len < old_len) {
    nic_commit_map_note((char *)old + new_len, old_len - new_len, NIC_PAGES_GONE);
  }
  return (void *)r;
}

static int drops_pages(int advice) {
  switch (advice) {
  case MADV_DONTNEED:
  case MADV_FREE:
  case MADV_REMOVE:
#ifdef MADV_DONTNEED_LOCKED
  case MADV_DONTNEED_LOCKED:
#endif
    return 1;
  default:
    return 0;
  }
}

static int os_madvise(void *addr, size_t len, int advice) {
  /* mimalloc's decommits and resets of dataplane memory: its pages stay pinned and registered
   * (and the kernel refuses to drop locked pages anyway); the heap gives steps back itself. */
  if (drops_pages(advice) && nic_dp_commit_covers(addr)) {
    if (advice == MADV_DONTNEED) nic_dp_commit.decommit(addr, len); /* a reset is no decommit */
    return 0;
  }
  const bool drops = drops_pages(advice);
  if (drops) {
    /* A decommit of a control segment a dataplane heap's visit may not take: after the purge
     * delay, unless mimalloc commits the pages again first (late_decommit.h). */
    if (advice == MADV_DONTNEED && nic_late_decommit_note(addr, len)) return 0;
    nic_late_decommit_forget(addr, len);
    nic_publish_pages_leaving((uintptr_t)addr, len);
  }
  int rc = (int)syscall(SYS_madvise, addr, len, advice);
  if (drops) nic_publish_pages_left((uintptr_t)addr, len);
  /* mimalloc decommits with DONTNEED. MADV_FREE is its "reset", after which it reuses the
   * memory as committed: that must not clear the map. */
  if (rc == 0 && (advice == MADV_DONTNEED || advice == MADV_REMOVE))
    nic_commit_map_note(addr, len, NIC_PAGES_DROPPED);
  return rc;
}

/* The program's drop of dataplane memory (a live block's pages): Linux's answer, zeros, without
 * the pages leaving their pinned, registered step, and without the heap taking it for mimalloc's
 * decommit (the block then looked freed). Pages not in memory read as zeros already; touching
 * them would back them unpinned. Few calls: the vector is a stack buffer, a window at a time. */
static int program_drops_dp(void *addr, size_t len, int advice) {
  if ((uintptr_t)addr & (NIC_PAGE_SIZE - 1)) return errno = EINVAL, -1;
  if (advice == MADV_FREE) return 0; /* the kernel may keep the bytes too */
  unsigned char resident[512];
  const uintptr_t start = (uintptr_t)addr, end = nic_page_up(start + len);
  for (uintptr_t a = start; a < end;) {
    const size_t pages = (end - a) >> NIC_PAGE_SHIFT < sizeof resident ? (end - a) >> NIC_PAGE_SHIFT
                                                                       : sizeof resident;
    if (syscall(SYS_mincore, a, pages << NIC_PAGE_SHIFT, resident)) return -1;
    for (size_t i = 0; i < pages; i++)
      if (resident[i] & 1) memset((void *)(a + (i << NIC_PAGE_SHIFT)), 0, NIC_PAGE_SIZE);
    a += pages << NIC_PAGE_SHIFT;
  }
  return 0;
}

/* mimalloc's calls reach os_madvise by its own import once that is pointed there
 * (mimalloc_imports.h); until then every call is taken for its. */
NIC_EXPORT int madvise(void *addr, size_t len, int advice) {
  if (drops_pages(advice) && nic_mimalloc_madvise_apart() && nic_dp_commit_covers(addr))
    return program_drops_dp(addr, len, advice);
  return os_madvise(addr, len, advice);
}

int nic_mimalloc_decommit(void *addr, size_t len) {
  return os_madvise(addr, len, MADV_DONTNEED);
}

/* A watcher that write-protects pages of its own makes the call itself (events.h), so that no
 * call makes those pages writable behind its back. */
static int protect_watched(void *addr, size_t len, int prot) {
  int err;
  if (nic_publish_protection_changing((uintptr_t)addr, len, prot, &err))
    return err ? (errno = -err, -1) : 0;
  return (int)syscall(SYS_mprotect, addr, len, prot);
}

static int os_mprotect(void *addr, size_t len, int prot) {
  /* mimalloc's commit inside a dataplane chunk: the range is readable and writable already, and
   * a step is backed (prefaulted, pinned) the first time. No system call: on hugetlb steps one
   * not aligned to the huge page would fail (and a page protect holds stays read-only). */
  if ((prot & PROT_WRITE) && nic_dp_commit_covers(addr)) {
    int rc = nic_dp_commit.commit(addr, len);
    if (rc == 0) return 0;
    errno = -rc;
    return -1;
  }
  /* mimalloc commits what it decommitted before it uses it: pages still there are its again. */
  nic_late_decommit_forget(addr, len);
  int rc;
  rc = protect_watched(addr, len, prot);
  if (rc == 0)
    nic_commit_map_note(addr, len, prot & PROT_READ ? NIC_PAGES_READABLE : NIC_PAGES_GONE);
  else if (prot & PROT_WRITE)
    nic_commit_refused(addr, len, errno);
  return rc;
}

/* mimalloc's calls reach os_mprotect by its own import once that is pointed there
 * (mimalloc_imports.h): the program's on dataplane memory is the program's own, and gives
 * write access back as the kernel does. */
NIC_EXPORT int mprotect(void *addr, size_t len, int prot) {
  if ((prot & PROT_WRITE) && nic_mimalloc_mprotect_apart() && nic_dp_commit_covers(addr))
    return protect_watched(addr, len, prot);
  return os_mprotect(addr, len, prot);
}

NIC_EXPORT int posix_madvise(void *addr, size_t len, int advice) {
  /* POSIX_MADV_DONTNEED is a hint glibc ignores; only the others reach the kernel. */
  if (advice == POSIX_MADV_DONTNEED) return 0;
  return madvise(addr, len, advice) == 0 ? 0 : errno;
}

/* The data segment shrinks by brk or sbrk, again without a munmap; its new pages are fresh (see
 * mmap). glibc's brk and sbrk keep the break in __curbrk, so both go through __sbrk. */
extern void *__sbrk(intptr_t increment);

NIC_EXPORT void *sbrk(intptr_t increment) {
  uintptr_t cur = (uintptr_t)__sbrk(0);
  if (cur == (uintptr_t)-1) return (void *)-1;
  const uintptr_t shrink = increment < 0 ? (uintptr_t)0 - (uintptr_t)increment : 0;
  if (shrink) nic_publish_range_stale(cur - shrink, shrink);
  void *r = __sbrk(increment);
  if (r != (void *)-1 && increment > 0) nic_publish_range_stale(cur, (uintptr_t)increment);
  return r;
}

NIC_EXPORT int brk(void *addr) {
  uintptr_t cur = (uintptr_t)__sbrk(0);
  if (cur == (uintptr_t)-1) return -1;
  return sbrk((intptr_t)((uintptr_t)addr - cur)) == (void *)-1 ? -1 : 0;
}

/* mimalloc_imports.h */
void nic_interpose_own_calls(struct nic_import calls[NIC_OWN_CALLS]) {
  calls[0] = (struct nic_import){"mmap", (void *)os_mmap, false};
  calls[1] = (struct nic_import){"munmap", (void *)os_munmap, false};
  calls[2] = (struct nic_import){"mprotect", (void *)os_mprotect, false};
  calls[3] = (struct nic_import){"madvise", (void *)os_madvise, false};
}
