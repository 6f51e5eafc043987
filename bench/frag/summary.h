// End of a run: one line on stderr (runs.log) and one row of summary.csv, which
// frag_report.py turns into the tables of summary.md.
#pragma once

#include <cstddef>
#include <string>

#include "cli.h"
#include "metrics.h"
#include "slab_model.h"

namespace frag {

struct Result {
  size_t filled = 0; // items at the end of the fill
  double t_fill = 0, t_churn = 0, t0 = 0;
  double size_mean_sample = 0, size_mean_model = 0, size_mean_paper = 0;
  size_t live_before = 0, mem_before = 0, rss_before = 0; // end of churn
  size_t mem_idle = 0;                                    // shrink, then 1 s idle
  size_t live_after = 0, mem_after = 0, rss_after = 0;    // after the release call
  size_t peak_mem = 0, peak_live = 0, peak_rss = 0, peak_items = 0, peak_usable = 0;
  double kept[4] = {0, 0, 0, 0}; // best case at 4 KiB, 64 KiB, 2 MiB, chunk (release.h)
  HeapInfo heap;
  const Slab *slab = nullptr; // the memcached model, if that was the run
  std::string lib;            // what served malloc: a peer's path, "nicmalloc" or "-" (slab)
};

void print_result(const Options &o, const Result &r);
void append_summary(const Options &o, const Result &r); // dies if it cannot write

} // namespace frag
