/* Peaks of dataplane live and pinned bytes (nic_stats' dataplane_live_peak and
 * dataplane_pinned_peak), for programs that cannot be asked while they run: an unmodified server
 * under LD_PRELOAD gives its figures only at exit (NICMALLOC_STATS), when its connections and
 * buffers are gone.
 *
 * Sampled by the reaper once per pass (from the live bytes it reads for its own decisions, so
 * the walk over mimalloc's pages is not made twice) and by each stats read, which keeps what it
 * saw. Steps and chunks
 * are released inside a reaper pass after the sample, but pages inside a live step are given
 * back when mimalloc decommits them (step_pages.c), between passes: both peaks are lower bounds,
 * as fine as the reaper's period (a quarter of the shorter of the release and purge delays,
 * 10 ms to 1 s). Nothing on the allocation paths. */
#ifndef NIC_PEAKS_H
#define NIC_PEAKS_H

#include <stddef.h>

#include <stdint.h>

#include "chunks.h"

/* The reaper's sample: live bytes per chunk slot as nic_dp_live_sum gave them, and the pinned
 * bytes now; keeps the larger of each. */
void nic_peaks_sample(const int64_t live[NIC_CHUNK_SLOTS]);
/* The peaks, counting and keeping values just read (live_now, pinned_now): a peak never goes
 * down, and what a read saw is in every later read's peak (the exit report's included). */
void nic_peaks_read(size_t live_now, size_t pinned_now, size_t *live_peak, size_t *pinned_peak);

#endif
