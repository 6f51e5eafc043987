// Command line of frag_churn and frag_churn_malloc (README.md; run_frag.sh passes them all).
#pragma once

#include <cstdint>
#include <string>

namespace frag {

struct Options {
  std::string api = "malloc", pool, csv, out, summary, label, expect_lib, shrink = "random";
  size_t live_target = 256 << 20;
  double rounds = 3, shrink_frac = 0.9, slab_factor = 1.25;
  bool slab_uncapped = false;
  uint32_t key_bytes = 30, samples = 200, idle_ms = 1000;
  uint64_t seed = 42;
};

// Dies with a message on an unknown option, a missing value or a bad choice.
Options parse_options(int argc, char **argv);

} // namespace frag
