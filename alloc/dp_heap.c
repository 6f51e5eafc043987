#include "dp_heap.h"

#include "chunks.h"
#include "config.h"
#include "thread.h"

#include <errno.h>
#include <mimalloc.h>

/* A huge object gets a mimalloc segment of its own: the object plus the segment's header, well
 * under 1 MiB, rounded to 64 KiB slices. */
#define HUGE_SEGMENT_OVERHEAD (1ul << 20)

size_t nic_dp_max_request(void) {
  return nic_config()->chunk_size - HUGE_SEGMENT_OVERHEAD;
}

static void *heap_alloc(mi_heap_t *heap, size_t size, size_t alignment, bool zero) {
  /* mi_heap_*_aligned_at skips the shortcut in mi_malloc_aligned that returns misaligned blocks
   * in mimalloc 2.0.9 (upstream #700). */
  if (alignment <= sizeof(void *) * 2)
    return zero ? mi_heap_zalloc(heap, size) : mi_heap_malloc(heap, size);
  return zero ? mi_heap_zalloc_aligned_at(heap, size, alignment, 0)
              : mi_heap_malloc_aligned_at(heap, size, alignment, 0);
}

static mi_heap_t *heap_in_chunk(unsigned index) {
  mi_heap_t *heap = nic_self.heaps[index];
  if (!heap) {
    heap = mi_heap_new_in_arena(nic_chunk_at(index)->arena);
    nic_self.heaps[index] = heap;
  }
  return heap;
}

static void *try_chunk(unsigned index, size_t size, size_t alignment, bool zero) {
  if (__atomic_load_n(&nic_chunk_at(index)->state, __ATOMIC_ACQUIRE) != NIC_CHUNK_LIVE) return NULL;
  mi_heap_t *heap = heap_in_chunk(index);
  return heap ? heap_alloc(heap, size, alignment, zero) : NULL;
}

/* The cursor chunk is full: look for room in the others, lowest first so that high chunks can
 * drain, then map a new chunk. */
static void *alloc_elsewhere(size_t size, size_t alignment, bool zero, unsigned *index_out) {
  unsigned seen = nic_chunk_slots_used();
  for (unsigned i = 0; i < seen; i++) {
    if (i == nic_self.cursor && nic_self.heaps[i]) continue;
    void *p = try_chunk(i, size, alignment, zero);
    if (p) {
      *index_out = i;
      return p;
    }
  }
  for (;;) {
    unsigned index;
    int rc = nic_chunk_create(&index);
    if (rc == 0) {
      void *p = try_chunk(index, size, alignment, zero);
      if (p) *index_out = index;
      /* A fresh chunk that cannot hold it will not be helped by another. */
      return p;
    }
    /* Another thread may have mapped chunks meanwhile: try those before giving up. */
    unsigned now = nic_chunk_slots_used();
    if (now == seen) return NULL;
    for (unsigned i = seen; i < now; i++) {
      void *p = try_chunk(i, size, alignment, zero);
      if (p) {
        *index_out = i;
        return p;
      }
    }
    seen = now;
  }
}

void *nic_dp_alloc(size_t size, size_t alignment, bool zero) {
  if (!nic_thread_ready() || size > nic_dp_max_request()) return NULL;
  unsigned index = nic_self.cursor;
  mi_heap_t *heap = nic_self.heaps[index];
  void *p = heap ? heap_alloc(heap, size, alignment, zero) : NULL;
  if (__builtin_expect(p == NULL, 0)) {
    if (nic_dp_reserve()) return NULL;
    p = alloc_elsewhere(size, alignment, zero, &index);
    if (!p) return NULL;
    nic_self.cursor = index;
  }
  nic_counter_add(&nic_self.dp_live[index], (int64_t)mi_usable_size(p));
  return p;
}
