/* mimalloc 2.0.9's free lists, read from outside (mi_free_lists.h) with mi_layout.h's offsets. */
#define _GNU_SOURCE /* process_vm_readv */
#include "mi_free_lists.h"

#include "chunks.h"
#include "commit_map.h"
#include "log.h"
#include "mi_layout.h"
#include "page.h"
#include "startup.h"
#include "vspace.h"

#include <mimalloc.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>
#include <unistd.h>

#define DELAYED_STEPS_MAX 65536

static bool layout_ok;

/* Whether the word at a is known to be mapped readable: the control arena's commit map knows,
 * and a dataplane chunk is mapped whole while live or draining. */
static bool known_readable(uintptr_t a) {
  const uintptr_t offset = a - nic_commit_map.base;
  if (offset < __atomic_load_n(&nic_commit_map.checked, __ATOMIC_RELAXED))
    return nic_commit_map_readable(offset);
  if (nic_in_dp((const void *)a)) return nic_chunk_readable(nic_chunk_index((const void *)a));
  return false;
}

/* The calling thread's own heaps live as long as it does. */
static bool own_heap(uintptr_t heap) {
  return heap == (uintptr_t)mi_heap_get_default() || heap == (uintptr_t)mi_heap_get_backing();
}

/* Relaxed atomic loads: other threads may write these words meanwhile. Words nothing vouches
 * for (another thread's heap, which mimalloc keeps outside the arena, or a header the commit
 * map does not cover) are copied by the kernel, which fails on unmapped memory instead of
 * faulting; where it refuses (a seccomp filter), they are not read. */
bool nic_mi_load_word(uintptr_t a, uintptr_t *out) {
  if (a & 7) return false;
  if (known_readable(a)) {
    *out = __atomic_load_n((const uintptr_t *)a, __ATOMIC_RELAXED);
    return true;
  }
  struct iovec local = {out, sizeof *out}, remote = {(void *)a, sizeof *out};
  return process_vm_readv(gettid(), &local, 1, &remote, 1, 0) == (ssize_t)sizeof *out;
}

static bool load(uintptr_t a, uintptr_t *out) {
  return nic_mi_load_word(a, out);
}

static bool load_heap_word(uintptr_t heap, uintptr_t offset, uintptr_t *out) {
  if (own_heap(heap)) {
    *out = __atomic_load_n((const uintptr_t *)(heap + offset), __ATOMIC_RELAXED);
    return true;
  }
  return load(heap + offset, out);
}

/* The span holding p, found by walking the segment's spans from its first slice: each span's
 * first slice entry holds its length in slices, and the spans tile the segment. Only those
 * entries are kept up to date: a slice inside a span may still describe the page it belonged to
 * before the span was freed and merged with its neighbours (2.0.9's span_free sets the first and
 * last entries only), so the back-pointer of p's own entry is not to be trusted for freed
 * memory. A freed large block's span is the case that matters: its pages may be decommitted at
 * once (MADV_DONTNEED), which wipes the block's free key, and only this walk can tell that
 * mimalloc holds nothing there. */
/* The page whose header is the slice entry page_index of segment, its span slice_count long, from
 * the header's words at NIC_MI_PAGE_CAPACITY (word) and NIC_MI_PAGE_XBLOCK_SIZE (sizes), however
 * they were read. */
static inline bool view_from_words(uintptr_t segment, uintptr_t page_index, uint32_t slice_count,
                                   uintptr_t word, uintptr_t sizes, struct nic_mi_page *v) {
  v->header = segment + NIC_MI_SEG_SLICES + page_index * NIC_MI_PAGE_HEADER;
  const uint32_t xblock_size = (uint32_t)(sizes >> 32);
  /* A free span: nothing in it is allocated. */
  v->in_use = xblock_size != 0;
  if (!v->in_use) return true;
  /* Blocks of up to 1 KiB start 3 * MI_MAX_ALIGN_GUARANTEE bytes into their page. */
  const uintptr_t start_offset = xblock_size >= 8 && xblock_size <= 1024 ? 384 : 0;
  const uintptr_t page_bytes = ((uintptr_t)slice_count << NIC_MI_SLICE_SHIFT) - start_offset;
  v->start = segment + (page_index << NIC_MI_SLICE_SHIFT) + start_offset;
  v->block_size = xblock_size < NIC_MI_HUGE_BLOCK_SIZE ? xblock_size : page_bytes;
  v->capacity = (uint16_t)(word >> 16);
  v->has_aligned = (word >> NIC_MI_PAGE_HAS_ALIGNED_BIT) & 1;
  v->end = v->start + v->capacity * v->block_size;
  return v->end <= v->start + page_bytes;
}

