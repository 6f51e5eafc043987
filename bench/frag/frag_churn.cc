// frag_churn: memcached-like churn that measures how much memory an allocator holds per live
// byte (see README.md). Fill a cache to a live-byte target, replace items for R rounds, delete a
// fraction of the items, then let the allocator give memory back.
//
// Built twice from this file: frag_churn links nicmalloc (--api nic: nic_malloc, pinned chunks);
// frag_churn_malloc does not (--api malloc under LD_PRELOAD of a peer; --api slab: memcached's
// slab allocator computed for the same size stream, no allocation at all).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dlfcn.h>
#include <fcntl.h>
#include <functional>
#include <iterator>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>
#ifdef FRAG_WITH_NIC
#include <nicmalloc.h>
#endif

namespace {

[[noreturn]] void die(const char *fmt, const char *arg = "") {
  fprintf(stderr, "frag_churn: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(2);
}

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void sleep_ms(unsigned ms) {
  timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, nullptr);
}

struct Rng { // splitmix64: the op sequence depends only on the seed, never on the allocator
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double unit() { return (double)(next() >> 11) * 0x1.0p-53; }
  uint64_t below(uint64_t n) { return next() % n; }
};

// Value sizes: piecewise-linear between the table's percentiles. The table stops at p5 and p99,
// so p0 = p5/2 and p100 = 1.5*p99 (assumed; the sample mean is printed next to the table's).
struct Dist {
  double pct[8] = {0, 5, 25, 50, 75, 95, 99, 100};
  double val[8];
  double table_mean = 0;
  uint32_t draw(Rng &r) const {
    double u = r.unit() * 100;
    int i = 0;
    while (i < 6 && u >= pct[i + 1])
      i++;
    double v = val[i] + (u - pct[i]) / (pct[i + 1] - pct[i]) * (val[i + 1] - val[i]);
    return (uint32_t)std::max(1.0, std::round(v));
  }
  double mean() const {
    double m = 0;
    for (int i = 0; i < 7; i++)
      m += (pct[i + 1] - pct[i]) / 100 * (val[i] + val[i + 1]) / 2;
    return m;
  }
};

Dist load_pool(const char *path, const std::string &pool) {
  FILE *f = fopen(path, "r");
  if (!f) die("cannot open %s", path);
  char line[512];
  Dist d;
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    double m, sd, p[6];
    char name[64];
    if (line[0] == '#' ||
        sscanf(line, "%63[^,],%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", name, &m, &sd, &p[0], &p[1], &p[2],
               &p[3], &p[4], &p[5]) != 9 ||
        pool != name)
      continue;
    d.table_mean = m;
    for (int i = 0; i < 6; i++)
      d.val[i + 1] = p[i];
    d.val[0] = p[0] / 2;
    d.val[7] = p[5] * 1.5;
    found = true;
  }
  fclose(f);
  if (!found) die("pool %s not in the size table", pool.c_str());
  return d;
}

// Driver bookkeeping lives in mmap'd, prefaulted memory so that it never touches the allocator
// under test and adds a constant to RSS, which the baseline subtracts.
template <class T> struct MapArray {
  T *p = nullptr;
  size_t cap = 0;
  void map(size_t n) {
    cap = n;
    void *m = mmap(nullptr, n * sizeof(T) + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED) die("cannot map %s of bookkeeping", std::to_string(n).c_str());
    p = (T *)m;
    madvise(m, n * sizeof(T), MADV_HUGEPAGE); // random lookups: spare the TLB
    memset(m, 0, n * sizeof(T));
  }
  void unmap() {
    if (p) munmap(p, cap * sizeof(T) + 1);
    p = nullptr;
  }
};

struct Item {
  void *ptr;
  uint64_t size : 24; // values are below 1 MiB (memcached's item limit)
  uint64_t seq : 40;  // insertion order, for the FIFO shrink
};

