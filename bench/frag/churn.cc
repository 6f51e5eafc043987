// The churn driver (churn.h). Every allocator sees the same operations: sizes and victims come
// from generators seeded by --seed alone.
#include "churn.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#ifdef FRAG_WITH_NIC
#include <nicmalloc.h>
#endif

#include "summary.h"

namespace frag {
namespace {

ValuePool load_pool(const std::string &csv, const std::string &name) {
  std::vector<ValuePool> pools;
  try {
    pools = load_value_pools(csv);
  } catch (const std::exception &e) {
    die("%s", e.what());
  }
  for (const ValuePool &p : pools)
    if (p.name == name) return p;
  die("pool %s not in the size table", name.c_str());
}

// The shared model (bench/value_sizes.h) driven by splitmix64, not std::mt19937_64: the
// stream of sizes must be the same in every build and for every allocator.
uint32_t size_at(const ValuePool &pool, Rng &r) {
  return (uint32_t)pool.at_percentile(r.unit() * 100);
}

} // namespace

Run::Run(const Options &o) : o_(o), sizes_(load_pool(o.csv, o.pool)) {}

uint32_t Run::draw() {
  uint32_t s = size_at(sizes_, size_rng_);
  drawn_sum_ += s;
  drawn_++;
  return s;
}

void *Run::alloc(uint32_t size) {
#ifdef FRAG_WITH_NIC
  if (o_.api == "nic") return nic_malloc(size);
#endif
  return malloc(size);
}

void Run::add(uint32_t size) {
  if (n_ == items_.cap) die("item table full (raise the estimate in Run::setup)%s", "");
  void *p = nullptr;
  if (slab_) {
    slab_->item(size, +1);
    item_bytes_ += size + slab_->overhead;
  } else {
    p = alloc(size);
    if (!p) die("allocation of %s bytes failed", std::to_string(size).c_str());
    memset(p, (int)(op_ & 0xff), size); // a cache writes the whole value: pages become resident
  }
  items_.p[n_++] = Item{p, size, seq_++};
  live_ += size;
  op_++;
}

void Run::release(Item &it) {
  if (slab_) {
    slab_->item((uint32_t)it.size, -1);
    item_bytes_ -= it.size + slab_->overhead;
  } else {
    free(it.ptr);
  }
  live_ -= it.size;
  op_++;
}

void Run::evict(size_t index) {
  release(items_.p[index]);
  items_.p[index] = items_.p[--n_];
}

void Run::sample(const char *phase, bool force) {
  if (!force && op_ % sample_every_) return;
  series_.take(phase, Counts{op_, n_, live_, item_bytes_}, o_.api == "nic", slab_);
}

// Everything that must not count: the item table (sized from a separate estimate of the mean
// size, so that the size stream itself is untouched), the slab model, the peer lookup and the
// series file all come before the RSS baseline.
void Run::setup() {
  size_rng_.s = o_.seed;
  victims_.s = o_.seed ^ 0x5bd1e995;
  Rng est{o_.seed + 1};
  double est_mean = 0;
  for (int i = 0; i < 200000; i++)
    est_mean += size_at(sizes_, est) / 200000.0;
  items_.map((size_t)(o_.live_target / est_mean * 1.3) + 100000);
  if (o_.api == "slab") slab_ = new Slab(o_.slab_factor, !o_.slab_uncapped, o_.key_bytes);
  if (o_.api == "malloc") {
    peer_ = find_peer();
    if (!o_.expect_lib.empty() && peer_.lib.find(o_.expect_lib) == std::string::npos)
      die("malloc comes from %s, not the expected library (LD_PRELOAD failed?)", peer_.lib.c_str());
  }
  series_.open(o_.out);
  series_.start();
  size_t expect_items = (size_t)(o_.live_target / est_mean);
  sample_every_ =
      std::max<size_t>(1, (size_t)(expect_items * (2 + o_.rounds + o_.shrink_frac)) / o_.samples);
}

void Run::fill() {
  sample("fill", true);
  next_ = draw();
  while (live_ + next_ <= o_.live_target) {
    add(next_);
    sample("fill");
    next_ = draw();
  }
  sample("fill", true);
}

// Each round writes as many new items as the fill did; random victims make room, like a cache
// under a memory limit whose keys are equally popular.
void Run::churn() {
  uint64_t churn_ops = (uint64_t)(n_ * o_.rounds);
  for (uint64_t k = 0; k < churn_ops; k++) {
    while (live_ + next_ > o_.live_target)
      evict(victims_.below(n_));
    add(next_);
    sample("churn");
    next_ = draw();
  }
  sample("churn", true);
}

void Run::shrink() {
  size_t drop = (size_t)(n_ * o_.shrink_frac);
  if (o_.shrink == "fifo") { // oldest first: sort by insertion order, drop the head
    std::sort(items_.p, items_.p + n_, [](const Item &a, const Item &b) { return a.seq < b.seq; });
    for (size_t i = 0; i < drop; i++) {
      release(items_.p[i]);
      sample("shrink");
    }
    memmove(items_.p, items_.p + drop, (n_ - drop) * sizeof(Item));
    n_ -= drop;
  } else {
    for (size_t i = 0; i < drop; i++) {
      evict(victims_.below(n_));
      sample("shrink");
    }
  }
  sample("shrink", true);
}

int Run::main() {
  setup();
  Result r;
  fill();
  r.filled = n_;
  r.t_fill = now_s() - series_.t0();
  churn();
  r.t_churn = now_s() - series_.t0() - r.t_fill;
  r.live_before = live_, r.mem_before = series_.last().mem, r.rss_before = series_.last().rss;

  shrink();
  if (!slab_) sleep_ms(o_.idle_ms); // slab pages never go back: nothing to wait for
  sample("idle", true);
  r.mem_idle = series_.last().mem;
  if (!slab_) give_back(o_.api == "nic", peer_);
  sample("release", true);
  r.live_after = live_, r.mem_after = series_.last().mem, r.rss_after = series_.last().rss;

  r.heap = heap_info(o_.api == "nic");
  const size_t gran[4] = {4096, 64 << 10, 2 << 20, r.heap.chunk};
  if (!slab_) best_case_kept(items_.p, n_, gran, r.kept);
  r.size_mean_sample = drawn_sum_ / (double)drawn_;
  r.size_mean_model = sizes_.model_mean();
  r.size_mean_paper = sizes_.mean;
  r.peak_mem = series_.peak_mem, r.peak_live = series_.peak_live;
  r.peak_rss = series_.peak_rss, r.peak_items = series_.peak_items;
  r.peak_usable = series_.peak_usable;
  r.slab = slab_;
  r.lib = slab_ ? "-" : peer_.lib.empty() ? "nicmalloc" : peer_.lib;
  r.t0 = series_.t0();
  print_result(o_, r);
  series_.close();
  if (!o_.summary.empty()) append_summary(o_, r);
  return 0;
}

} // namespace frag