static bool view_page(uintptr_t segment, uintptr_t page_index, uint32_t slice_count,
                      struct nic_mi_page *v) {
  uintptr_t word, sizes;
  const uintptr_t header = segment + NIC_MI_SEG_SLICES + page_index * NIC_MI_PAGE_HEADER;
  return load(header + NIC_MI_PAGE_CAPACITY, &word) &&
         load(header + NIC_MI_PAGE_XBLOCK_SIZE, &sizes) &&
         view_from_words(segment, page_index, slice_count, word, sizes, v);
}

static bool read_page(uintptr_t p, struct nic_mi_page *v) {
  const uintptr_t segment = (p - 1) & ~NIC_MI_SEGMENT_MASK;
  const uintptr_t slices = segment + NIC_MI_SEG_SLICES;
  const uintptr_t index = (p - segment) >> NIC_MI_SLICE_SHIFT;
  uintptr_t entries, counts = 0;
  if (!load(segment + NIC_MI_SEG_SLICE_ENTRIES, &entries) || index >= entries) return false;
  uintptr_t page_index = 0;
  for (;;) { /* a huge page's span runs on past the entries */
    if (!load(slices + page_index * NIC_MI_PAGE_HEADER + NIC_MI_PAGE_SLICE_COUNT, &counts))
      return false;
    const uint32_t span = (uint32_t)counts;
    if (span == 0) return false; /* not a span start: the segment is changing */
    if (index < page_index + span) break;
    page_index += span;
    if (page_index >= entries) return false;
  }
  return view_page(segment, page_index, (uint32_t)counts, v);
}

bool nic_mi_page_at(uintptr_t segment, uintptr_t page_index, uint32_t slice_count,
                    struct nic_mi_page *out) {
  return __atomic_load_n(&layout_ok, __ATOMIC_RELAXED) &&
         view_page(segment, page_index, slice_count, out);
}

bool nic_mi_page_by_offset(const void *ptr, struct nic_mi_page *out) {
  const uintptr_t p = (uintptr_t)ptr, segment = (p - 1) & ~NIC_MI_SEGMENT_MASK;
  const uintptr_t index = (p - segment) >> NIC_MI_SLICE_SHIFT;
  const uintptr_t slices = segment + NIC_MI_SEG_SLICES;
  uintptr_t entries, entry, counts;
  if (!__atomic_load_n(&layout_ok, __ATOMIC_RELAXED) ||
      !load(segment + NIC_MI_SEG_SLICE_ENTRIES, &entries) || index == 0 || index >= entries ||
      !load(slices + index * NIC_MI_PAGE_HEADER + NIC_MI_PAGE_SLICE_COUNT, &entry))
    return false;
  /* slice_offset: bytes back from the entry to its page's */
  const uintptr_t back = (uint32_t)(entry >> 32);
  if (back % NIC_MI_PAGE_HEADER || back / NIC_MI_PAGE_HEADER > index) return false;
  const uintptr_t page_index = index - back / NIC_MI_PAGE_HEADER;
  if (!load(slices + page_index * NIC_MI_PAGE_HEADER + NIC_MI_PAGE_SLICE_COUNT, &counts) ||
      index >= page_index + (uint32_t)counts)
    return false;
  return view_page(segment, page_index, (uint32_t)counts, out);
}

