/* The control heap's free 4 KiB pages inside pages in use (control_sub_pages.h): the commit map's
 * held bits and a plain drop around sub_pages_scan.c's pass. */
#define _GNU_SOURCE
#include "control_sub_pages.h"

#include "commit_map.h"
#include "log.h"
#include "mi_decommit.h"
#include "mi_layout.h"
#include "page.h"
#include "page_drop.h"
#include "pagemap.h"
#include "sub_pages_scan.h"

#include <stdint.h>
#include <string.h>

static bool refused; /* the kernel would not drop the pages (locked memory): not tried again */
static bool any_held;

/* A page without the mark: a page mimalloc built anew there holds its memory committed again. */
static void forget_stale(uintptr_t header, uintptr_t span, size_t len) {
  const uintptr_t sizes =
      __atomic_load_n((const uintptr_t *)(header + NIC_MI_PAGE_USED), __ATOMIC_RELAXED);
  const uint32_t xblock_size = (uint32_t)(sizes >> 32);
  nic_commit_map_unhold(span, len, xblock_size != 0);
}

static bool begin_pass(uintptr_t lo, uintptr_t hi) {
  (void)lo, (void)hi;
  return true;
}

static bool hold_page(uintptr_t a, uintptr_t from, uintptr_t to) {
  (void)from, (void)to;
  if (!nic_commit_map_hold(a, NIC_PAGE_SIZE)) return false;
  __atomic_store_n(&any_held, true, __ATOMIC_RELAXED);
  return true;
}

/* Each run of pages to drop, as a program's madvise does it (the pages' watchers heard first). */
static size_t drop_runs(uintptr_t lo, const uint64_t *drop, size_t pages) {
  size_t bytes = 0;
  for (size_t i = 0; i < pages;) {
    const uintptr_t a = lo + (i << NIC_PAGE_SHIFT);
    if (!nic_bit_test(drop, i)) {
      i++;
      continue;
    }
    size_t n = 1;
    while (i + n < pages && nic_bit_test(drop, i + n))
      n++;
    const int rc = nic_drop_pages((void *)a, n << NIC_PAGE_SHIFT, false);
    if (rc) {
      __atomic_store_n(&refused, true, __ATOMIC_RELAXED);
      nic_log_warn_once("malloc_trim: cannot give back the free 4 KiB pages inside control pages "
                        "in use (madvise: %s; locked memory?); they stay until their page is free",
                        strerror(-rc));
      return bytes;
    }
    nic_commit_map_note((void *)a, n << NIC_PAGE_SHIFT, NIC_PAGES_DROPPED);
    bytes += n << NIC_PAGE_SHIFT;
    i += n;
  }
  return bytes;
}

static bool page_held(uintptr_t a) {
  return nic_commit_map_held(a);
}

static const struct nic_sub_pages_area control = {
    .forget = forget_stale,
    .begin = begin_pass,
    .hold = hold_page,
    .drop = drop_runs,
    .held = page_held,
};

size_t nic_control_sub_pages_drop_owned(struct nic_sub_pages_cursor *cursor) {
  if (__atomic_load_n(&refused, __ATOMIC_RELAXED)) return 0;
  struct nic_sub_pages_walk walk = {&control, cursor};
  return nic_mi_each_owned_control_segment(nic_sub_pages_pass_segment, &walk);
}

size_t nic_control_trim_owned(void) {
  nic_mi_decommit_owned_control();
  return nic_control_sub_pages_drop_owned(NULL);
}

bool nic_control_sub_pages_held_back(const void *p) {
  if (!__atomic_load_n(&any_held, __ATOMIC_RELAXED) ||
      (uintptr_t)p - nic_commit_map.base >=
          __atomic_load_n(&nic_commit_map.checked, __ATOMIC_RELAXED))
    return false;
  return nic_sub_pages_block_held(p, page_held);
}

void nic_control_sub_pages_note_rebuilt(const void *p) {
  const uintptr_t a = (uintptr_t)p & ~(uintptr_t)(NIC_PAGE_SIZE - 1);
  if (__atomic_load_n(&any_held, __ATOMIC_RELAXED) &&
      a - nic_commit_map.base < __atomic_load_n(&nic_commit_map.checked, __ATOMIC_RELAXED) &&
      nic_commit_map_held(a))
    nic_sub_pages_forget_rebuilt(p, &control);
}
