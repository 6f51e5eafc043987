// The API's error counts (nic_get_stats: sga_errors, hold_errors) hold what their help texts say:
// the calls that returned an error, out of memory too (error_counts_probe, under a seccomp
// filter).
#include <gtest/gtest.h>

#include "nicmalloc.h"
#include "probe_runner.h"

#include <cerrno>
#include <string>

namespace {

// The call failed with -ENOMEM, was counted once, and said why (which also tells that the
// failure was the one the test is after).
void ExpectNoMemoryCounted(const std::string &command, const std::string &why) {
  auto r = run_probe({"NICMALLOC_BACKEND=sim"}, {command});
  if (r.exit_code == 1 && r.values.count("filtered") == 0)
    GTEST_SKIP() << "the kernel took no seccomp filter: " << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("rc"), -ENOMEM) << r.out << r.err;
  EXPECT_EQ(r.num("counted"), 1) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err, why), 1) << r.err;
}

TEST(ErrorCounts, HoldWithoutRoomForItsRecordIsCounted) {
  ExpectNoMemoryCounted("hold-pool", "no memory for the hold's record");
}

TEST(ErrorCounts, HoldWithoutRoomForItsPageCountIsCounted) {
  ExpectNoMemoryCounted("hold-pages", "no memory to count the hold on its page");
}

TEST(ErrorCounts, PostWithoutRoomForItsMessageIsCounted) {
  ExpectNoMemoryCounted("sga-post", "no memory for the message's bookkeeping");
}

} // namespace
