/* The peaks of dataplane live and pinned bytes (peaks.h says when they are sampled). */
#include "peaks.h"

#include "chunks.h"

#include <stdint.h>

static size_t live_peak, pinned_peak;

static void keep_max(size_t *peak, size_t value) {
  size_t seen = __atomic_load_n(peak, __ATOMIC_RELAXED);
  while (value > seen &&
         !__atomic_compare_exchange_n(peak, &seen, value, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
}

void nic_peaks_sample(const int64_t live[NIC_CHUNK_SLOTS]) {
  int64_t total = 0;
  for (unsigned i = 0; i < NIC_CHUNK_SLOTS; i++)
    total += live[i];
  struct nic_chunk_totals chunks;
  nic_chunk_totals(&chunks);
  keep_max(&live_peak, total > 0 ? (size_t)total : 0);
  keep_max(&pinned_peak, chunks.pinned_bytes);
}

void nic_peaks_read(size_t live_now, size_t pinned_now, size_t *live_out, size_t *pinned_out) {
  keep_max(&live_peak, live_now);
  keep_max(&pinned_peak, pinned_now);
  *live_out = __atomic_load_n(&live_peak, __ATOMIC_RELAXED);
  *pinned_out = __atomic_load_n(&pinned_peak, __ATOMIC_RELAXED);
}
