/* Live dataplane bytes from mimalloc 2.0.9's page headers (dp_live.h, mi_layout.h).
 *
 * A chunk's live bytes are, over the pages of the mimalloc segments in it, the blocks in use
 * times the block size, less the blocks other threads have freed that the owner has not yet
 * taken back: those wait on the page's thread-free list, or, for a page in its heap's full
 * queue, on the heap's delayed-free list. page->used counts a block from its allocation until
 * its owner takes the free back, so reading it before the lists never misses a block that was
 * live all along. A block on a list is a block of the page (or, for the delayed list, of a page
 * of that heap, so of the same chunk: every dataplane heap belongs to one chunk's arena); a walk
 * stops at anything else and at the page's capacity, so a list the owner changes under it
 * cannot make it loop or read outside the chunk. */
#include "dp_live.h"

#include "dp_heap.h"
#include "log.h"
#include "mi_free_lists.h"
#include "mi_layout.h"
#include "startup.h"
#include "valgrind.h"

#include <mimalloc.h>
#include <stddef.h>
#include <string.h>

#define HEAPS_MAX 256 /* distinct heaps per chunk whose delayed lists are walked */
#define DELAYED_STEPS_MAX 65536

static bool layout_ok;

static inline uint32_t u32_at(uintptr_t a) {
  return __atomic_load_n((const uint32_t *)a, __ATOMIC_RELAXED);
}
static inline uintptr_t word_at(uintptr_t a) {
  return __atomic_load_n((const uintptr_t *)a, __ATOMIC_RELAXED);
}

/* The usable size of the blocks of the page with this header: a huge page's one block spans the
 * page (2.0.9's mi_page_block_size). Not mi_usable_size: that follows the header's links, which
 * a segment freed under the walk could point anywhere. */
static size_t page_block_size(uintptr_t header) {
  const uint32_t xblock_size = u32_at(header + NIC_MI_PAGE_XBLOCK_SIZE + 4);
  if (xblock_size < NIC_MI_HUGE_BLOCK_SIZE) return xblock_size;
  return (size_t)u32_at(header + NIC_MI_PAGE_SLICE_COUNT) << NIC_MI_SLICE_SHIFT;
}

/* Blocks on a page's list from head: each one inside [start, end) on a block boundary. */
static uint64_t page_list_blocks(uintptr_t head, uintptr_t start, uintptr_t end, size_t size,
                                 uint32_t capacity) {
  uint64_t n = 0;
  for (uintptr_t b = head; b && n < capacity; n++) {
    if (b < start || b >= end || (b - start) % size) break;
    b = word_at(b);
  }
  return n;
}

/* The block size of the page p lies in, through its slice entry (as mimalloc's own free does);
 * 0 when p is not in a page in use of a segment of the chunk. Only a segment's header and a page
 * in use are committed: a chunk's other steps may have no memory behind them at all, where a
 * read is a SIGBUS (steps.h), so a word a list links to is read only once this says yes. */
static size_t block_size_of(uintptr_t p, uintptr_t chunk_base, uintptr_t chunk_end) {
  if (p <= chunk_base || p >= chunk_end || (p & 7)) return 0;
  const uintptr_t segment = (p - 1) & ~NIC_MI_SEGMENT_MASK;
  if (!nic_mi_segment_at(segment)) return 0;
  const uintptr_t index = (p - segment) >> NIC_MI_SLICE_SHIFT;
  if (index >= word_at(segment + NIC_MI_SEG_SLICE_ENTRIES)) return 0;
  const uintptr_t slice = segment + NIC_MI_SEG_SLICES + index * NIC_MI_PAGE_HEADER;
  const uintptr_t header = slice - u32_at(slice + 4);
  if (header < segment + NIC_MI_SEG_SLICES) return 0;
  const uint32_t xblock_size = u32_at(header + NIC_MI_PAGE_XBLOCK_SIZE + 4);
  return xblock_size < NIC_MI_HUGE_BLOCK_SIZE ? xblock_size : 0;
}

/* Bytes of the blocks on a heap's delayed-free list that lie in the chunk. mimalloc keeps its
 * heaps in the control heap: a "heap" in the dataplane range is a header changing under the
 * walk, and not read. */
