#define _GNU_SOURCE
#include "vspace.h"

#include "commit_map.h"
#include "config.h"
#include "foreign_arenas.h"
#include "log.h"
#include "map.h"
#include "page.h"
#include "proc_number.h"
#include "startup.h"
#include "valgrind.h"

#include <errno.h>
#include <mimalloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define CONTROL_ARENA_SIZE ((size_t)4 << 40)
#define CONTROL_ARENA_MIN ((size_t)64 << 30)

bool nic_free_check_strict;
uintptr_t nic_control_base;
size_t nic_control_size;
uint64_t nic_vspace_refusals;
uint64_t nic_vspace_reserved;

void *nic_vspace_reserve(size_t size, size_t align, uintptr_t hint) {
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE;
  /* Step through the window from the hint; each failed try costs one syscall. */
  for (uintptr_t at = (hint + align - 1) & ~(uintptr_t)(align - 1);
       at >= hint && at + size <= NIC_VSPACE_LIMIT; at += size > align ? size : align) {
    void *p = mmap((void *)at, size, PROT_NONE, flags, -1, 0);
    if (p == (void *)at) {
      __atomic_add_fetch(&nic_vspace_reserved, size, __ATOMIC_RELAXED);
      return p;
    }
    if (p != MAP_FAILED)
      munmap(p, size); /* a kernel without NOREPLACE put it elsewhere */
    else if (errno != EEXIST)
      return NULL;
  }
  return NULL;
}

uint64_t nic_vspace_mapped(void) {
  const long long kb = nic_proc_own_number("status", "VmSize:");
  return kb > 0 ? (uint64_t)kb << 10 : 0;
}

uint64_t nic_vspace_soft_limit(void) {
  struct rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) || limit.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return limit.rlim_cur;
}

/* The largest PROT_NONE mapping the limit lets through, by halving the gap between what fitted
 * and what did not (a dozen tries for terabytes). By system call: the interposed mmap would tell
 * the registration cache of mappings that live for one call. */
static uint64_t room_by_trying(uint64_t limit) {
  const uint64_t step = (uint64_t)64 << 20;
  uint64_t fits = 0, fails = (limit + step - 1) & ~(step - 1);
  while (fails - fits > step) {
    const uint64_t size = (fits + (fails - fits) / 2) & ~(step - 1);
    void *p = (void *)syscall(SYS_mmap, NULL, size, PROT_NONE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      fails = size;
    } else {
      syscall(SYS_munmap, p, size);
      fits = size;
    }
  }
  return fits;
}

uint64_t nic_vspace_limit(uint64_t *room) {
  const uint64_t limit = nic_vspace_soft_limit();
  if (limit == UINT64_MAX) return limit;
  const uint64_t mapped = nic_vspace_mapped();
  /* No /proc: taking what the kernel gives, as before, left the program nothing to map. */
  if (!mapped)
    *room = room_by_trying(limit);
  else
    *room = mapped < limit ? limit - mapped : 0;
  return limit;
}

uint64_t nic_vspace_held(void) {
  return __atomic_load_n(&nic_vspace_reserved, __ATOMIC_RELAXED) +
         __atomic_load_n(&nic_map_bytes, __ATOMIC_RELAXED);
}

static bool page_mapped(uintptr_t a) {
  unsigned char in_core;
  return mincore((void *)nic_page_down(a), NIC_PAGE_SIZE, &in_core) == 0;
}

/* mi_free reads the segment header at the 32 MiB boundary below a block (MI_SEGMENT_SIZE in
 * 2.0.9): unless that page is mapped too, the pointer cannot be mimalloc's, and passing it on
 * would fault. */
bool nic_vspace_trusted_beyond_map(const void *p) {
  if (nic_free_check_strict || (uintptr_t)p < NIC_VSPACE_LIMIT) return false;
  return page_mapped((uintptr_t)p & ~(((uintptr_t)32 << 20) - 1)) && page_mapped((uintptr_t)p);
}

bool nic_control_arena_init(bool use_commit_map) {
  /* valgrind.h: what a big reservation costs there */
  const size_t first = nic_under_memcheck() ? CONTROL_ARENA_MIN : CONTROL_ARENA_SIZE;
  for (size_t size = first; size >= CONTROL_ARENA_MIN; size /= 2) {
    void *base = nic_vspace_reserve(size, (size_t)32 << 20, NIC_CONTROL_HINT);
    if (!base) continue;
    /* Not committed, so mimalloc commits (mprotect) and decommits (MADV_DONTNEED) as usual,
     * and the commit map (made first, to see every call) follows. */
    if (use_commit_map)
      nic_commit_map_init((uintptr_t)base, size);
    else
      nic_commit_map_skip((uintptr_t)base, size);
    if (!mi_manage_os_memory(base, size, false, false, true, -1)) {
      munmap(base, size);
      __atomic_sub_fetch(&nic_vspace_reserved, size, __ATOMIC_RELAXED);
      break;
    }
    mi_option_enable(mi_option_limit_os_alloc);
    void *probe = mi_malloc(64);
    nic_commit_map_verify(probe);
    mi_free(probe);
    nic_free_check_strict = true;
    nic_control_base = (uintptr_t)base;
    nic_control_size = size;
    return true;
  }
  /* Under ulimit -v every process starts here: a fallback, not an error of the program's. */
  __atomic_add_fetch(&nic_vspace_refusals, 1, __ATOMIC_RELAXED);
  nic_log_info("cannot reserve address space for the control heap below 20 TiB; frees of "
               "pointers nicmalloc did not allocate cannot be detected");
  return false;
}

/* Before mimalloc maps its first segment. */
static void control_arena_start(void) {
  nic_foreign_arenas_fill();
  nic_control_arena_init(nic_config()->free_check);
  nic_valgrind_check();
}
NIC_STARTUP_STEP(control_arena, NIC_START_CONTROL_ARENA, control_arena_start);