size_t rss_bytes() {
  char buf[128] = {0};
  int fd = open("/proc/self/statm", O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0) close(fd);
  unsigned long size = 0, res = 0;
  if (n <= 0 || sscanf(buf, "%lu %lu", &size, &res) != 2) return 0;
  return res * (size_t)sysconf(_SC_PAGESIZE);
}

// memcached 1.6.18's slab classes (slabs_init): 96 B first (48 B item header + 48 B -n),
// multiplied by the factor and aligned to 8, up to 512 KiB / factor, then one 512 KiB class.
// Stock memcached stops at 63 classes (checked against `memcached -vv -f F`); --slab-uncapped 1
// lifts that, as the Facebook paper's memcached did.
struct Slab {
  static constexpr uint32_t kPage = 1 << 20, kChunkMax = kPage / 2, kChunkHdr = 48;
  std::vector<uint32_t> size, perslab;
  std::vector<uint64_t> used, high; // chunks in use; per-class high-water mark of pages
  uint64_t pages_need = 0, pages_need_peak = 0, pages_high_sum = 0;
  uint32_t overhead; // item header 48 + CAS 8 + key + NUL + "\r\n"

  Slab(double factor, bool capped, uint32_t key_bytes) : overhead(48 + 8 + key_bytes + 1 + 2) {
    double s = 96;
    while ((!capped || size.size() < 62) && s < kChunkMax / factor) {
      uint32_t a = ((uint32_t)s + 7) & ~7u;
      size.push_back(a);
      s = (double)(uint32_t)(a * factor); // memcached multiplies an unsigned int
    }
    size.push_back(kChunkMax);
    for (uint32_t c : size)
      perslab.push_back(kPage / c);
    used.assign(size.size(), 0);
    high.assign(size.size(), 0);
  }
  unsigned cls(uint32_t bytes) const {
    return (unsigned)(std::lower_bound(size.begin(), size.end(), bytes) - size.begin());
  }
  void chunk(unsigned c, int dir) {
    uint64_t before = (used[c] + perslab[c] - 1) / perslab[c];
    used[c] += dir;
    uint64_t after = (used[c] + perslab[c] - 1) / perslab[c];
    pages_need += after - before;
    pages_need_peak = std::max(pages_need_peak, pages_need);
    if (after > high[c]) pages_high_sum += after - high[c], high[c] = after;
  }
  // Items above 512 KiB are chained (1.6 "large items"): a header item, full 512 KiB chunks,
  // and the tail in its best-fit class, each chunk with a 48 B chunk header (approximation).
  void item(uint32_t value, int dir) {
    uint32_t total = value + overhead;
    if (total <= kChunkMax) return chunk(cls(total), dir);
    chunk(cls(overhead + kChunkHdr), dir);
    uint64_t data = value + 2;
    for (; data > kChunkMax - kChunkHdr; data -= kChunkMax - kChunkHdr)
      chunk(cls(kChunkMax), dir);
    if (data) chunk(cls((uint32_t)data + kChunkHdr), dir);
  }
  // Pages move freely between classes (automove) but are never returned to the OS.
  size_t bytes_automove() const { return pages_need_peak * (size_t)kPage; }
  size_t bytes_no_automove() const { return pages_high_sum * (size_t)kPage; }
};

struct Options {
  std::string api = "malloc", pool, csv, out, summary, label, expect_lib, shrink = "random";
  size_t live_target = 256 << 20;
  double rounds = 3, shrink_frac = 0.9, slab_factor = 1.25;
  bool slab_uncapped = false;
  uint32_t key_bytes = 30, samples = 200, idle_ms = 1000;
  uint64_t seed = 42;
};

size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  int shift = *end == 'G' ? 30 : *end == 'M' ? 20 : *end == 'K' ? 10 : 0;
  return (size_t)(v * (double)(1ull << shift));
}

