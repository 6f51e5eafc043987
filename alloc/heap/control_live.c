/* Live control bytes from mimalloc 2.0.9's page headers (control_live.h, mi_layout.h).
 *
 * dp_live.c reads the dataplane's headers in place, under the chunk lock that keeps a chunk
 * mapped. Nothing keeps another thread's control segment: its owner may free it, and mimalloc
 * then maps its memory PROT_NONE, under the walk. So every header is copied by the kernel
 * (process_vm_readv), which fails on such memory instead of faulting, and a segment that
 * changes under the copy counts as what the copy saw. */
#define _GNU_SOURCE /* process_vm_readv */
#include "control_live.h"

#include "commit_map.h"
#include "dp_live.h"
#include "mi_layout.h"
#include "vspace.h"

#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

enum { HEADERS_PER_COPY = 32 }; /* 2.5 KiB of page headers on the stack per copy */

static bool copy(uintptr_t from, void *to, size_t len) {
  struct iovec local = {to, len}, remote = {(void *)from, len};
  return process_vm_readv(gettid(), &local, 1, &remote, 1, 0) == (ssize_t)len;
}

static uint32_t u32_of(const unsigned char *header, size_t offset) {
  uint32_t v;
  memcpy(&v, header + offset, sizeof v);
  return v;
}

/* The live bytes of one page header: blocks in use times their size (a huge page's one block
 * spans the page, as in 2.0.9's mi_page_block_size). */
static size_t page_live(const unsigned char *header) {
  const uint32_t used = u32_of(header, NIC_MI_PAGE_USED);
  const uint32_t xblock_size = u32_of(header, NIC_MI_PAGE_XBLOCK_SIZE + 4);
  if (!used || !xblock_size) return 0;
  const size_t size = xblock_size < NIC_MI_HUGE_BLOCK_SIZE
                          ? xblock_size
                          : (size_t)u32_of(header, NIC_MI_PAGE_SLICE_COUNT) << NIC_MI_SLICE_SHIFT;
  return (size_t)used * size;
}

/* One segment: its live bytes into *live; returns its arena claim, where the next may start. */
static size_t segment_live(uintptr_t segment, size_t *live) {
  uintptr_t head[(NIC_MI_SEG_SLICES - NIC_MI_SEG_SLICES_TOTAL) / sizeof(uintptr_t)];
  if (!copy(segment + NIC_MI_SEG_SLICES_TOTAL, head, sizeof head)) return NIC_MI_SEGMENT_SIZE;
  /* A header changing under the copy may say anything: a length past the arena would end the
   * walk early, or wrap its step to 0 and never end it. */
  const size_t slices = head[0];
  if (slices == 0 || slices > (nic_control_size >> NIC_MI_SLICE_SHIFT)) return NIC_MI_SEGMENT_SIZE;
  const size_t entries = head[(NIC_MI_SEG_SLICE_ENTRIES - NIC_MI_SEG_SLICES_TOTAL) / 8];
  const size_t per_segment = NIC_MI_SEGMENT_SIZE >> NIC_MI_SLICE_SHIFT;
  unsigned char headers[HEADERS_PER_COPY * NIC_MI_PAGE_HEADER];
  size_t first = 0, copied = 0; /* the entries in headers: [first, first + copied) */
  for (size_t index = 0; index < entries && index < per_segment;) {
    if (index < first || index >= first + copied) {
      first = index;
      copied = entries - index < HEADERS_PER_COPY ? entries - index : HEADERS_PER_COPY;
      if (!copy(segment + NIC_MI_SEG_SLICES + index * NIC_MI_PAGE_HEADER, headers,
                copied * NIC_MI_PAGE_HEADER))
        break;
    }
    const unsigned char *header = headers + (index - first) * NIC_MI_PAGE_HEADER;
    const uint32_t span = u32_of(header, NIC_MI_PAGE_SLICE_COUNT);
    if (span == 0) break; /* not a span start: the segment is changing under the walk */
    *live += page_live(header);
    index += span;
  }
  return nic_mi_segment_claim(slices);
}

bool nic_control_live(size_t *live) {
  *live = 0;
  /* A copy of our own stack fails only where the call is refused (a seccomp filter): unknown. */
  size_t probe = 0, copied = 1;
  if (!nic_control_size || !nic_dp_live_layout_checked() ||
      !copy((uintptr_t)&copied, &probe, sizeof probe))
    return false;
  /* Up to the last segment mimalloc ever committed in (mi_decommit.c says why), where the commit
   * map is kept; under NICMALLOC_FREE_CHECK=0 the whole arena, a bit of mimalloc's segment map
   * per 32 MiB (16 KiB of it for 4 TiB). */
  size_t high = nic_control_size;
  if (__atomic_load_n(&nic_commit_map.size, __ATOMIC_ACQUIRE)) {
    const size_t committed_below =
        (__atomic_load_n(&nic_commit_map.high, __ATOMIC_ACQUIRE) + NIC_MI_SEGMENT_MASK) &
        ~(size_t)NIC_MI_SEGMENT_MASK;
    if (committed_below < high) high = committed_below;
  }
  for (size_t off = 0; off < high;) {
    const uintptr_t segment = nic_control_base + off;
    off += nic_mi_segment_at(segment) ? segment_live(segment, live) : NIC_MI_SEGMENT_SIZE;
  }
  return true;
}
