/* See foreign_arenas.h. mimalloc 2.0.9 numbers arenas from 1 in the order they were made, and its
 * default heap takes a huge block (over 16 MiB, a segment of its own) from the first arena with
 * room, before the OS: huge blocks claim an arena's free blocks until none is left. Made before
 * any small block, so that no segment of the default heap's lies there (an arena-exclusive heap
 * would have put its own header in one). mimalloc commits a huge block (read-write), which the
 * kernel charges against the commit limit whatever it holds: the block's pages are mapped anew
 * without access and without a charge (vm.overcommit_memory=2 would otherwise have lost as much
 * commit as was reserved), its segment header stays as mimalloc wrote it. Nothing reads either. */
#include "foreign_arenas.h"

#include "log.h"

#include <mimalloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_ARENA_ID 64                 /* mimalloc's MI_MAX_ARENAS */
#define ARENA_BLOCK ((size_t)32 << 20)  /* MI_ARENA_BLOCK_SIZE, a segment */
#define SLICE_SHARE ((size_t)128 << 10) /* a huge segment's header per block (its slice table) */

static bool inside(const void *p, uintptr_t start, size_t size) {
  return (uintptr_t)p >= start && (uintptr_t)p - start < size;
}

/* Raw system call: the interposed mmap would publish pages leaving that were never ours. */
static void drop_charge(void *block, size_t len) {
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  const uintptr_t start = ((uintptr_t)block + page - 1) & ~(page - 1);
  const uintptr_t end = ((uintptr_t)block + len) & ~(page - 1);
  if (end > start)
    syscall(SYS_mmap, start, end - start, (long)PROT_NONE,
            (long)(MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE), -1L, 0L);
}

/* Claims as many blocks at once as are free, halving when the block comes from elsewhere. */
static size_t fill(uintptr_t start, size_t size) {
  size_t claimed = 0;
  for (size_t blocks = size / ARENA_BLOCK; blocks > 0;) {
    const size_t want = blocks * ARENA_BLOCK - (blocks + 1) * SLICE_SHARE;
    void *p = mi_malloc(want);
    if (p && inside(p, start, size)) {
      drop_charge(p, want);
      claimed += blocks * ARENA_BLOCK; /* kept for good: the arena never serves the program */
      continue;
    }
    mi_free(p);
    blocks /= 2;
  }
  return claimed;
}

size_t nic_foreign_arenas_fill(void) {
  /* mimalloc reserves at its process start, which its constructor runs, or its first use. A
   * library initialised before it that allocates (libstdc++, which a preload such as libubsan
   * brings in first) starts nicmalloc first: the reservation would come after this look, held
   * writable and unseen. */
  mi_process_init();
  size_t reserved = 0, claimed = 0;
  for (mi_arena_id_t id = 1; id <= MAX_ARENA_ID; id++) {
    size_t size = 0;
    const void *start = mi_arena_area(id, &size);
    if (!start) break;
    reserved += size;
    claimed += fill((uintptr_t)start, size);
  }
  if (reserved)
    nic_log_warn("mimalloc reserved %zu MiB before nicmalloc started (MIMALLOC_RESERVE_OS_MEMORY "
                 "or MIMALLOC_RESERVE_HUGE_OS_PAGES): nicmalloc allocates only in its own arenas, "
                 "so that reservation is held unused (%zu MiB of it taken up)",
                 reserved >> 20, claimed >> 20);
  return reserved;
}
