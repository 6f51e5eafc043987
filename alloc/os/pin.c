#define _GNU_SOURCE
#include "pin.h"

#include "log.h"
#include "maps.h"
#include "memcg.h"
#include "nocancel.h"
#include "page.h"
#include "valgrind.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int nic_reserve_fixed(void *addr, size_t len) {
  void *p =
      mmap(addr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return p == MAP_FAILED ? -errno : 0;
}

/* Reads one small sysfs/procfs number without stdio (no malloc). */
static long read_long_file(const char *path) {
  int fd = nic_open_nocancel(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[32];
  ssize_t n = nic_read_nocancel(fd, buf, sizeof buf - 1);
  nic_close_nocancel(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  return strtol(buf, NULL, 10);
}

size_t free_hugepages_of(size_t page_size) {
  char path[96];
  snprintf(path, sizeof path, "/sys/kernel/mm/hugepages/hugepages-%zukB/free_hugepages",
           page_size >> 10);
  long n = read_long_file(path);
  return n > 0 ? (size_t)n : 0;
}

/* Coverage of a range by writable mappings, from /proc/self/maps: where the walk has got to. */
struct writable_walk {
  uintptr_t next;
  bool writable;
};

static bool note_writable(const struct nic_maps_entry *e, void *arg) {
  struct writable_walk *w = arg;
  if (e->start > w->next || !e->writable) return w->writable = false;
  w->next = e->end;
  return true;
}

/* False only when the maps say some page of the range cannot be written; unknown (no /proc)
 * counts as writable, as it was before the program could make it otherwise. */
static bool range_writable(void *addr, size_t len) {
  struct writable_walk w = {.next = (uintptr_t)addr, .writable = true};
  if (nic_maps_walk((uintptr_t)addr, (uintptr_t)addr + len, note_writable, &w)) return true;
  return w.writable && w.next >= (uintptr_t)addr + len;
}

/* Faults every page in now, so no page fault happens on a later DMA or hot-path access. The
 * range may hold the program's blocks already (a step populated at its first registration), so
 * nothing here may change a byte of it.
 *
 * MADV_POPULATE_WRITE fails with EINVAL both on a kernel that does not know it (before 5.14) and
 * where a page of the range is not writable (the program mprotect'ed part of its dataplane
 * memory): an empty range tells the two apart, as only the advice is checked for it. A range not
 * all writable is refused with -EFAULT, since a touch would die of SIGSEGV and the NIC could not
 * be given it anyway. Only the old kernel gets the pages touched one by one, with an atomic add
 * of 0: a fault for write that keeps the byte, also against another thread storing to it. Any
 * other error (ENOMEM, EFAULT for SIGBUS) means memory cannot be had, and touching it would end
 * in the OOM killer, a SIGBUS, or a wait forever in a cgroup with its OOM killer off. */
static int prefault(void *addr, size_t len, size_t step) {
  if (madvise(addr, len, MADV_POPULATE_WRITE) == 0) return 0;
  if (errno != EINVAL) return -errno;
  if (syscall(SYS_madvise, addr, 0, MADV_POPULATE_WRITE) == 0 || !range_writable(addr, len))
    return -EFAULT;
  for (size_t off = 0; off < len; off += step)
    __atomic_fetch_add((volatile char *)addr + off, 0, __ATOMIC_RELAXED);
  return 0;
}

/* The calling thread's minor faults; MADV_POPULATE_WRITE's count too, as the touch loop's do. */
static long thread_faults(void) {
  struct rusage u;
  return getrusage(RUSAGE_THREAD, &u) == 0 ? u.ru_minflt : -1;
}

/* Whether a transparent huge page backs part of a range just prefaulted, told by the faults it
 * took: one per 4 KiB page, one per huge page. Reading AnonHugePages from /proc/self/smaps would
 * cost the kernel a walk of every mapping's page tables (over 100 ms with 1 GiB resident), on
 * every step backed. A range mimalloc wrote to before (any_resident) takes fewer faults too;
 * then the kind may be said to be thp wrongly, which only the stats and the log see. */
static bool thp_backed(size_t len, long faults_before) {
  const long faults = thread_faults() - faults_before;
  const size_t pages = len / NIC_PAGE_SIZE, per_huge = (2ul << 20) / NIC_PAGE_SIZE;
  return faults_before >= 0 && faults >= 0 && (size_t)faults + (per_huge - 1) <= pages;
}

static bool thp_possible(void) {
  int fd = nic_open_nocancel("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[128];
  ssize_t n = nic_read_nocancel(fd, buf, sizeof buf - 1);
  nic_close_nocancel(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  return strstr(buf, "[never]") == NULL;
}

/* Dataplane memory no backend registered yet is locked as it is touched, a page at a time: under
 * the system's THP mode "always" a first touch would fault in, and lock, a whole 2 MiB page (and
 * NICMALLOC_PAGE_KIND=4k would get them too). So every range that goes back to lazy is advised
 * small; MADV_HUGEPAGE replaces it where a step is faulted in whole with huge pages wanted.
 * Where the kernel has no THP the advice fails (EINVAL) and changes nothing. */
static void advise_small_pages(void *addr, size_t len) {
  madvise(addr, len, MADV_NOHUGEPAGE);
}

void nic_unmap_chunk(void *addr, size_t len) {
  munlock(addr, len);
  nic_reserve_fixed(addr, len);
}

void nic_release_chunk_memory(void *addr, size_t len) {
  munlock(addr, len);
  /* A fresh mapping also returns hugetlb pages to their pool, which MADV_DONTNEED may not. */
  if (mmap(addr, len, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
    syscall(SYS_madvise, addr, len, MADV_DONTNEED); /* the interposed one keeps dataplane pages */
  advise_small_pages(addr, len);
}

int nic_map_lazy(void *addr, size_t len) {
  void *p = mmap(addr, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (p != MAP_FAILED) {
    advise_small_pages(addr, len);
    return 0;
  }
  int err = errno;
  nic_reserve_fixed(addr, len);
  return -err;
}

size_t nic_resident_bytes(void *addr, size_t len, bool *known) {
  unsigned char vec[1024]; /* a 4 MiB step in one call */
  size_t pages = 0;
  if (known) *known = true;
  for (size_t off = 0; off < len; off += sizeof vec * NIC_PAGE_SIZE) {
    size_t part = len - off < sizeof vec * NIC_PAGE_SIZE ? len - off : sizeof vec * NIC_PAGE_SIZE;
    if (mincore((char *)addr + off, part, vec) != 0) {
      if (known) *known = false;
      return len; /* unknown: say all of it */
    }
    for (size_t i = 0; i < part / NIC_PAGE_SIZE; i++)
      pages += vec[i] & 1;
  }
  return pages * NIC_PAGE_SIZE;
}

/* Whether any page of the range is resident: a step mimalloc wrote to without committing it
 * first (a segment from its cache, after the chunk was released) must keep its bytes. */
static bool any_resident(void *addr, size_t len) {
  return nic_resident_bytes(addr, len, NULL) != 0; /* unknown counts as all: keep it */
}

/* Back to the lazy mapping a step had before a failed hugetlb try. */
static void restore_lazy(void *addr, size_t len) {
  mmap(addr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
       -1, 0);
  advise_small_pages(addr, len);
}

/* Whether the machine's pool has the huge pages for the range now (another process may take
 * them before the mapping does: the mapping then fails and the step falls back). */
static bool pool_has(void *addr, size_t len, size_t page_size) {
  return len % page_size == 0 && (uintptr_t)addr % page_size == 0 &&
         free_hugepages_of(page_size) >= len / page_size;
}

/* Over a range pool_has said yes for. */
static int map_hugetlb_step(void *addr, size_t len, int size_flag) {
  void *p =
      mmap(addr, len, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_HUGETLB | size_flag | MAP_POPULATE, -1, 0);
  if (p != MAP_FAILED) return 0;
  int err = errno;
  restore_lazy(addr, len);
  return -err;
}

/* Locks each page of the range as it is first touched, and the ones present now. False where
 * the kernel has no MLOCK_ONFAULT (before 4.4) or the call is filtered: the caller then
 * prefaults and locks the range whole, as NICMALLOC_DP_POPULATE=commit does. A refusal for
 * RLIMIT_MEMLOCK (ENOMEM, EPERM, EAGAIN) is an answer, not a missing feature: it is kept in
 * *err, as mlock's would be. */
static bool lock_on_fault(void *addr, size_t len, int *err) {
  *err = 0;
  /* Valgrind 3.19 does not know mlock2: it fails it, as an old kernel would, after a warning
   * that asks the user for a bug report. */
  if (nic_under_valgrind()) return false;
  if (syscall(SYS_mlock2, addr, len, MLOCK_ONFAULT) == 0) return true;
  if (errno == ENOSYS || errno == EINVAL) return false;
  *err = errno;
  return true;
}

int nic_lock_step_in_place(void *addr, size_t len) {
  int err;
  if (!lock_on_fault(addr, len, &err)) return -ENOTSUP;
  return -err;
}

int nic_back_step(void *addr, size_t len, enum nic_page_kind want, bool populate, size_t lazy_bytes,
                  bool pin_or_nothing, struct nic_mapping *out) {
  out->kind = NIC_PAGE_NONE;
  out->pinned = false;
  out->pin_errno = 0;
  out->populated = true;
  /* hugetlb replaces the mapping: only over pages nobody wrote yet. */
  /* The pool first: while it is empty (most machines) no step pays for the residency walk. */
  const bool try_1g = want >= NIC_PAGE_1G && pool_has(addr, len, 1ul << 30);
  const bool try_2m = want >= NIC_PAGE_2M && pool_has(addr, len, 2ul << 20);
  const bool fresh = (try_1g || try_2m) && !any_resident(addr, len);
  if (fresh && try_1g && map_hugetlb_step(addr, len, MAP_HUGE_1GB) == 0)
    out->kind = NIC_PAGE_1G;
  else if (fresh && try_2m && map_hugetlb_step(addr, len, MAP_HUGE_2MB) == 0)
    out->kind = NIC_PAGE_2M;
  else {
    int err;
    /* Room for the whole step all the same, and for what earlier steps locked as touched may
     * still take: a step backed here can always be touched whole. */
    if (!populate && nic_memcg_headroom() < len + len / 8 + lazy_bytes) return -EDQUOT;
    /* Locked before a page comes in: a lock RLIMIT_MEMLOCK has no room for is refused before
     * anything is faulted in. A step faulted in whole and then refused the lock kept its pages
     * under pin_or_nothing (4 MiB each, in no statistic, each retry another step). */
    const bool on_fault = lock_on_fault(addr, len, &err);
    if (on_fault && (!populate || (err && pin_or_nothing))) {
      /* Faulted in as touched, in small pages (advise_small_pages: a first touch under
       * MADV_HUGEPAGE, or THP "always", would fault in 2 MiB), or whole by nic_populate_step
       * before a registration, in transparent huge pages where they can be had. */
      out->kind = NIC_PAGE_4K;
      out->populated = false;
      out->pinned = err == 0;
      out->pin_errno = err;
      return 0;
    }
    const bool thp = want >= NIC_PAGE_THP && thp_possible();
    if (thp) madvise(addr, len, MADV_HUGEPAGE);
    if (nic_memcg_headroom_now() < len + len / 8) {
      if (on_fault && !err) munlock(addr, len);
      return -EDQUOT; /* prefaulting it would wake the cgroup's OOM killer: see memcg.c */
    }
    const long faults_before = thp ? thread_faults() : -1;
    int rc = prefault(addr, len, NIC_PAGE_SIZE);
    if (rc) { /* the range stays as it was: readable, writable, not backed, not locked */
      if (on_fault && !err) munlock(addr, len);
      return rc;
    }
    out->kind = thp && thp_backed(len, faults_before) ? NIC_PAGE_THP : NIC_PAGE_4K;
    /* Every page came in under the lock on fault: locked, as mlock would have. */
    if (on_fault) {
      out->pinned = err == 0;
      out->pin_errno = err;
      return 0;
    }
  }
  if (mlock(addr, len) == 0)
    out->pinned = true;
  else
    out->pin_errno = errno;
  /* hugetlb pages from the pool, over a step nobody wrote to (fresh): back to the pool. */
  if (!out->pinned && pin_or_nothing && out->kind >= NIC_PAGE_2M) restore_lazy(addr, len);
  return 0;
}

int nic_populate_step(void *addr, size_t len, enum nic_page_kind want, struct nic_mapping *m) {
  if (nic_memcg_headroom_now() < len + len / 8) return -EDQUOT;
  const bool thp = want >= NIC_PAGE_THP && thp_possible();
  if (thp) madvise(addr, len, MADV_HUGEPAGE);
  const long faults_before = thp ? thread_faults() : -1;
  int rc = prefault(addr, len, NIC_PAGE_SIZE);
  if (rc) return rc;
  /* Pages touched before stay small (khugepaged may merge them later): thp only when the
   * faults say huge pages came, as nic_back_step tells. */
  if (thp && thp_backed(len, faults_before)) m->kind = NIC_PAGE_THP;
  m->populated = true;
  return 0;
}

void nic_release_step_memory(void *addr, size_t len) {
  nic_release_chunk_memory(addr, len);
}

const char *nic_page_kind_str(enum nic_page_kind kind) {
  switch (kind) {
  case NIC_PAGE_4K:
    return "4k";
  case NIC_PAGE_THP:
    return "thp";
  case NIC_PAGE_2M:
    return "2m";
  case NIC_PAGE_1G:
    return "1g";
  default:
    return "none";
  }
}