/* NIC_MI_FREE if block is on the list from head, NIC_MI_LIVE if the list ends without it. */
static enum nic_mi_block_state walk_page_list(const struct nic_mi_page *v, uintptr_t head,
                                              uintptr_t block) {
  uintptr_t b = head;
  for (uintptr_t steps = 0; b; steps++) {
    if (b == block) return NIC_MI_FREE;
    if (steps >= v->capacity || b < v->start || b >= v->end || (b - v->start) % v->block_size ||
        !load(b, &b))
      return NIC_MI_UNKNOWN;
  }
  return NIC_MI_LIVE;
}

/* The heap's list of blocks other threads freed into its full pages: any page of the heap. */
static enum nic_mi_block_state walk_delayed_list(uintptr_t heap, uintptr_t block) {
  uintptr_t b;
  if (!load_heap_word(heap, NIC_MI_HEAP_DELAYED_FREE, &b)) return NIC_MI_UNKNOWN;
  for (unsigned steps = 0; b; steps++) {
    if (b == block) return NIC_MI_FREE;
    if (steps >= DELAYED_STEPS_MAX || !load(b, &b)) return NIC_MI_UNKNOWN;
  }
  return NIC_MI_LIVE;
}

enum nic_mi_block_state nic_mi_block_state(const void *ptr) {
  const uintptr_t p = (uintptr_t)ptr;
  struct nic_mi_page v;
  if (!__atomic_load_n(&layout_ok, __ATOMIC_RELAXED) || !read_page(p, &v)) return NIC_MI_UNKNOWN;
  if (!v.in_use) return NIC_MI_FREE;
  if (p < v.start || p >= v.end) return NIC_MI_UNKNOWN;
  /* An aligned allocation may hand out a pointer inside its block; lists hold block starts. */
  const uintptr_t block = p - (p - v.start) % v.block_size;
  static const unsigned lists[] = {NIC_MI_PAGE_FREE, NIC_MI_PAGE_LOCAL_FREE,
                                   NIC_MI_PAGE_XTHREAD_FREE};
  for (unsigned i = 0; i < sizeof lists / sizeof lists[0]; i++) {
    uintptr_t head;
    if (!load(v.header + lists[i], &head)) return NIC_MI_UNKNOWN;
    if (lists[i] == NIC_MI_PAGE_XTHREAD_FREE) head &= ~(uintptr_t)3;
    const enum nic_mi_block_state state = walk_page_list(&v, head, block);
    if (state != NIC_MI_LIVE) return state;
  }
  uintptr_t heap;
  if (!load(v.header + NIC_MI_PAGE_XHEAP, &heap)) return NIC_MI_UNKNOWN;
  return heap ? walk_delayed_list(heap, block) : NIC_MI_LIVE; /* none: abandoned, no delayed */
}

/* Set by the start-up check (check_starts), with mimalloc's cookie: a segment header holds its
 * address xor it (2.0.9's _mi_ptr_cookie), which tells a segment's start from a block's bytes. */
static bool starts_ok;
static uintptr_t main_cookie;

/* A segment's header, its slice entries included, fills its first NIC_MI_HEADER_PAGES pages
 * (2.0.9's mi_segment_t: 513 entries after 264 bytes), which mimalloc commits with its first
 * slice and never decommits while the segment lives. */
#define NIC_MI_HEADER_PAGES                                                                        \
  ((NIC_MI_SEG_SLICES + 513 * NIC_MI_PAGE_HEADER + NIC_PAGE_SIZE - 1) / NIC_PAGE_SIZE)

/* Whether segment's header may be read directly: a dataplane chunk is mapped whole (the caller's
 * pointer passed nic_may_be_block there); in the control arena, the commit map's readable bits
 * of the header's pages, one word of them (the arena and its segments start on 32 MiB
 * boundaries). Every checked free asks: nic_mi_load_word's test of each word cost 18
 * instructions a word. */
static inline bool header_readable(bool dp, uintptr_t segment) {
  if (dp) return true;
  const uintptr_t offset = segment - nic_commit_map.base, page = offset >> NIC_PAGE_SHIFT;
  const uint64_t pages = ((uint64_t)1 << NIC_MI_HEADER_PAGES) - 1;
  if (offset >= __atomic_load_n(&nic_commit_map.checked, __ATOMIC_RELAXED) ||
      page % 64 + NIC_MI_HEADER_PAGES > 64)
    return false;
  const uint64_t word = __atomic_load_n(&nic_commit_map.readable[page / 64], __ATOMIC_RELAXED);
  return (word >> (page % 64) & pages) == pages;
}

