/* The spans free's fast paths compare a block's offset with (core/alloc_inline.h), in 16-byte
 * units: the part of the control arena the commit map is trusted for, the arena itself under
 * NICMALLOC_FREE_CHECK=0, and the dataplane range. Each is published as 0 while a watcher of
 * frees holds something that concerns it (events.h: any watcher for control blocks, a block
 * watcher for dataplane blocks), so that one compare tests the range, a block's alignment and
 * the watchers, and free pays nothing more for the memory events. The layers that know a span
 * set it with nic_fast_span_set; the watch word's changes keep the published spans in step. */
#ifndef NIC_FAST_SPANS_H
#define NIC_FAST_SPANS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum nic_fast_span {
  NIC_FAST_CONTROL,   /* trusted commit map: free checks the block, then mi_free */
  NIC_FAST_UNCHECKED, /* NICMALLOC_FREE_CHECK=0: mi_free without a check */
  NIC_FAST_DATAPLANE, /* the reserved dataplane range */
  NIC_FAST_SPANS
};

extern size_t nic_fast_spans[NIC_FAST_SPANS] __attribute__((visibility("hidden")));
/* Set while a republication runs (fast_spans.c). */
extern bool nic_fast_spans_publishing __attribute__((visibility("hidden")));

static inline size_t nic_fast_span(enum nic_fast_span which) {
  return __atomic_load_n(&nic_fast_spans[which], __ATOMIC_RELAXED);
}

/* The true span (0: none); published unless a watcher holds something. */
void nic_fast_span_set(enum nic_fast_span which, size_t units_16);

/* Publishes every span again from the watch word, under a lock. */
void nic_fast_spans_republish(void);

/* After the watch word went from old to now. A watcher that added to it may not return before
 * the spans that concern it read 0 and no republication that read the word before its addition
 * can still store: when one runs, or a span is not 0 yet, it republishes itself (fast_spans.c
 * says why that suffices). A watcher that took the last of a half away republishes, so that
 * frees find their fast paths again. */
static inline void nic_fast_spans_follow(uint64_t old, uint64_t now) {
  if (now > old) { /* either half grew; neither shrank */
    const bool blocks = (uint32_t)now != 0;
    if (__atomic_load_n(&nic_fast_spans_publishing, __ATOMIC_SEQ_CST) ||
        __atomic_load_n(&nic_fast_spans[NIC_FAST_CONTROL], __ATOMIC_SEQ_CST) ||
        __atomic_load_n(&nic_fast_spans[NIC_FAST_UNCHECKED], __ATOMIC_SEQ_CST) ||
        (blocks && __atomic_load_n(&nic_fast_spans[NIC_FAST_DATAPLANE], __ATOMIC_SEQ_CST)))
      nic_fast_spans_republish();
  } else if ((now == 0 && old != 0) || ((uint32_t)now == 0 && (uint32_t)old != 0)) {
    nic_fast_spans_republish();
  }
}

#endif
