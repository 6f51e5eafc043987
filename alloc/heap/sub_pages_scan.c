/* The owner thread's pass over its mimalloc pages (sub_pages_scan.h). Reads and writes mimalloc
 * 2.0.9's page headers with mi_layout.h's offsets, only where mi_decommit.c and mi_free_lists.c
 * found that layout, and only the owner thread's pages. */
#define _GNU_SOURCE
#include "sub_pages_scan.h"

#include "events.h"
#include "mi_free_lists.h"
#include "mi_layout.h"
#include "page.h"
#include "pagemap.h"

#include <string.h>

/* A 64 KiB page of 8-byte blocks has the most; a segment the most 4 KiB pages. Both bound the
 * bitmaps on the owner thread's stack (1 KiB each). */
#define MAX_BLOCKS 8192
#define MAX_PAGES ((size_t)NIC_MI_SEGMENT_SIZE / NIC_PAGE_SIZE)
/* The lists of up to BATCH_PAGES pages are read in lockstep, one block of each in turn: blocks
 * freed in random order make each list a chase of cache misses, and the misses of different
 * lists overlap. Their free bitmaps share BATCH_WORDS words (1 KiB: one page of 8-byte blocks,
 * eight of 1024 blocks). */
#define BATCH_PAGES 8
#define BATCH_WORDS (MAX_BLOCKS / 64)
/* The mark a page with held-back blocks carries: its header's address, salted so that no
 * pointer or small count left there by chance reads as one. */
#define MARK_SALT ((uintptr_t)0x5375625061676573ull)

static inline uintptr_t word_at(uintptr_t a) {
  return __atomic_load_n((const uintptr_t *)a, __ATOMIC_RELAXED);
}
static inline void word_set(uintptr_t a, uintptr_t v) {
  __atomic_store_n((uintptr_t *)a, v, __ATOMIC_RELAXED);
}
static inline uintptr_t mark_of(uintptr_t header) {
  return header ^ MARK_SALT;
}
/* The padding of an unmarked page one thread is changing the area's map under: the owner's pass
 * (forgetting, then holding pages, until it marks the page) or another thread forgetting (the
 * page built anew). Either leaves the page to the other meanwhile. */
