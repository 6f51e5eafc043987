/* Which pages protect has write-protected: one bit per 4 KiB page, in 32 KiB leaves (one per
 * GiB) mapped on first use and never unmapped (a page map), so that a SIGSEGV handler or the uffd
 * thread can ask "is this fault ours?" without a lock. The pagecount table cannot answer that: a
 * page's count drops to zero before the completion makes it writable, and a fault in between must
 * still wait rather than be passed on as someone else's.
 * Also here: the unit of protection at an address, from the memory kind behind it. */
#include "chunks.h"
#include "fence.h"
#include "pagemap.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The control arena's range (alloc/os/vspace.c; 0 when it could not be made). */
extern uintptr_t nic_control_base;
extern size_t nic_control_size;

/* A bitmap instance of the runtime's page map (alloc/base/pagemap.h): 32 KiB leaves, one per GiB;
 * the root is 1 MiB of .bss that costs nothing until protect runs. */
static void *root[NIC_PAGEMAP_ROOT_ENTRIES];
static const struct nic_pagemap map = NIC_PAGEMAP(root, 2, 1);
unsigned nic_fence_gen, nic_fence_gen_waiters;
/* When each unit was last released, in release epochs (release_epoch, bumped at each release):
 * the uffd thread tells by it that a writer it saw held was woken since. A leaf per GiB, made
 * when a unit there is first marked. */
static void *released_root[NIC_PAGEMAP_ROOT_ENTRIES];
static const struct nic_pagemap released_map = NIC_PAGEMAP(released_root, 2, 64);
static uint64_t release_epoch;
/* Pages the program took writes away from with mprotect: their release must not give writes
 * back. Its own map, so that memory protect never covers costs no leaf. */
static void *ro_root[NIC_PAGEMAP_ROOT_ENTRIES];
static const struct nic_pagemap ro_map = NIC_PAGEMAP(ro_root, 2, 1);

void nic_fence_note_program_prot(uintptr_t start, uintptr_t end, int prot) {
  if (end <= start) return;
  if (prot & PROT_WRITE) {
    nic_pagemap_bits(&ro_map, start, end, false);
  } else if (nic_fence_unit(start) && nic_pagemap_reserve(&ro_map, start, end)) {
    nic_pagemap_bits(&ro_map, start, end, true);
  }
}

void nic_fence_forget_program_prot(uintptr_t start, uintptr_t end) {
  nic_pagemap_bits(&ro_map, start, end, false);
}

bool nic_fence_program_read_only(uintptr_t a) {
  return nic_pagemap_bit(&ro_map, a);
}

bool nic_fence_marked(uintptr_t a) {
  return nic_pagemap_bit(&map, a);
}

/* Writers hold the protect lock, so only readers race with them; a hugepage unit is 512 pages,
 * set a word (64 pages) per atomic. */
bool nic_fence_mark(uintptr_t start, uintptr_t end) {
  if (end <= start) return true;
  if (!nic_pagemap_reserve(&map, start, end) || !nic_pagemap_reserve(&released_map, start, end))
    return false;
  nic_pagemap_bits(&map, start, end, true);
  return true;
}

bool nic_fence_any_marked(uintptr_t start, uintptr_t end) {
  for (uintptr_t a = nic_page_down(start), next; a < end; a = next) {
    const uint64_t *leaf = nic_pagemap_span(&map, a, &next);
    if (!leaf) continue;
    const uintptr_t stop = end < next ? end : next;
    size_t bit = nic_pagemap_index(&map, a);
    for (size_t left = (stop - a + NIC_PAGE_SIZE - 1) >> NIC_PAGE_SHIFT, n; left; left -= n) {
      const uint64_t mask = nic_bits_run(bit, left, &n);
      if (__atomic_load_n(&leaf[bit / 64], __ATOMIC_ACQUIRE) & mask) return true;
      bit += n;
    }
  }
  return false;
}

void nic_fence_unmark(uintptr_t start, uintptr_t end) {
  nic_pagemap_bits(&map, start, end, false);
}

void nic_fence_note_released(uintptr_t start, uintptr_t end, size_t unit) {
  const uint64_t epoch = __atomic_add_fetch(&release_epoch, 1, __ATOMIC_SEQ_CST);
  for (uintptr_t u = start; u < end; u += unit) {
    uint64_t *at = nic_pagemap_u64(&released_map, u);
    if (at) __atomic_store_n(at, epoch, __ATOMIC_RELEASE);
  }
}

uint64_t nic_fence_release_epoch(void) {
  return __atomic_load_n(&release_epoch, __ATOMIC_SEQ_CST);
}

bool nic_fence_released_since(uintptr_t a, uint64_t epoch) {
  const size_t unit = nic_fence_unit(a);
  const uint64_t *at = unit ? nic_pagemap_u64(&released_map, a & ~(unit - 1)) : NULL;
  return at && __atomic_load_n(at, __ATOMIC_ACQUIRE) > epoch;
}

bool nic_fence_none_marked(void) {
  for (uintptr_t base = 0, next; base < NIC_USER_END; base = next) {
    const uint64_t *l = nic_pagemap_span(&map, base, &next);
    for (size_t w = 0; l && w < nic_pagemap_leaf_bytes(&map) / sizeof *l; w++)
      if (__atomic_load_n(&l[w], __ATOMIC_RELAXED)) return false;
  }
  return true;
}

void nic_fence_each_marked(void (*fn)(uintptr_t start, uintptr_t end)) {
  uintptr_t run = 0, run_end = 0;
  for (uintptr_t base = 0, next; base < NIC_USER_END; base = next) {
    const uint64_t *l = nic_pagemap_span(&map, base, &next);
    for (uintptr_t w = 0; l && w < nic_pagemap_leaf_bytes(&map) / sizeof *l; w++)
      for (unsigned b = 0; l[w] && b < 64; b++) {
        if (!(l[w] >> b & 1)) continue;
        uintptr_t a = base | (w * 64 + b) << NIC_PAGE_SHIFT;
        if (a != run_end) {
          if (run_end) fn(run, run_end);
          run = a;
        }
        run_end = a + NIC_PAGE_SIZE;
      }
  }
  if (run_end) fn(run, run_end);
}

size_t nic_fence_unit(uintptr_t a) {
  if (nic_in_dp((const void *)a)) {
    const void *q = (const void *)a;
    enum nic_page_kind kind =
        nic_chunk_at(nic_chunk_index(q))->steps[nic_step_index(q)].mapping.kind;
    return kind == NIC_PAGE_1G   ? (size_t)1 << 30
           : kind == NIC_PAGE_2M ? (size_t)2 << 20
                                 : NIC_PAGE_SIZE;
  }
  return a - nic_control_base < nic_control_size ? NIC_PAGE_SIZE : 0;
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