Options parse(int argc, char **argv) {
  Options o;
  using Set = std::function<void(const char *)>;
  const std::pair<std::string, Set> opts[] = {
      {"--api", [&](const char *v) { o.api = v; }},
      {"--pool", [&](const char *v) { o.pool = v; }},
      {"--sizes", [&](const char *v) { o.csv = v; }},
      {"--out", [&](const char *v) { o.out = v; }},
      {"--summary", [&](const char *v) { o.summary = v; }},
      {"--label", [&](const char *v) { o.label = v; }},
      {"--expect-lib", [&](const char *v) { o.expect_lib = v; }},
      {"--live", [&](const char *v) { o.live_target = parse_size(v); }},
      {"--rounds", [&](const char *v) { o.rounds = atof(v); }},
      {"--shrink", [&](const char *v) { o.shrink = v; }},
      {"--shrink-frac", [&](const char *v) { o.shrink_frac = atof(v); }},
      {"--slab-factor", [&](const char *v) { o.slab_factor = atof(v); }},
      {"--slab-uncapped", [&](const char *v) { o.slab_uncapped = !strcmp(v, "1"); }},
      {"--key-bytes", [&](const char *v) { o.key_bytes = (uint32_t)atoi(v); }},
      {"--samples", [&](const char *v) { o.samples = (uint32_t)atoi(v); }},
      {"--idle-ms", [&](const char *v) { o.idle_ms = (uint32_t)atoi(v); }},
      {"--seed", [&](const char *v) { o.seed = strtoull(v, nullptr, 0); }},
  };
  for (int i = 1; i < argc; i++) {
    auto opt =
        std::find_if(std::begin(opts), std::end(opts),
                     [&](const std::pair<std::string, Set> &e) { return e.first == argv[i]; });
    if (opt == std::end(opts)) die("unknown option %s (see README.md)", argv[i]);
    if (i + 1 >= argc) die("%s needs a value", argv[i]);
    opt->second(argv[++i]);
  }
  if (o.pool.empty() || o.csv.empty() || o.out.empty())
    die("usage: frag_churn --pool P --sizes CSV --out SERIES.csv [options]%s", "");
  if (o.api != "malloc" && o.api != "slab" && o.api != "nic") die("bad --api %s", o.api.c_str());
#ifndef FRAG_WITH_NIC
  if (o.api == "nic") die("--api nic needs the frag_churn binary (linked with nicmalloc)%s", "");
#endif
  if (o.shrink != "random" && o.shrink != "fifo") die("bad --shrink %s", o.shrink.c_str());
  if (o.label.empty()) o.label = o.api;
  return o;
}

// Which library serves malloc, and its call that gives free memory back to the OS.
struct Peer {
  std::string lib;
  void (*release)() = nullptr;
};

Peer find_peer() {
  Peer p;
  Dl_info info;
  void *fn = dlsym(RTLD_DEFAULT, "malloc");
  if (!fn || !dladdr(fn, &info) || !info.dli_fname) return p;
  p.lib = info.dli_fname;
  void *h = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
  if (!h) return p;
  static void (*nic)(), (*mi)(bool), (*tc)();
  static int (*trim)(size_t);
  static int (*je)(const char *, void *, size_t *, void *, size_t);
  if ((*(void **)&nic = dlsym(h, "nic_collect"))) {
    *(void **)&mi = dlsym(RTLD_DEFAULT, "mi_collect"); // nicmalloc's control heap is mimalloc's
    p.release = [] {
      nic();
      if (mi) mi(true);
    };
  } else if ((*(void **)&mi = dlsym(h, "mi_collect"))) {
    p.release = [] { mi(true); };
  } else if ((*(void **)&je = dlsym(h, "mallctl"))) {
    p.release = [] { je("arena.4096.purge", nullptr, nullptr, nullptr, 0); }; // all arenas
  } else if ((*(void **)&tc = dlsym(h, "MallocExtension_ReleaseFreeMemory"))) {
    p.release = [] { tc(); };
  } else if ((*(void **)&trim = dlsym(h, "malloc_trim"))) {
    p.release = [] { trim(0); };
  }
  return p;
}

