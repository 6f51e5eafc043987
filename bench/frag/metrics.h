// What the allocator holds, sampled over the run: RSS above the start-up baseline for a peer,
// dataplane_pinned for nicmalloc's dataplane heap, slab pages for the memcached model
// (README.md, "Held memory"). Written to the series CSV; peaks are kept over fill and churn.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "slab_model.h"

namespace frag {

size_t rss_bytes();

// What the driver knows when it samples.
struct Counts {
  uint64_t op;
  size_t items, live, item_bytes;
};

struct Sample {
  const char *phase;
  uint64_t op;
  double t;
  size_t items, live, item_bytes, mem, rss, pinned, mapped, usable, slab_noauto, chunks;
};

class Series {
public:
  // Opens the series CSV and writes its header; dies if it cannot.
  void open(const std::string &path);
  // Takes the RSS baseline and the time origin: call once the driver's tables are mapped.
  void start();
  // One row. nic: read nicmalloc's dataplane counters; slab: the memcached model, if any.
  void take(const char *phase, const Counts &c, bool nic, const Slab *slab);
  void close();

  double t0() const { return t0_; }
  const Sample &last() const { return last_; }
  size_t peak_mem = 0, peak_live = 0, peak_rss = 0, peak_items = 0; // over fill and churn
  size_t peak_usable = 0; // nic: the block sizes mimalloc gave, whatever held them

private:
  FILE *out_ = nullptr;
  size_t rss_base_ = 0;
  double t0_ = 0;
  Sample last_{};
};

// nicmalloc's dataplane heap at the end of the run (defaults for everything else).
struct HeapInfo {
  size_t chunk = 32 << 20; // also the coarsest best-case granularity for peers
  char kind[16] = "-";
  uint64_t fallbacks = 0;
};

HeapInfo heap_info(bool nic);

} // namespace frag
