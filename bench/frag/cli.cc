// frag_churn: memcached-like churn that measures how much memory an allocator holds per live
// byte (see README.md). Fill a cache to a live-byte target, replace items for R rounds, delete a
// fraction of the items, then let the allocator give memory back.
//
// Built twice from these sources: frag_churn links nicmalloc (--api nic: nic_malloc, pinned
// chunks); frag_churn_malloc does not (--api malloc under LD_PRELOAD of a peer; --api slab:
// memcached's slab allocator computed for the same size stream, no allocation at all).
//   cli.cc         options and main
//   churn.cc       the driver: fill, churn, shrink, idle, release
//   metrics.cc     what the allocator holds (RSS, pinned bytes), the series and its peaks
//   release.cc     the allocator's call that gives memory back, and the best case
//   summary.cc     the end-of-run line and the summary.csv row
//   slab_model.h   memcached's slab allocator;  util.h  clocks, generator, bookkeeping
//   ../value_sizes.h  the value-size model shared with bench/mr_miss.cc
#include "cli.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>

#include "churn.h"
#include "util.h"

namespace frag {
namespace {

size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  int shift = *end == 'G' ? 30 : *end == 'M' ? 20 : *end == 'K' ? 10 : 0;
  return (size_t)(v * (double)(1ull << shift));
}

} // namespace

Options parse_options(int argc, char **argv) {
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

} // namespace frag

int main(int argc, char **argv) {
  frag::Options o = frag::parse_options(argc, argv);
  return frag::Run(o).main();
}