static int64_t delayed_bytes(uintptr_t heap, uintptr_t chunk_base, uintptr_t chunk_end) {
  uintptr_t b;
  int64_t bytes = 0;
  if (nic_in_dp((const void *)heap) || !nic_mi_load_word(heap + NIC_MI_HEAP_DELAYED_FREE, &b))
    return 0;
  for (unsigned steps = 0; b && steps < DELAYED_STEPS_MAX; steps++) {
    const size_t size = block_size_of(b, chunk_base, chunk_end);
    if (!size) break;
    bytes += (int64_t)size;
    b = word_at(b);
  }
  return bytes;
}

static void add_heap(uintptr_t *heaps, unsigned *n, uintptr_t heap) {
  for (unsigned i = 0; i < *n; i++)
    if (heaps[i] == heap) return;
  if (*n < HEAPS_MAX) heaps[(*n)++] = heap;
}

/* One segment's pages: their live bytes, and the heaps that own them. Returns the bytes of the
 * segment's arena claim (mi_layout.h), where the next segment may start. */
static size_t segment_live(uintptr_t segment, int64_t *bytes, uintptr_t *heaps, unsigned *nheaps) {
  const size_t slices = word_at(segment + NIC_MI_SEG_SLICES_TOTAL);
  const size_t entries = word_at(segment + NIC_MI_SEG_SLICE_ENTRIES);
  const size_t per_segment = NIC_MI_SEGMENT_SIZE >> NIC_MI_SLICE_SHIFT;
  for (size_t index = 0; index < entries && index < per_segment;) {
    const uintptr_t header = segment + NIC_MI_SEG_SLICES + index * NIC_MI_PAGE_HEADER;
    const uint32_t span = u32_at(header + NIC_MI_PAGE_SLICE_COUNT);
    if (span == 0) break; /* not a span start: the segment is changing under the walk */
    const uint32_t used = u32_at(header + NIC_MI_PAGE_USED);
    if (used && u32_at(header + NIC_MI_PAGE_XBLOCK_SIZE + 4)) {
      const size_t size = page_block_size(header);
      const uint32_t capacity = (uint16_t)(word_at(header + NIC_MI_PAGE_CAPACITY) >> 16);
      /* Blocks of up to 1 KiB start 3 * MI_MAX_ALIGN_GUARANTEE bytes into their page. */
      const uintptr_t start =
          segment + (index << NIC_MI_SLICE_SHIFT) + (size >= 8 && size <= 1024 ? 384 : 0);
      /* Within the page's span, the memory mimalloc committed for it (see block_size_of). */
      const uintptr_t span_end = segment + ((index + span) << NIC_MI_SLICE_SHIFT);
      uintptr_t end = start + (uintptr_t)capacity * size;
      if (end > span_end || end < start) end = span_end;
      const uintptr_t xthread = word_at(header + NIC_MI_PAGE_XTHREAD_FREE) & ~(uintptr_t)3;
      const uint64_t pending = size ? page_list_blocks(xthread, start, end, size, capacity) : 0;
      *bytes += ((int64_t)used - (int64_t)pending) * (int64_t)size;
      const uintptr_t heap = word_at(header + NIC_MI_PAGE_XHEAP);
      if (heap) add_heap(heaps, nheaps, heap);
    }
    index += span;
  }
  return nic_mi_segment_claim(slices);
}

int64_t nic_dp_live_chunk_locked(unsigned index, bool *idle_abandoned) {
  if (!nic_chunk_readable(index)) return 0;
  const uintptr_t base = (uintptr_t)nic_chunk_base(index);
  const size_t size = (size_t)1 << nic_dp.shift;
  const bool exact = __atomic_load_n(&layout_ok, __ATOMIC_RELAXED);
  uintptr_t heaps[HEAPS_MAX];
  unsigned nheaps = 0;
  int64_t bytes = 0;
  /* A segment at each arena block (nic_mi_segment_at); a huge segment's later blocks are skipped
   * by its claim. */
  for (size_t off = 0; off < size;) {
    const uintptr_t segment = base + off;
    if (!nic_mi_segment_at(segment)) {
      off += NIC_MI_SEGMENT_SIZE;
    } else if (!exact) {
      bytes += (int64_t)NIC_MI_SEGMENT_SIZE;
      off += NIC_MI_SEGMENT_SIZE;
    } else {
      const int64_t before = bytes;
      const size_t claim = segment_live(segment, &bytes, heaps, &nheaps);
      /* thread id 0: its thread exited (mimalloc abandoned it); its pages have no heap, so no
       * delayed-free list is taken off below */
      if (idle_abandoned && bytes == before && word_at(segment + NIC_MI_SEG_THREAD_ID) == 0)
        *idle_abandoned = true;
      off += claim;
    }
  }
  for (unsigned i = 0; i < nheaps; i++)
    bytes -= delayed_bytes(heaps[i], base, base + size);
  return bytes > 0 ? bytes : 0;
}

