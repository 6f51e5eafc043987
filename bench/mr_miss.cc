// MR-miss benchmark: one memcached-like send stream (value sizes from the Facebook pools, Zipf
// item popularity, replacements at the paper's set/get ratio) with its buffers in
//   arena      nicmalloc dataplane chunks (one registration per pin step)
//   per-buffer an ordinary heap, every buffer registered on its own (registered at allocation,
//              deregistered at free)
//   rcache     an ordinary heap, registered at send time through nicmalloc's registration cache
// Every sent entry is recorded (region, region base, address, length) and replayed through the
// NIC translation-cache model (regcache/model/tcache_model.h) at several cache capacities: modeled
// misses per million entries and the per-send modeled latency distribution. Registrations run
// for real on the sim backend. Deterministic: fixed seeds, no timing.
//   mr_miss CSV [--live-mib N] [--sends N] [--out DIR] [--scheme arena|per-buffer|rcache]
// (--scheme: that scheme alone, as bench/step_sweep.sh runs the arena once per pin step)
#include "default_settings.h"
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "nicmalloc.h"
#include "value_sizes.h"
extern "C" {
#include "backend.h"
#include "rcache.h"
#include "tcache_model.h"
}

namespace {

struct Access {
  uint64_t region;
  uintptr_t base, addr;
  uint32_t len;
  uint32_t registered_bytes; // nonzero when this send had to register first
};

struct Item {
  char *buf = nullptr;
  size_t size = 0;
  nic_registration reg{}; // per-buffer scheme only
};

enum class Scheme { arena, per_buffer, rcache };
const char *name_of(Scheme s) {
  return s == Scheme::arena ? "arena" : s == Scheme::per_buffer ? "per-buffer" : "rcache";
}

struct Trace {
  std::vector<Access> sends;
  uint64_t registrations = 0;
  uint64_t page_size = 4096;
  size_t items = 0;
  size_t step = 0; // the dataplane pin step (arena scheme)
  size_t sent = 0; // sends; t.sends holds their entries
};

// Zipf(0.99) over n items by inverse CDF on a precomputed table.
struct Zipf {
  std::vector<double> cdf;
  explicit Zipf(size_t n) : cdf(n) {
    double sum = 0;
    for (size_t i = 0; i < n; i++)
      cdf[i] = sum += 1.0 / std::pow(double(i + 1), 0.99);
    for (double &c : cdf)
      c /= sum;
  }
  size_t pick(std::mt19937_64 &rng) {
    double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
  }
};

void make(Scheme s, Item &it, size_t size, Trace &t) {
  it.size = size;
  it.buf = static_cast<char *>(s == Scheme::arena ? nic_malloc(size) : malloc(size));
  memset(it.buf, 1, size);
  if (s == Scheme::per_buffer) {
    nic_backend *b = nic_backend_active();
    if (int rc = b->reg(b, it.buf, size, NIC_ACCESS_LOCAL, &it.reg)) {
      fprintf(stderr, "mr_miss: per-buffer registration failed: %d\n", rc);
      exit(1);
    }
    t.registrations++;
  }
}

void unmake(Scheme s, Item &it) {
  if (s == Scheme::per_buffer) nic_backend_active()->dereg(nic_backend_active(), &it.reg);
  free(it.buf);
}

// One send of the item: its entries appended to t.sends. A dataplane buffer across a pin step's
// end goes as one entry per step (each step is its own registration), as nic_sga_add sends it.
void send_one(Scheme s, const Item &it, Trace &t) {
  t.sent++;
  if (s == Scheme::per_buffer) {
    t.sends.push_back({it.reg.lkey, reinterpret_cast<uintptr_t>(it.reg.base),
                       reinterpret_cast<uintptr_t>(it.buf), uint32_t(it.size), 0});
    return;
  }
  const uintptr_t end = reinterpret_cast<uintptr_t>(it.buf) + it.size;
  for (uintptr_t p = reinterpret_cast<uintptr_t>(it.buf); p < end;) {
    size_t piece = end - p;
    if (s == Scheme::arena && t.step) piece = std::min<size_t>(piece, t.step - (p & (t.step - 1)));
    Access a{0, 0, p, uint32_t(piece), 0};
    nic_rcache_stats before; // the cache's own counters: nic_get_stats reads /proc
    if (s == Scheme::rcache) nic_rcache_get_stats(nic_rcache_process(), &before);
    nic_region_ref ref;
    if (int rc = nic_register(reinterpret_cast<void *>(p), piece, NIC_REG_LOCAL, &ref)) {
      fprintf(stderr, "mr_miss: nic_register failed: %d\n", rc);
      exit(1);
    }
    a.region = ref.lkey;
    a.base = reinterpret_cast<uintptr_t>(ref.region_base);
    if (s == Scheme::rcache) {
      nic_rcache_stats after;
      nic_rcache_get_stats(nic_rcache_process(), &after);
      if (after.misses > before.misses) {
        a.registered_bytes = uint32_t(ref.region_len);
        t.registrations++;
      }
    }
    nic_unregister(&ref);
    t.sends.push_back(a);
    p += piece;
  }
}

// At most max_items buffers: the sim NIC, like a real one, holds a bounded number of regions
// (65536), and per-buffer registration needs one per buffer.
Trace record(Scheme s, const ValuePool &pool, size_t live_bytes, size_t max_items, size_t sends,
             double set_ratio) {
  std::mt19937_64 rng(42);
  std::vector<Item> items;
  Trace t;
  if (s == Scheme::arena) {
    nic_stats st = NIC_STATS_INIT;
    nic_get_stats(&st);
    t.step = st.pin_step;
  }
  for (size_t live = 0; live < live_bytes && items.size() < max_items;) {
    items.emplace_back();
    make(s, items.back(), pool.sample(rng), t);
    live += items.back().size;
  }
  Zipf zipf(items.size());
  t.sends.reserve(sends);
  for (size_t i = 0; i < sends; i++) {
    Item &it = items[zipf.pick(rng)];
    send_one(s, it, t);
    if (std::uniform_real_distribution<double>(0, 1)(rng) < set_ratio) {
      unmake(s, it);
      make(s, it, pool.sample(rng), t);
    }
  }
  if (s == Scheme::arena) {
    nic_stats st = NIC_STATS_INIT;
    nic_get_stats(&st);
    t.page_size = st.page_kind == NIC_PAGE_1G    ? (1u << 30)
                  : st.page_kind >= NIC_PAGE_THP ? (2u << 20)
                                                 : 4096;
    // One registration per step: the steps the sends reached.
    std::vector<uint64_t> regions;
    for (const Access &a : t.sends)
      regions.push_back(a.region);
    std::sort(regions.begin(), regions.end());
    t.registrations = size_t(std::unique(regions.begin(), regions.end()) - regions.begin());
  }
  t.items = items.size();
  for (Item &it : items)
    unmake(s, it);
  return t;
}

// The arena's pages, as the NIC's translation table holds them: what makes a step's misses.
const char *page_name(uint64_t page_size) {
  return page_size == (1u << 30) ? "1G" : page_size == (2u << 20) ? "2M" : "4K";
}

struct Result {
  double misses_per_million, p50_us, p99_us, p999_us, mean_us, variance_us2;
};

// Registration modeled as UCX does: 16 us plus 0.06 ns per byte.
Result replay(const Trace &t, uint32_t capacity) {
  const nic_tcache_preset *cx5 = nic_tcache_preset_find("cx5");
  nic_tcache_params p = cx5->params;
  p.capacity = capacity;
  p.page_size = t.page_size;
  p.window = 0;
  nic_tcache *m = nic_tcache_new(&p);
  std::vector<double> latency_us;
  latency_us.reserve(t.sends.size());
  uint64_t misses = 0;
  for (const Access &a : t.sends) {
    uint32_t n = nic_tcache_access(m, a.region, a.base, a.addr, a.len);
    misses += n;
    double us = n * p.miss_ns / 1000.0;
    if (a.registered_bytes) us += 16 + a.registered_bytes * 0.06e-3;
    latency_us.push_back(us);
  }
  nic_tcache_free(m);
  std::sort(latency_us.begin(), latency_us.end());
  auto at = [&](double q) { return latency_us[size_t(q * (latency_us.size() - 1))]; };
  // Welford: the spread is what hurts tail-sensitive senders, and it is small next to the mean.
  double mean = 0, m2 = 0;
  size_t n = 0;
  for (double x : latency_us) {
    double delta = x - mean;
    mean += delta / double(++n);
    m2 += delta * (x - mean);
  }
  const double variance = n > 1 ? m2 / double(n - 1) : 0;
  return {misses * 1e6 / t.sends.size(), at(0.5), at(0.99), at(0.999), mean, variance};
}

// A count option's value: a whole number of at least 1, or the program ends saying so (no sends
// left the latency percentiles nothing to index and the means a division by zero; no buffers,
// nothing to pick from).
size_t count_arg(const char *option, const char *text) {
  char *end = nullptr;
  errno = 0;
  const unsigned long long n = strtoull(text, &end, 0);
  if (errno || end == text || *end || n == 0 || text[0] == '-') {
    fprintf(stderr, "mr_miss: %s wants a whole number of at least 1, not '%s'\n", option, text);
    exit(2);
  }
  return size_t(n);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: mr_miss CSV [--live-mib N] [--max-items N] [--sends N] [--out DIR] "
                    "[--scheme arena|per-buffer|rcache]\n");
    return 2;
  }
  size_t live_mib = 256, sends = 1000000, max_items = 60000;
  std::string out = "results", only;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--live-mib"))
      live_mib = count_arg(argv[i], argv[i + 1]);
    else if (!strcmp(argv[i], "--sends"))
      sends = count_arg(argv[i], argv[i + 1]);
    else if (!strcmp(argv[i], "--max-items"))
      max_items = count_arg(argv[i], argv[i + 1]);
    else if (!strcmp(argv[i], "--out"))
      out = argv[i + 1];
    else if (!strcmp(argv[i], "--scheme"))
      only = argv[i + 1];
  }
  nic_bench_default_settings(argv, {{"NICMALLOC_BACKEND", "sim"}});
  // Sets per get from the paper's Table 2, per pool.
  const std::pair<const char *, double> set_ratios[] = {{"wildcard", 8.26 / 262},
                                                        {"app", 11.9 / 96.5},
                                                        {"replicated", 1.75 / 710},
                                                        {"regional", 0.79 / 9.1}};
  const uint32_t capacities[] = {1024, 4096, 16384, 65536, 262144};
  std::ofstream sweep(out + "/mr_miss_sweep.csv");
  if (!sweep) {
    fprintf(stderr, "mr_miss: cannot write %s/mr_miss_sweep.csv: %s (does --out exist?)\n",
            out.c_str(), strerror(errno));
    return 1;
  }
  sweep << "pool,scheme,capacity,misses_per_million\n";
  printf("| pool | buffers | items | misses / 1M entries (cx5, 16K entries) | p50 / p99 / p99.9 "
         "per-entry modeled us | mean us, stddev us (variance us²) | registrations | per 1M sends "
         "| entries / send | pages modeled |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const ValuePool &pool : load_value_pools(argv[1])) {
    double ratio = 0.03;
    for (auto &[name, r] : set_ratios)
      if (pool.name == name) ratio = r;
    for (Scheme s : {Scheme::arena, Scheme::per_buffer, Scheme::rcache}) {
      if (!only.empty() && only != name_of(s)) continue;
      fprintf(stderr, "mr_miss: %s / %s\n", pool.name.c_str(), name_of(s));
      Trace t = record(s, pool, live_mib << 20, max_items, sends, ratio);
      for (uint32_t c : capacities)
        sweep << pool.name << ',' << name_of(s) << ',' << c << ','
              << replay(t, c).misses_per_million << '\n';
      Result r = replay(t, 16384);
      printf("| %s | %s | %zu | %.0f | %.2f / %.2f / %.2f | %.3f, %.3f (%.4g) | %llu | %.0f | %.4f "
             "| %s |\n",
             pool.name.c_str(), name_of(s), t.items, r.misses_per_million, r.p50_us, r.p99_us,
             r.p999_us, r.mean_us, std::sqrt(r.variance_us2), r.variance_us2,
             (unsigned long long)t.registrations, t.registrations * 1e6 / t.sent,
             double(t.sends.size()) / double(t.sent), page_name(t.page_size));
      fflush(stdout);
    }
  }
  sweep.flush();
  if (!sweep) {
    fprintf(stderr, "mr_miss: writing %s/mr_miss_sweep.csv failed\n", out.c_str());
    return 1;
  }
  return 0;
}
