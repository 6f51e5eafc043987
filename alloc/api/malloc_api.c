/* The standard malloc family, exported for LD_PRELOAD and link-time replacement. */
#define _GNU_SOURCE
#include "alloc_inline.h"
#include "control_sub_pages.h"
#include "export.h"
#include "late_decommit.h"
#include "nocancel.h"
#include "nudge.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

static bool is_power_of_two(size_t x) {
  return x && !(x & (x - 1));
}

static size_t page_size(void) {
  static size_t cached;
  if (!cached) cached = (size_t)sysconf(_SC_PAGESIZE);
  return cached;
}

NIC_EXPORT void *malloc(size_t size) {
  return nic_alloc_auto(size, false);
}

NIC_EXPORT void free(void *p) {
  nic_free_inline(p, "free");
}

NIC_EXPORT void cfree(void *p) {
  nic_free_inline(p, "cfree");
}

/* The bodies shared with glibc's names below, static so that neither name reaches the other
 * through the symbol table (a program defining calloc that calls __libc_calloc would recurse). */
static void *calloc_checked(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return nic_alloc_auto(total, true);
}

NIC_EXPORT void *calloc(size_t count, size_t size) {
  return calloc_checked(count, size);
}

NIC_EXPORT void *realloc(void *p, size_t size) {
  return nic_realloc_routed(p, size, NIC_ROUTE_AUTO, "realloc");
}

NIC_EXPORT void *reallocarray(void *p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return nic_realloc_routed(p, total, NIC_ROUTE_AUTO, "reallocarray");
}

static int posix_memalign_checked(void **out, size_t alignment, size_t size) {
  if (!is_power_of_two(alignment) || alignment % sizeof(void *)) return EINVAL;
  void *p = nic_alloc(size, alignment, false, NIC_ROUTE_AUTO);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

NIC_EXPORT int posix_memalign(void **out, size_t alignment, size_t size) {
  return posix_memalign_checked(out, alignment, size);
}

NIC_EXPORT void *aligned_alloc(size_t alignment, size_t size) {
  if (!is_power_of_two(alignment)) {
    errno = EINVAL;
    return NULL;
  }
  return nic_alloc(size, alignment, false, NIC_ROUTE_AUTO);
}

/* glibc rounds a non-power-of-two alignment up; so do we. */
static void *memalign_rounded(size_t alignment, size_t size) {
  if (alignment > ((size_t)1 << (sizeof(size_t) * 8 - 1))) {
    errno = EINVAL;
    return NULL;
  }
  size_t a = alignment < sizeof(void *) ? sizeof(void *) : alignment;
  if (!is_power_of_two(a)) a = (size_t)1 << (sizeof(size_t) * 8 - __builtin_clzl(a));
  return nic_alloc(size, a, false, NIC_ROUTE_AUTO);
}

NIC_EXPORT void *memalign(size_t alignment, size_t size) {
  return memalign_rounded(alignment, size);
}

NIC_EXPORT void *valloc(size_t size) {
  return nic_alloc(size, page_size(), false, NIC_ROUTE_AUTO);
}

static void *pvalloc_rounded(size_t size) {
  size_t ps = page_size(), rounded;
  if (__builtin_add_overflow(size, ps - 1, &rounded)) {
    errno = ENOMEM;
    return NULL;
  }
  rounded &= ~(ps - 1);
  return nic_alloc(rounded ? rounded : ps, ps, false, NIC_ROUTE_AUTO);
}

NIC_EXPORT void *pvalloc(size_t size) {
  return pvalloc_rounded(size);
}

/* glibc's own names for its allocator. A program or library that calls them directly (an
 * allocation shim taking "the system malloc", a tool's hooks) would otherwise reach glibc's heap
 * under LD_PRELOAD, and a block crossing between the two names aborts in glibc's free or is
 * refused by ours. mimalloc and tcmalloc answer them with their own heap; so do we, naming the
 * call in any report. */
NIC_EXPORT void *__libc_malloc(size_t size) {
  return nic_alloc_auto(size, false);
}

NIC_EXPORT void __libc_free(void *p) {
  nic_free_inline(p, "__libc_free");
}

NIC_EXPORT void *__libc_calloc(size_t count, size_t size) {
  return calloc_checked(count, size);
}

NIC_EXPORT void *__libc_realloc(void *p, size_t size) {
  return nic_realloc_routed(p, size, NIC_ROUTE_AUTO, "__libc_realloc");
}

NIC_EXPORT void *__libc_memalign(size_t alignment, size_t size) {
  return memalign_rounded(alignment, size);
}

NIC_EXPORT void *__libc_valloc(size_t size) {
  return nic_alloc(size, page_size(), false, NIC_ROUTE_AUTO);
}

NIC_EXPORT void *__libc_pvalloc(size_t size) {
  return pvalloc_rounded(size);
}

NIC_EXPORT int __posix_memalign(void **out, size_t alignment, size_t size) {
  return posix_memalign_checked(out, alignment, size);
}

NIC_EXPORT size_t malloc_usable_size(void *p) {
  return nic_usable_size(p, "malloc_usable_size");
}

/* glibc's way to give memory back. Under LD_PRELOAD glibc's own would trim an arena nobody uses;
 * this one empties the huge-block cache, releases empty chunks, frees the empty segments exited
 * threads left, and gives back what the control heap holds free: the calling thread's at once,
 * the other threads' at their next allocation off the fast path (nudge.h). Returns 1 when
 * something went back to the OS, as glibc does. No cancellation point, as glibc's is none: its
 * asks and passes take nicmalloc's locks, and a cancel pending waits for the program's next one. */
NIC_EXPORT int malloc_trim(size_t pad) {
  (void)pad;
  NIC_CANCEL_OFF_SCOPE();
  /* Sized: an unset size is whatever the stack held, and nic_get_stats would refuse it. */
  struct nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  nic_collect();
  /* Not mi_collect(true): on the main thread it would take dataplane segments that exited
   * threads abandoned into the ordinary heap (see nic_collect_abandoned). */
  nic_heap_collect_visiting(mi_heap_get_default(), false);
  nic_collect_abandoned();
  nic_control_trim_owned();
  nic_late_decommit_run(true); /* the visits' decommits too, now */
  nic_nudge_ask_trim();
  nic_get_stats(&after);
  return after.huge_purged > before.huge_purged || after.chunks_released > before.chunks_released ||
         after.control_resident < before.control_resident;
}

/* glibc's report of its arenas; under LD_PRELOAD it would describe memory nobody uses. */
NIC_EXPORT void malloc_stats(void) {
  nic_print_stats(STDERR_FILENO);
}