static inline uintptr_t header_word(uintptr_t a) {
  return __atomic_load_n((const uintptr_t *)a, __ATOMIC_RELAXED);
}

/* As mimalloc's own free finds p's page (from p's slice entry back to the page's), the header's
 * readability asked once. For a pointer mimalloc handed out every entry read is current (2.0.9
 * keeps the back offsets of a span's first 256 slices, and an aligned pointer lies within
 * NIC_MI_ALIGNMENT_MAX of its page's start), so only for one it did not hand out can stale or
 * foreign words be read, where any answer but a refusal is what free did before. */
bool nic_mi_inside_block(const void *ptr, uintptr_t *block) {
  const uintptr_t p = (uintptr_t)ptr, segment = (p - 1) & ~NIC_MI_SEGMENT_MASK;
  const uintptr_t index = (p - segment) >> NIC_MI_SLICE_SHIFT;
  *block = 0;
  if (!__atomic_load_n(&starts_ok, __ATOMIC_RELAXED) || !header_readable(nic_in_dp(ptr), segment))
    return false;
  /* No segment starts there, yet mimalloc holds p: past the first 32 MiB of a huge segment, where
   * only its one block lies and no pointer of it starts (an aligned one lies within the alignment,
   * at most NIC_MI_ALIGNMENT_MAX, of the block's start). mimalloc's own free would take that
   * block's bytes for a segment header. */
  if ((header_word(segment + NIC_MI_SEG_COOKIE) ^ segment) !=
      __atomic_load_n(&main_cookie, __ATOMIC_RELAXED))
    return mi_is_in_heap_region(ptr);
  /* slice_offset: bytes back from p's slice entry to its page's */
  const uintptr_t slices = segment + NIC_MI_SEG_SLICES;
  const uintptr_t back =
      (uint32_t)(header_word(slices + index * NIC_MI_PAGE_HEADER) >> 32) / NIC_MI_PAGE_HEADER;
  if (back > index) return false;
  const uintptr_t page_index = index - back;
  const uintptr_t header = slices + page_index * NIC_MI_PAGE_HEADER;
  const uintptr_t sizes = header_word(header + NIC_MI_PAGE_XBLOCK_SIZE);
  const uint32_t xblock_size = (uint32_t)(sizes >> 32);
  if (xblock_size == 0) return false; /* a free span: no block, and nothing to tell */
  struct nic_mi_page v;
  view_from_words(segment, page_index, (uint32_t)header_word(header + NIC_MI_PAGE_SLICE_COUNT),
                  header_word(header + NIC_MI_PAGE_CAPACITY), sizes, &v);
  /* Before the first block (a small page's first 384 bytes) or past the blocks made so far. */
  if (p < v.start || p >= v.end) return true;
  const uintptr_t into = (p - v.start) % v.block_size;
  if (into == 0) return false;
  /* mimalloc 2.0.9's aligned allocation (alloc-aligned.c) over-allocates and hands out the first
   * multiple of the alignment in the block, marking the page: p - block below the largest power
   * of two dividing p. */
  if (v.has_aligned && into < (p & -p)) return false;
  *block = p - into;
  return true;
}

/* The page of p belongs to this thread's default heap, as 2.0.9's layout says it must. */
static bool owned_here(const void *p) {
  struct nic_mi_page v;
  uintptr_t heap, heap_thread, segment_thread;
  const uintptr_t self = (uintptr_t)pthread_self(); /* mimalloc's thread id on glibc x86-64 */
  return read_page((uintptr_t)p, &v) && v.in_use && v.block_size == mi_usable_size(p) &&
         load(v.header + NIC_MI_PAGE_XHEAP, &heap) && heap == (uintptr_t)mi_heap_get_default() &&
         load_heap_word(heap, NIC_MI_HEAP_THREAD_ID, &heap_thread) && heap_thread == self &&
         load((((uintptr_t)p - 1) & ~NIC_MI_SEGMENT_MASK) + NIC_MI_SEG_THREAD_ID,
              &segment_thread) &&
         segment_thread == self;
}