struct Sample {
  const char *phase;
  uint64_t op;
  double t;
  size_t items, live, item_bytes, mem, rss, pinned, mapped, usable, slab_noauto, chunks;
};

class Run {
public:
  explicit Run(const Options &o) : o_(o), dist_(load_pool(o.csv.c_str(), o.pool)) {}
  int main();

private:
  void *alloc(uint32_t size);
  void release(Item &it);
  void add(uint32_t size);
  void evict(size_t index);
  void sample(const char *phase, bool force = false);
  void collect_after_shrink();
  void oracle(double kept[4], const size_t gran[4]);

  const Options &o_;
  Dist dist_;
  Slab *slab_ = nullptr;
  Peer peer_;
  Rng sizes_{0}, victims_{0};
  MapArray<Item> items_;
  size_t n_ = 0, live_ = 0, item_bytes_ = 0, rss_base_ = 0, sample_every_ = 1;
  uint64_t op_ = 0, seq_ = 0, drawn_ = 0;
  double drawn_sum_ = 0, t0_ = 0;
  FILE *out_ = nullptr;
  Sample last_{};
  size_t peak_mem_ = 0, peak_live_ = 0, peak_rss_ = 0, peak_items_ = 0;
};

void *Run::alloc(uint32_t size) {
#ifdef FRAG_WITH_NIC
  if (o_.api == "nic") return nic_malloc(size);
#endif
  return malloc(size);
}

void Run::add(uint32_t size) {
  if (n_ == items_.cap) die("item table full (raise the estimate in Run::main)%s", "");
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
  Sample s{phase, op_, now_s() - t0_, n_, live_, item_bytes_, 0, 0, 0, 0, 0, 0, 0};
  size_t rss = rss_bytes();
  s.rss = rss > rss_base_ ? rss - rss_base_ : 0;
  s.mem = s.rss;
#ifdef FRAG_WITH_NIC
  if (o_.api == "nic") {
    nic_stats st;
    nic_get_stats(&st);
    s.mem = s.pinned = st.dataplane_pinned;
    s.mapped = st.dataplane_mapped;
    s.usable = st.dataplane_live;
    s.chunks = st.chunks_live;
  }
#endif
  if (slab_) {
    s.mem = slab_->bytes_automove();
    s.slab_noauto = slab_->bytes_no_automove();
  }
  fprintf(out_, "%s,%llu,%.3f,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu\n", s.phase,
          (unsigned long long)s.op, s.t, s.items, s.live, s.item_bytes, s.mem, s.rss, s.pinned,
          s.mapped, s.usable, s.slab_noauto, s.chunks);
  if (!strcmp(phase, "fill") || !strcmp(phase, "churn")) {
    peak_items_ = std::max(peak_items_, s.item_bytes);
    peak_mem_ = std::max(peak_mem_, s.mem);
    peak_live_ = std::max(peak_live_, s.live);
    peak_rss_ = std::max(peak_rss_, s.rss);
  }
  last_ = s;
}

// nicmalloc frees a chunk only once it is empty, NICMALLOC_RELEASE_DELAY_MS later, and only
// after this (owner) thread came back to dataplane code: call nic_collect until pinned bytes
// stop moving for two delays and no chunk is draining.
void Run::collect_after_shrink() {
#ifdef FRAG_WITH_NIC
  if (o_.api == "nic") {
    const char *env = getenv("NICMALLOC_RELEASE_DELAY_MS");
    double delay = (env ? atof(env) : 1000) / 1000, stable_since = now_s(), start = now_s();
    size_t pinned = SIZE_MAX;
    while (now_s() - start < 30) {
      nic_collect();
      nic_stats st;
      nic_get_stats(&st);
      if (st.dataplane_pinned != pinned || st.chunks_draining) {
        pinned = st.dataplane_pinned;
        stable_since = now_s();
      } else if (now_s() - stable_since > 2 * delay + 0.1) {
        return;
      }
      sleep_ms(20);
    }
    fprintf(stderr, "frag_churn: pinned bytes still moving after 30 s\n");
    return;
  }
#endif
  if (peer_.release) peer_.release();
  sleep_ms(200);
}