#define BUSY_SALT ((uintptr_t)0x4275737950616765ull)
static inline uintptr_t busy_of(uintptr_t header) {
  return header ^ BUSY_SALT;
}
static bool claim(uintptr_t header) {
  uintptr_t unmarked = 0;
  return __atomic_compare_exchange_n((uintptr_t *)(header + NIC_MI_PAGE_PADDING), &unmarked,
                                     busy_of(header), false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}
/* Back to unmarked, unless mimalloc zeroed the page header meanwhile (it freed the page). */
static void unclaim(uintptr_t header) {
  uintptr_t busy = busy_of(header);
  __atomic_compare_exchange_n((uintptr_t *)(header + NIC_MI_PAGE_PADDING), &busy, 0, false,
                              __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

static const struct nic_sub_pages_guard *guard;

void nic_sub_pages_guard_set(const struct nic_sub_pages_guard *g) {
  __atomic_store_n(&guard, g, __ATOMIC_RELEASE);
}

const struct nic_sub_pages_guard *nic_sub_pages_guard(void) {
  return __atomic_load_n(&guard, __ATOMIC_ACQUIRE);
}

/* A page of the pass while its batch is read: where it is, what its lists hold, and what was
 * found of them. */
struct page_scan {
  struct nic_mi_page v;
  uintptr_t header, head, local;
  size_t count;
  uint64_t *free; /* bit i: block i is on one of the lists */
  uint32_t used;
  bool marked, gathered;
};

/* Marks block b free in q; false if the list is not what 2.0.9 keeps (a block outside the page
 * or off its grid, seen twice, or more of them than the page holds). */
static bool take(struct page_scan *q, uintptr_t b) {
  const struct nic_mi_page *v = &q->v;
  if (b < v->start || b >= v->end || (b - v->start) % v->block_size) return false;
  const size_t i = (b - v->start) / v->block_size;
  if (nic_bit_test(q->free, i) || ++q->count > v->capacity) return false;
  q->free[i >> 6] |= 1ull << (i & 63);
  return true;
}

/* Both lists of each page of the batch, a block of every list in turn. */
static void gather_batch(struct page_scan *pages, unsigned n) {
  uintptr_t at[2 * BATCH_PAGES];
  for (unsigned i = 0; i < n; i++) {
    at[2 * i] = pages[i].head, at[2 * i + 1] = pages[i].local;
    pages[i].gathered = true;
  }
  for (bool going = true; going;) {
    going = false;
    for (unsigned l = 0; l < 2 * n; l++) {
      const uintptr_t b = at[l];
      if (!b) continue;
      if (!take(&pages[l / 2], b)) {
        pages[l / 2].gathered = false;
        at[l & ~1u] = at[l | 1u] = 0;
        continue;
      }
      at[l] = word_at(b);
      going |= at[l] != 0;
    }
  }
}

/* The list from head without the blocks whose free bit is clear, in the same order. */
static uintptr_t relink(const struct nic_mi_page *v, uintptr_t head, const uint64_t *keep) {
  uintptr_t first = 0, last = 0;
  for (uintptr_t b = head; b;) {
    const uintptr_t next = word_at(b); /* read before b is written */
    if (nic_bit_test(keep, (b - v->start) / v->block_size)) {
      if (last)
        word_set(last, b);
      else
        first = b;
      last = b;
    }
    b = next;
  }
  if (last) word_set(last, 0);
  return first;
}

/* Whether block b of v lies on one of the 4 KiB pages of [lo, lo + pages * 4 KiB) set in gone. */
static bool on_gone_page(const struct nic_mi_page *v, size_t b, uintptr_t lo, const uint64_t *gone,
                         size_t pages) {
  const uintptr_t start = v->start + b * v->block_size, end = start + v->block_size;
  for (uintptr_t a = start & ~(uintptr_t)(NIC_PAGE_SIZE - 1); a < end; a += NIC_PAGE_SIZE)
    if (a >= lo && ((a - lo) >> NIC_PAGE_SHIFT) < pages &&
        nic_bit_test(gone, (a - lo) >> NIC_PAGE_SHIFT))
      return true;
  return false;
}

/* Whether blocks first..last are all free: on the lists (free) or held back with a page an
 * earlier pass gave back (gone, when the page carries the mark). */
static bool blocks_free(const struct nic_mi_page *v, size_t first, size_t last,
                        const uint64_t *free, uintptr_t lo, const uint64_t *gone, size_t pages) {
  for (size_t b = first; b <= last; b++)
    if (!nic_bit_test(free, b) && !(gone && on_gone_page(v, b, lo, gone, pages))) return false;
  return true;
}

/* Whether the page of slice entry index of segment, its span slices long, has blocks the pass
 * may take (not a free span, a page mimalloc will free once collected, a huge block or one too
 * large for the bitmaps); if so fills q but for the lists' blocks. */
static bool prepare(uintptr_t segment, uintptr_t index, uint32_t slices, struct page_scan *q) {
  const uintptr_t header = q->header, sizes = word_at(header + NIC_MI_PAGE_USED);
  const uint32_t used = (uint32_t)sizes, xblock_size = (uint32_t)(sizes >> 32);
  if (xblock_size < 8 || xblock_size >= NIC_MI_HUGE_BLOCK_SIZE || used == 0) return false;
  if (!nic_mi_page_at(segment, index, slices, &q->v) || !q->v.in_use || q->v.capacity < 2 ||
      q->v.capacity > MAX_BLOCKS)
    return false;
  q->used = used;
  q->count = 0;
  q->head = word_at(header + NIC_MI_PAGE_FREE);
  q->local = word_at(header + NIC_MI_PAGE_LOCAL_FREE);
  return true;
}

static size_t bitmap_words(const struct page_scan *q) {
  return (q->v.capacity + 63) / 64;
}

/* The rest of one page once its lists were read: the 4 KiB pages to go, the blocks over them off
 * the lists. *mark set when the page is to carry the mark, *read to the list blocks read. */
static size_t finish_page(const struct nic_sub_pages_area *area, const struct page_scan *q,
                          bool *mark, size_t *read) {
  const struct nic_mi_page v = q->v;
  const uintptr_t header = q->header;
  uint64_t *free = q->free;
  const size_t count = q->count;
  *read = count;
  if (!q->gathered || count + q->used > v.capacity) return 0;
  /* The 4 KiB pages wholly inside the page's blocks and covered by free ones only. */
  const uintptr_t lo = (v.start + NIC_PAGE_SIZE - 1) & ~(NIC_PAGE_SIZE - 1);
  const uintptr_t hi = v.end & ~(NIC_PAGE_SIZE - 1);
  if (hi <= lo) return 0;
  const size_t pages = (hi - lo) >> NIC_PAGE_SHIFT;
  if (pages > MAX_PAGES) return 0;
  uint64_t drop[MAX_PAGES / 64], gone[MAX_PAGES / 64];
  memset(drop, 0, (pages + 63) / 64 * sizeof drop[0]);
  /* The blocks over pages given back earlier are on no list, and free all the same: without
   * them a page beside one given back could never go, whatever was freed on it since. */
  bool any_gone = false;
  if (q->marked) {
    memset(gone, 0, (pages + 63) / 64 * sizeof gone[0]);
    for (size_t i = 0; i < pages; i++)
      if (area->held(lo + (i << NIC_PAGE_SHIFT))) gone[i >> 6] |= 1ull << (i & 63), any_gone = true;
  }
  bool any = false;
  for (size_t i = 0; i < pages; i++) {
    const uintptr_t a = lo + (i << NIC_PAGE_SHIFT);
    const size_t first = (a - v.start) / v.block_size;
    const size_t last = (a + NIC_PAGE_SIZE - 1 - v.start) / v.block_size;
    if (any_gone && nic_bit_test(gone, i)) continue;
    if (blocks_free(&v, first, last, free, lo, any_gone ? gone : NULL, pages))
      drop[i >> 6] |= 1ull << (i & 63), any = true;
  }
  if (!any) return 0;
  /* Before the area's lock (the dataplane's chunk lock): the watchers' locks come before it. */
  for (size_t i = 0; i < pages;) {
    size_t n = 0;
    while (i + n < pages && nic_bit_test(drop, i + n))
      n++;
    if (n) nic_publish_pages_leaving(lo + (i << NIC_PAGE_SHIFT), n << NIC_PAGE_SHIFT);
    i += n ? n : 1;
  }
  if (!area->begin(lo, hi)) return 0;
  /* The lists' words lie in the page's blocks, beside blocks a post may have write-protected:
   * a write there would wait for the DMA inside the program's allocation or poll, and on a
   * thread protect never holds (the sim's engine, a completion's) it would make the page
   * writable while the NIC reads it. Such a page waits for a later pass. */
  const struct nic_sub_pages_guard *g = nic_sub_pages_guard();
  if (g && !g->begin(v.start, v.end)) return 0;
  *mark = true;
  /* The blocks over each page leave the lists; the area's map and the mark say so before the
   * pages go (a free that reads zeros there asks them). */
  for (size_t i = 0; i < pages; i++) {
    if (!nic_bit_test(drop, i)) continue;
    const uintptr_t a = lo + (i << NIC_PAGE_SHIFT);
    const size_t first = (a - v.start) / v.block_size;
    const size_t last = (a + NIC_PAGE_SIZE - 1 - v.start) / v.block_size;
    if (!area->hold(a, v.start + first * v.block_size, v.start + (last + 1) * v.block_size)) {
      drop[i >> 6] &= ~(1ull << (i & 63));
      continue;
    }
    for (size_t b = first; b <= last; b++)
      free[b >> 6] &= ~(1ull << (b & 63));
  }
  word_set(header + NIC_MI_PAGE_FREE, relink(&v, q->head, free));
  word_set(header + NIC_MI_PAGE_LOCAL_FREE, relink(&v, q->local, free));
  *read += count; /* the lists read again (their blocks in cache now) */
  __atomic_store_n((uintptr_t *)(header + NIC_MI_PAGE_PADDING), mark_of(header), __ATOMIC_RELEASE);
  if (g) g->end(v.start, v.end);
  return area->drop(lo, drop, pages);
}

/* The pages of a segment the pass has claimed (or found marked) and whose lists are read
 * together; their bitmaps in words. */
struct batch {
  const struct nic_sub_pages_area *area;
  struct nic_sub_pages_cursor *cursor;
  struct page_scan page[BATCH_PAGES];
  unsigned n;
  size_t words_used, estimate; /* list blocks the batch may read: its pages' free blocks */
  uint64_t words[BATCH_WORDS];
};

/* A page the pass claimed and did not mark goes back to unmarked. */
static void release_claim(const struct page_scan *q, bool mark) {
  if (!q->marked && !mark) unclaim(q->header);
}

/* n more list blocks read, as far as the cursor's budget goes (none: the whole pass at once). */
static void charge(struct batch *t, size_t n) {
  if (t->cursor) t->cursor->budget -= n < t->cursor->budget ? n : t->cursor->budget;
}

/* Reads the batch's lists, finishes each page, and charges the cursor what was read (a page
 * passed over costs one). Returns the bytes given back. */
static size_t flush(struct batch *t) {
  gather_batch(t->page, t->n);
  size_t bytes = 0;
  for (unsigned i = 0; i < t->n; i++) {
    bool mark = false;
    size_t read = 0;
    bytes += finish_page(t->area, &t->page[i], &mark, &read);
    release_claim(&t->page[i], mark);
    charge(t, read + 1);
  }
  t->n = 0;
  t->words_used = t->estimate = 0;
  return bytes;
}

/* The page of slice entry index of segment, its span slices long, joins the batch (which is
 * read first if it is full). */
static size_t add_page(struct batch *t, uintptr_t segment, uintptr_t index, uint32_t slices) {
  const uintptr_t header = segment + NIC_MI_SEG_SLICES + index * NIC_MI_PAGE_HEADER;
  const uintptr_t span = segment + (index << NIC_MI_SLICE_SHIFT);
  const size_t span_len = (size_t)slices << NIC_MI_SLICE_SHIFT;
  struct page_scan q = {.header = header};
  /* A page without the mark holds nothing back: what the map says there is from a page mimalloc
   * freed since (it zeroes the mark then) and is stale. */
  q.marked = word_at(header + NIC_MI_PAGE_PADDING) == mark_of(header);
  if (!q.marked) {
    if (!claim(header)) { /* another thread is forgetting it: next time */
      charge(t, 1);
      return 0;
    }
    t->area->forget(header, span, span_len);
  }
  if (!prepare(segment, index, slices, &q)) {
    release_claim(&q, false);
    charge(t, 1);
    return 0;
  }
  size_t bytes = 0;
  if (t->n == BATCH_PAGES || t->words_used + bitmap_words(&q) > BATCH_WORDS) bytes = flush(t);
  q.free = &t->words[t->words_used];
  memset(q.free, 0, bitmap_words(&q) * sizeof q.free[0]);
  t->words_used += bitmap_words(&q);
  t->estimate += q.v.capacity - q.used + 1;
  t->page[t->n++] = q;
  return bytes;
}

/* Each span of an owned segment, from its first slice (spans tile the segment). A cursor's
 * budget is checked before each page, with what the batch under way may still read counted as
 * read: the bound holds as it did page by page. */
size_t nic_sub_pages_pass_segment(uintptr_t segment, void *walk) {
  struct batch t = {.area = ((struct nic_sub_pages_walk *)walk)->area,
                    .cursor = ((struct nic_sub_pages_walk *)walk)->cursor};
  struct nic_sub_pages_cursor *c = t.cursor;
  /* The walk of the segments goes on to the end (it reads one header each): nothing more. */
  if (c && (c->stopped || segment + NIC_MI_SEGMENT_SIZE <= c->next)) return 0;
  const uintptr_t entries = word_at(segment + NIC_MI_SEG_SLICE_ENTRIES);
  size_t bytes = 0;
  for (uintptr_t i = 0; i < entries;) {
    const uintptr_t header = segment + NIC_MI_SEG_SLICES + i * NIC_MI_PAGE_HEADER;
    const uint32_t span = (uint32_t)word_at(header + NIC_MI_PAGE_SLICE_COUNT);
    if (span == 0) break; /* not a span start: not 2.0.9's tiling */
    const uintptr_t start = segment + (i << NIC_MI_SLICE_SHIFT);
    if (i > 0 && (!c || start >= c->next)) {
      if (c && t.n && t.estimate >= c->budget) bytes += flush(&t);
      if (c && !c->budget) {
        c->next = start;
        c->stopped = true;
        return bytes;
      }
      bytes += add_page(&t, segment, i, span);
    }
    i += span;
  }
  return t.n ? bytes + flush(&t) : bytes;
}

/* The page is found as mimalloc's free finds it, not by walking the segment's spans (a free in
 * such a slice paid 20 times a fast free's time for the walk): a live block's page is found
 * right; a pointer into a free span may be taken to a page that does not hold it (its inner
 * entries are stale), and then mark and map are that page's, and the pointer, not a block, is
 * not taken for a live one. Only a page with the mark counts, and its held pages are all its
 * own (a pass forgets a page's before it marks it). */
int nic_sub_pages_page_of(const void *p, struct nic_mi_page *v) {
  uintptr_t mark;
  if (!nic_mi_page_by_offset(p, v) || !v->in_use || (uintptr_t)p < v->start ||
      (uintptr_t)p >= v->end || !nic_mi_load_word(v->header + NIC_MI_PAGE_PADDING, &mark))
    return -1;
  return mark == mark_of(v->header);
}

bool nic_sub_pages_forget_rebuilt(const void *p, const struct nic_sub_pages_area *area) {
  struct nic_mi_page v;
  if (nic_sub_pages_page_of(p, &v) != 0 || !claim(v.header)) return false;
  const uintptr_t span = v.start & ~(((uintptr_t)1 << NIC_MI_SLICE_SHIFT) - 1);
  area->forget(v.header, span,
               ((v.end + NIC_PAGE_SIZE - 1) & ~(uintptr_t)(NIC_PAGE_SIZE - 1)) - span);
  unclaim(v.header);
  return true;
}

bool nic_sub_pages_block_held(const void *p, bool (*held)(uintptr_t a)) {
  struct nic_mi_page v;
  if (nic_sub_pages_page_of(p, &v) != 1) return false;
  const uintptr_t block = (uintptr_t)p - ((uintptr_t)p - v.start) % v.block_size;
  for (uintptr_t a = block & ~(uintptr_t)(NIC_PAGE_SIZE - 1); a < block + v.block_size;
       a += NIC_PAGE_SIZE)
    if (held(a)) return true;
  return false;
}