bool nic_dp_live_sum(int64_t live[NIC_CHUNK_SLOTS], uint64_t *idle_abandoned) {
  if (idle_abandoned) *idle_abandoned = 0;
  memset(live, 0, NIC_CHUNK_SLOTS * sizeof live[0]);
  if (!nic_abandoned_visits_lock_bounded()) return false;
  if (!nic_chunks_lock_bounded()) {
    nic_abandoned_visits_unlock();
    return false;
  }
  const unsigned slots = nic_chunk_slots_used();
  for (unsigned i = 0; i < NIC_CHUNK_SLOTS; i++) {
    bool idle = false;
    live[i] = i < slots ? nic_dp_live_chunk_locked(i, idle_abandoned ? &idle : NULL) : 0;
    if (idle) *idle_abandoned |= 1ull << i;
  }
  nic_chunks_unlock();
  nic_abandoned_visits_unlock();
  return __atomic_load_n(&layout_ok, __ATOMIC_RELAXED);
}

bool nic_dp_live_layout_checked(void) {
  return __atomic_load_n(&layout_ok, __ATOMIC_RELAXED);
}

/* The offsets the walk reads, checked on a page of a heap of our own: its segment's header, the
 * page's count of blocks in use and block size, and a block another thread freed, which must
 * wait on the thread-free list and not count. The thread-free list's offset is checked by
 * mi_free_lists.c. */
static int64_t page_live_of(const void *p) {
  const uintptr_t segment = ((uintptr_t)p - 1) & ~NIC_MI_SEGMENT_MASK;
  if (word_at(segment + NIC_MI_SEG_KIND) != 0 ||
      word_at(segment + NIC_MI_SEG_SLICES_TOTAL) != (NIC_MI_SEGMENT_SIZE >> NIC_MI_SLICE_SHIFT))
    return -1;
  int64_t bytes = 0;
  uintptr_t heaps[HEAPS_MAX];
  unsigned nheaps = 0;
  segment_live(segment, &bytes, heaps, &nheaps);
  return bytes;
}

static void dp_live_init(void) {
  if (nic_valgrind_took_malloc) return; /* its mi_free would be Valgrind's: valgrind.h */
  mi_heap_t *heap = mi_heap_new();
  if (!heap) return;
  /* A size class nothing else here uses, so that the page holds only these blocks; its segment
   * holds other pages of this thread, whose bytes cancel out in the difference. */
  enum { kBlocks = 3, kSize = 5000 };
  void *blocks[kBlocks + 1] = {0};
  bool ok = true;
  const int64_t before = (blocks[0] = mi_heap_malloc(heap, kSize)) ? page_live_of(blocks[0]) : -1;
  for (int i = 1; i <= kBlocks; i++)
    ok = ok && (blocks[i] = mi_heap_malloc(heap, kSize)) != NULL;
  const int64_t during = ok ? page_live_of(blocks[0]) : -1;
  ok = ok && before >= 0 && during - before == (int64_t)(kBlocks * mi_usable_size(blocks[0]));
  for (int i = 0; i <= kBlocks; i++)
    mi_free(blocks[i]);
  mi_heap_delete(heap);
  __atomic_store_n(&layout_ok, ok, __ATOMIC_RELAXED);
  if (!ok)
    nic_log_info("mimalloc's pages are not laid out as in 2.0.9: dataplane_live counts the "
                 "bytes of mimalloc's segments in the chunks, not of live blocks");
}
NIC_STARTUP_STEP(dp_live, NIC_START_DP_LIVE, dp_live_init);
