// The churn driver (README.md, "Method"): fill a cache to the live-byte target, replace items
// for R rounds with random evictions, delete a fraction of the items, then sample after 1 s
// idle and after the allocator's release call.
#pragma once

#include <cstdint>

#include "cli.h"
#include "metrics.h"
#include "release.h"
#include "slab_model.h"
#include "util.h"
#include "value_sizes.h"

namespace frag {

class Run {
public:
  explicit Run(const Options &o);
  int main();

private:
  uint32_t draw();
  void *alloc(uint32_t size);
  void add(uint32_t size);
  void release(Item &it);
  void evict(size_t index);
  void sample(const char *phase, bool force = false);
  void setup();
  void fill();
  void churn();
  void shrink();

  const Options &o_;
  ValuePool sizes_;
  Slab *slab_ = nullptr;
  Peer peer_;
  Rng size_rng_{0}, victims_{0};
  MapArray<Item> items_;
  Series series_;
  size_t n_ = 0, live_ = 0, item_bytes_ = 0, sample_every_ = 1;
  uint64_t op_ = 0, seq_ = 0, drawn_ = 0;
  uint32_t next_ = 0; // drawn, not yet written: the fill's last draw starts the churn
  double drawn_sum_ = 0;
};

} // namespace frag
