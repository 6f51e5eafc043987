/* Which pages protect has write-protected: one bit per 4 KiB page, in 32 KiB leaves (one per
 * GiB) mapped on first use and never unmapped, so that a SIGSEGV handler or the uffd thread can
 * ask "is this fault ours?" without a lock. The pagecount table cannot answer that: a page's
 * count drops to zero before the completion makes it writable, and a fault in between must
 * still wait rather than be passed on as someone else's.
 * Also here: the unit of protection at an address, from the memory kind behind it. */
#include "chunks.h"
#include "fence.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PAGE_SHIFT 12
#define LEAF_SHIFT 30
#define LEAVES (1ul << (47 - LEAF_SHIFT))
#define LEAF_WORDS ((1ul << (LEAF_SHIFT - PAGE_SHIFT)) / 64)

/* The control arena's range (alloc/os/vspace.c; 0 when it could not be made). */
extern uintptr_t nic_control_base;
extern size_t nic_control_size;

static uint64_t *leaves[LEAVES]; /* 1 MiB of .bss: costs nothing until protect runs */
unsigned nic_fence_gen, nic_fence_gen_waiters;

static uint64_t *leaf(uintptr_t a, bool create) {
  if (a >> 47) return NULL;
  uint64_t *l = __atomic_load_n(&leaves[a >> LEAF_SHIFT], __ATOMIC_ACQUIRE);
  if (l || !create) return l;
  void *fresh = mmap(NULL, LEAF_WORDS * 8, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (fresh == MAP_FAILED) return NULL;
  __atomic_store_n(&leaves[a >> LEAF_SHIFT], (uint64_t *)fresh, __ATOMIC_RELEASE);
  return fresh;
}

static uint64_t *word(uint64_t *l, uintptr_t a, uint64_t *bit) {
  uintptr_t page = (a >> PAGE_SHIFT) & ((1ul << (LEAF_SHIFT - PAGE_SHIFT)) - 1);
  *bit = 1ull << (page & 63);
  return &l[page >> 6];
}

bool nic_fence_marked(uintptr_t a) {
  uint64_t *l = leaf(a, false), bit;
  if (!l) return false;
  uint64_t *w = word(l, a, &bit);
  return __atomic_load_n(w, __ATOMIC_ACQUIRE) & bit;
}

/* Applies a run of page bits to the words of [start, end), a word (64 pages) per atomic: a
 * hugepage unit is 512 pages. Writers hold the protect lock, so only readers race with them. */
static void set_bits(uintptr_t start, uintptr_t end, bool on) {
  for (uintptr_t a = start; a < end;) {
    uint64_t *l = leaf(a, false), bit;
    uintptr_t leaf_end = ((a >> LEAF_SHIFT) + 1) << LEAF_SHIFT;
    if (!l) { /* nothing marked in this GiB */
      a = leaf_end;
      continue;
    }
    uint64_t *w = word(l, a, &bit);
    uintptr_t stop = end < leaf_end ? end : leaf_end;
    unsigned first = (unsigned)__builtin_ctzll(bit);
    uintptr_t pages = (stop - a) >> PAGE_SHIFT, n = pages < 64 - first ? pages : 64 - first;
    uint64_t mask = (n == 64 ? ~0ull : ((1ull << n) - 1)) << first;
    if (on)
      __atomic_or_fetch(w, mask, __ATOMIC_RELEASE);
    else
      __atomic_and_fetch(w, ~mask, __ATOMIC_RELEASE);
    a += n << PAGE_SHIFT;
  }
}

bool nic_fence_mark(uintptr_t start, uintptr_t end) {
  for (uintptr_t a = start; a < end; a += (uintptr_t)1 << LEAF_SHIFT)
    if (!leaf(a, true)) return false;
  if (!leaf(end - 1, true)) return false;
  set_bits(start, end, true);
  return true;
}

bool nic_fence_any_marked(uintptr_t start, uintptr_t end) {
  for (uintptr_t a = start & ~(((uintptr_t)1 << PAGE_SHIFT) - 1); a < end;) {
    uint64_t *l = leaf(a, false), bit;
    uintptr_t leaf_end = ((a >> LEAF_SHIFT) + 1) << LEAF_SHIFT;
    if (!l) {
      a = leaf_end;
      continue;
    }
    uint64_t *w = word(l, a, &bit);
    /* this word's pages from a on, up to end */
    uintptr_t pages = (end - a + ((uintptr_t)1 << PAGE_SHIFT) - 1) >> PAGE_SHIFT;
    unsigned first = (unsigned)__builtin_ctzll(bit);
    uintptr_t n = pages < 64 - first ? pages : 64 - first;
    uint64_t mask = (n == 64 ? ~0ull : ((1ull << n) - 1)) << first;
    if (__atomic_load_n(w, __ATOMIC_ACQUIRE) & mask) return true;
    a += n << PAGE_SHIFT;
  }
  return false;
}

void nic_fence_unmark(uintptr_t start, uintptr_t end) {
  set_bits(start, end, false);
}

void nic_fence_each_marked(void (*fn)(uintptr_t start, uintptr_t end)) {
  uintptr_t run = 0, run_end = 0;
  for (uintptr_t i = 0; i < LEAVES; i++) {
    uint64_t *l = leaves[i];
    if (!l) continue;
    for (uintptr_t w = 0; w < LEAF_WORDS; w++)
      for (unsigned b = 0; l[w] && b < 64; b++) {
        if (!(l[w] >> b & 1)) continue;
        uintptr_t a = i << LEAF_SHIFT | (w * 64 + b) << PAGE_SHIFT;
        if (a != run_end) {
          if (run_end) fn(run, run_end);
          run = a;
        }
        run_end = a + (1ul << PAGE_SHIFT);
      }
  }
  if (run_end) fn(run, run_end);
}

size_t nic_fence_unit(uintptr_t a) {
  if (nic_in_dp((const void *)a)) {
    enum nic_page_kind kind = nic_chunk_at(nic_chunk_index((const void *)a))->mapping.kind;
    return kind == NIC_PAGE_1G ? (size_t)1 << 30 : kind == NIC_PAGE_2M ? (size_t)2 << 20 : 4096;
  }
  return a - nic_control_base < nic_control_size ? 4096 : 0;
}

bool nic_fence_region(uintptr_t a, uintptr_t *start, size_t *len) {
  if (nic_in_dp((const void *)a)) {
    *start = (uintptr_t)nic_chunk_base(nic_chunk_index((const void *)a));
    *len = (size_t)1 << nic_dp.shift;
    return true;
  }
  if (a - nic_control_base >= nic_control_size) return false;
  *start = nic_control_base;
  *len = nic_control_size;
  return true;
}

void nic_fence_gen_bump(void) {
  __atomic_add_fetch(&nic_fence_gen, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&nic_fence_gen_waiters, __ATOMIC_SEQ_CST))
    syscall(SYS_futex, &nic_fence_gen, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}

void nic_fence_gen_wait(unsigned seen) {
  __atomic_add_fetch(&nic_fence_gen_waiters, 1, __ATOMIC_SEQ_CST);
  struct timespec tick = {0, 1000 * 1000};
  syscall(SYS_futex, &nic_fence_gen, FUTEX_WAIT_PRIVATE, seen, &tick, NULL, 0);
  __atomic_sub_fetch(&nic_fence_gen_waiters, 1, __ATOMIC_SEQ_CST);
}