// The best any non-moving allocator could do with this placement: memory that must stay
// resident when only whole blocks of G bytes without a live item are given back.
void Run::oracle(double kept[4], const size_t gran[4]) {
  MapArray<std::pair<uintptr_t, uint32_t>> v;
  v.map(n_ + 1);
  for (size_t i = 0; i < n_; i++)
    v.p[i] = {(uintptr_t)items_.p[i].ptr, (uint32_t)items_.p[i].size};
  std::sort(v.p, v.p + n_);
  for (int g = 0; g < 4; g++) {
    size_t blocks = 0, last = SIZE_MAX; // items are sorted and disjoint: ends only grow
    for (size_t i = 0; i < n_; i++) {
      size_t first = v.p[i].first / gran[g], end = (v.p[i].first + v.p[i].second - 1) / gran[g];
      if (last != SIZE_MAX && first <= last) first = last + 1;
      if (end >= first) blocks += end - first + 1, last = end;
    }
    kept[g] = (double)blocks * gran[g];
  }
  v.unmap();
}

int Run::main() {
  sizes_.s = o_.seed;
  victims_.s = o_.seed ^ 0x5bd1e995;
  Rng est{o_.seed + 1};
  double est_mean = 0;
  for (int i = 0; i < 200000; i++)
    est_mean += dist_.draw(est) / 200000.0;
  items_.map((size_t)(o_.live_target / est_mean * 1.3) + 100000);
  if (o_.api == "slab") slab_ = new Slab(o_.slab_factor, !o_.slab_uncapped, o_.key_bytes);
  if (o_.api == "malloc") {
    peer_ = find_peer();
    if (!o_.expect_lib.empty() && peer_.lib.find(o_.expect_lib) == std::string::npos)
      die("malloc comes from %s, not the expected library (LD_PRELOAD failed?)", peer_.lib.c_str());
  }
  out_ = fopen(o_.out.c_str(), "w");
  if (!out_) die("cannot write %s", o_.out.c_str());
  static char outbuf[1 << 16]; // stdio must not take its buffer from the allocator under test
  setvbuf(out_, outbuf, _IOFBF, sizeof outbuf);
  fprintf(out_, "phase,op,t_s,items,live_bytes,item_bytes,mem_bytes,rss_bytes,pinned_bytes,"
                "mapped_bytes,usable_bytes,slab_noautomove_bytes,chunks\n");
  rss_base_ = rss_bytes();
  t0_ = now_s();
  size_t expect_items = (size_t)(o_.live_target / est_mean);
  sample_every_ =
      std::max<size_t>(1, (size_t)(expect_items * (2 + o_.rounds + o_.shrink_frac)) / o_.samples);
  auto draw = [&] {
    uint32_t s = dist_.draw(sizes_);
    drawn_sum_ += s;
    drawn_++;
    return s;
  };

  sample("fill", true);
  uint32_t next = draw();
  while (live_ + next <= o_.live_target) {
    add(next);
    sample("fill");
    next = draw();
  }
  sample("fill", true);
  size_t filled = n_;
  double t_fill = now_s() - t0_;
  // Each round writes as many new items as the fill did; random victims make room, like a
  // cache under a memory limit whose keys are equally popular.
  uint64_t churn_ops = (uint64_t)(n_ * o_.rounds);
  for (uint64_t k = 0; k < churn_ops; k++) {
    while (live_ + next > o_.live_target)
      evict(victims_.below(n_));
    add(next);
    sample("churn");
    next = draw();
  }
  sample("churn", true);
  double t_churn = now_s() - t0_ - t_fill;
  size_t live_before = live_, mem_before = last_.mem, rss_before = last_.rss;

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
  if (!slab_) sleep_ms(o_.idle_ms); // slab pages never go back: nothing to wait for
  sample("idle", true);
  size_t mem_idle = last_.mem;
  if (!slab_) collect_after_shrink();
  sample("release", true);
  size_t freed = live_before - live_;
  auto pct = [&](double before, double after) { return 100.0 * (before - after) / (double)freed; };

  size_t chunk = 32 << 20;
  char kind[16] = "-";
  uint64_t fallbacks = 0;
#ifdef FRAG_WITH_NIC
  if (o_.api == "nic") {
    nic_stats st;
    nic_get_stats(&st);
    chunk = st.chunk_size;
    snprintf(kind, sizeof kind, "%s", nic_page_kind_name(st.page_kind));
    fallbacks = st.dataplane_fallbacks + st.dataplane_failures;
  }
#endif
  double kept[4] = {0, 0, 0, 0};
  size_t gran[4] = {4096, 64 << 10, 2 << 20, chunk};
  if (!slab_) oracle(kept, gran);
  double mean = drawn_sum_ / (double)drawn_;
  fprintf(stderr,
          "frag_churn: %s %s: %zu items, sizes mean %.0f (interpolated table %.0f, paper %.0f); "
          "fill %.1fs churn %.1fs; peak mem/live %.3f; %.1f%% of freed bytes returned\n",
          o_.pool.c_str(), o_.label.c_str(), filled, mean, dist_.mean(), dist_.table_mean, t_fill,
          t_churn, (double)peak_mem_ / peak_live_, pct(mem_before, last_.mem));
  fclose(out_);

  if (!o_.summary.empty()) {
    FILE *s = fopen(o_.summary.c_str(), "a");
    if (!s) die("cannot append to %s", o_.summary.c_str());
    if (ftell(s) == 0)
      fprintf(s, "pool,allocator,api,shrink,chunk_bytes,page_kind,live_target,items_filled,"
                 "size_mean_sample,size_mean_model,size_mean_paper,peak_mem_ratio,"
                 "churn_end_ratio,peak_rss_ratio,live_before,live_after,mem_before,mem_idle,"
                 "mem_after,returned_idle_pct,returned_pct,rss_returned_pct,after_ratio,"
                 "oracle_4k_pct,oracle_64k_pct,oracle_2m_pct,oracle_chunk_pct,"
                 "slab_noautomove_ratio,slab_item_ratio,fallbacks,seconds,malloc_lib\n");
    // Slab memory per live item byte (header and key included): the slab scheme's own waste.
    double item_ratio = slab_ ? (double)slab_->bytes_automove() / (double)peak_items_ : 0;
    fprintf(s,
            "%s,%s,%s,%s,%zu,%s,%zu,%zu,%.1f,%.1f,%.1f,%.4f,%.4f,%.4f,%zu,%zu,%zu,%zu,%zu,%.2f,"
            "%.2f,%.2f,%.4f,%.2f,%.2f,%.2f,%.2f,%.4f,%.4f,%llu,%.1f,%s\n",
            o_.pool.c_str(), o_.label.c_str(), o_.api.c_str(), o_.shrink.c_str(),
            o_.api == "nic" ? chunk : 0, kind, o_.live_target, filled, mean, dist_.mean(),
            dist_.table_mean, (double)peak_mem_ / peak_live_,
            (double)mem_before / (double)live_before, (double)peak_rss_ / peak_live_, live_before,
            live_, mem_before, mem_idle, last_.mem, pct(mem_before, mem_idle),
            pct(mem_before, last_.mem), pct(rss_before, last_.rss),
            (double)last_.mem / (double)live_, pct(mem_before, kept[0]), pct(mem_before, kept[1]),
            pct(mem_before, kept[2]), pct(mem_before, kept[3]),
            slab_ ? (double)slab_->bytes_no_automove() / peak_live_ : 0, item_ratio,
            (unsigned long long)fallbacks, now_s() - t0_,
            slab_               ? "-"
            : peer_.lib.empty() ? "nicmalloc"
                                : peer_.lib.c_str());
    fclose(s);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parse(argc, argv);
  return Run(o).main();
}
