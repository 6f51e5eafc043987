// What a dataplane request no chunk can hold is told (alloc/core/alloc.c, report_once): the size
// the program asked for, and the alignment when that is what no chunk has room for.
#include <gtest/gtest.h>

#include <string>

#include "probe_runner.h"

namespace {

// 64 MiB chunks hold requests of up to 60 MiB (62914560 bytes).
ProbeResult aligned_request(const std::string &alignment, const std::string &size) {
  auto r = run_probe({"NICMALLOC_CHUNK_SIZE=64M", "NICMALLOC_VERBOSE=1"},
                     {"aligned-dp", alignment, size});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("aligned_dp"), 0) << r.out;
  return r;
}

// The line of a request refused for its alignment, said once.
void expect_alignment_line(const ProbeResult &r, const std::string &alignment,
                           const std::string &size) {
  EXPECT_EQ(count_lines(r.err, "a dataplane request of " + size + " bytes aligned to " + alignment +
                                   " bytes is larger than a chunk can hold with that alignment "
                                   "(62914560 bytes unaligned"),
            1)
      << r.err;
}

// 60 MiB less a byte fits a chunk unaligned; aligned to 1 MiB its segment does not. The line
// said "a dataplane request of 62914559 bytes is larger than a chunk can hold (62914560", a
// limit the request is under.
TEST(DataplaneTooLarge, ARequestRefusedForItsAlignmentSaysSo) {
  auto r = aligned_request("1048576", "62914559");
  expect_alignment_line(r, "1048576", "62914559");
  EXPECT_EQ(count_lines(r.err, "larger than a chunk can hold"), 1) << r.err;
}

// An alignment past what mimalloc aligns is cut out of a larger block: the line named that
// block's size ("a dataplane request of 536875008 bytes"), not the program's.
TEST(DataplaneTooLarge, AnAlignmentPastMimallocsIsToldWithTheSizeAskedFor) {
  expect_alignment_line(aligned_request("536870912", "4096"), "536870912", "4096");
}

// A size no chunk holds whatever its alignment: the size alone is told.
TEST(DataplaneTooLarge, ASizeNoChunkHoldsIsToldWithoutTheAlignment) {
  auto r = aligned_request("1048576", "65011712");
  EXPECT_EQ(count_lines(r.err, "a dataplane request of 65011712 bytes is larger than a chunk can "
                               "hold (62914560"),
            1)
      << r.err;
  EXPECT_EQ(count_lines(r.err, "aligned to"), 0) << r.err;
}

} // namespace