/* Two blocks of a size: both live, then the first freed and found, the second still live. */
static bool check_size(size_t size) {
  void *a = mi_malloc(size), *b = mi_malloc(size);
  bool ok = a && b && owned_here(a) && owned_here(b) && nic_mi_block_state(a) == NIC_MI_LIVE &&
            nic_mi_block_state(b) == NIC_MI_LIVE;
  mi_free(a);
  ok = ok && nic_mi_block_state(a) == NIC_MI_FREE && nic_mi_block_state(b) == NIC_MI_LIVE;
  mi_free(b);
  return ok;
}

/* Block starts and pointers inside blocks, and the flags byte: aligned blocks are asked for until
 * one starts past its block (mimalloc's blocks of that class are not all aligned). */
static bool check_starts(void) {
  enum { TRIES = 16 };
  void *plain = mi_malloc(1000), *aligned[TRIES] = {0};
  uintptr_t block = 0, cookie = 0;
  const uintptr_t segment = ((uintptr_t)plain - 1) & ~NIC_MI_SEGMENT_MASK;
  if (plain && load(segment + NIC_MI_SEG_COOKIE, &cookie))
    __atomic_store_n(&main_cookie, cookie ^ segment, __ATOMIC_RELAXED);
  bool ok = plain && cookie && !nic_mi_inside_block(plain, &block) &&
            nic_mi_inside_block((char *)plain + 48, &block) && block == (uintptr_t)plain;
  bool seen_past_start = false;
  for (int i = 0; ok && i < TRIES && !seen_past_start; i++) {
    char *a = aligned[i] = mi_malloc_aligned_at(200, 256, 0);
    struct nic_mi_page v;
    if (!a || !nic_mi_page_by_offset(a, &v) || !v.in_use || (uintptr_t)a < v.start) {
      ok = false;
      break;
    }
    if (((uintptr_t)a - v.start) % v.block_size == 0) continue;
    seen_past_start = true;
    ok = v.has_aligned && !nic_mi_inside_block(a, &block) && nic_mi_inside_block(a + 16, &block);
  }
  for (int i = 0; i < TRIES; i++)
    mi_free(aligned[i]);
  mi_free(plain);
  return ok && seen_past_start;
}

static void mi_free_lists_init(void) {
  __atomic_store_n(&layout_ok, true, __ATOMIC_RELAXED);
  /* Two classes of pages whose blocks start 384 bytes in, and a medium page. */
  const bool ok = check_size(16) && check_size(1000) && check_size(20000);
  __atomic_store_n(&layout_ok, ok, __ATOMIC_RELAXED);
  if (!ok)
    nic_log_info("mimalloc's free lists are not laid out as in 2.0.9: a free whose block holds "
                 "the free key is refused as a double free without confirmation");
  /* A control segment's header is read only where the commit map vouches for its pages: with
   * no control arena (its reservation refused under an address-space limit) or no map
   * (NICMALLOC_FREE_CHECK=0) none is, and check_starts would fail for that, not for the layout. */
  const bool readable = __atomic_load_n(&nic_commit_map.checked, __ATOMIC_RELAXED) != 0;
  __atomic_store_n(&starts_ok, true, __ATOMIC_RELAXED);
  const bool starts = ok && readable && check_starts();
  __atomic_store_n(&starts_ok, starts, __ATOMIC_RELAXED);
  if (ok && readable && !starts)
    nic_log_info("mimalloc's page flags are not laid out as in 2.0.9: a free of a pointer inside "
                 "a block is not told from a free of the block");
  else if (ok && !nic_control_base)
    nic_log_info("the control heap has no arena of its own (its address space could not be "
                 "reserved): a free of a pointer inside a block is not told from a free of the "
                 "block");
}
NIC_STARTUP_STEP(mi_free_lists, NIC_START_FREE_LISTS, mi_free_lists_init);
