// The API's error counts (nic_get_stats: sga_errors, hold_errors, registration_errors,
// other_api_errors) hold what their help texts say: the calls that returned an error, out of
// memory too (error_counts_probe, under a seccomp filter), and nic_translate's caller errors only.
#include <gtest/gtest.h>

#include "nicmalloc.h"
#include "probe_runner.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

nic_stats Stats() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

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

// Every error nic_posix_memalign_site returns, as its help text says.
TEST(ErrorCounts, PosixMemalignSiteErrorsAreCounted) {
  const uint64_t before = Stats().other_api_errors;
  void *out = nullptr;
  EXPECT_EQ(nic_posix_memalign_site(&out, 3, 10, 1), EINVAL);
  EXPECT_EQ(nic_posix_memalign_site(&out, 4, 10, 1), EINVAL) << "less than sizeof(void *)";
  EXPECT_EQ(nic_posix_memalign_site(&out, 64, SIZE_MAX - 4096, 1), ENOMEM);
  EXPECT_EQ(nic_posix_memalign_site(nullptr, 64, 10, 1), EINVAL);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(Stats().other_api_errors - before, 4u);
  ASSERT_EQ(nic_posix_memalign_site(&out, 64, 10, 1), 0);
  free(out);
  EXPECT_EQ(Stats().other_api_errors - before, 4u);
}

// nic_translate's answers about a range (not dataplane, across a step, empty) are not errors of
// the caller, and nic_register, which asks it first, counts its own: only a missing result
// pointer is counted.
TEST(ErrorCounts, TranslateCountsOnlyAMissingResultPointer) {
  static char control[64];
  char *block = static_cast<char *>(nic_malloc(64));
  ASSERT_NE(block, nullptr);
  nic_region_ref ref;
  const uint64_t before = Stats().registration_errors;
  EXPECT_EQ(nic_translate(control, 8, &ref), -NIC_ENOTDP);
  EXPECT_EQ(nic_translate(block, 0, &ref), -NIC_ERANGE);
  EXPECT_EQ(nic_translate(block, SIZE_MAX, &ref), -NIC_ERANGE);
  EXPECT_EQ(Stats().registration_errors, before);
  EXPECT_EQ(nic_translate(block, 8, nullptr), -EINVAL);
  EXPECT_EQ(Stats().registration_errors, before + 1);
  EXPECT_EQ(nic_register(block, 0, NIC_REG_LOCAL, &ref), -NIC_ERANGE);
  EXPECT_EQ(Stats().registration_errors, before + 2) << "nic_register's, counted once";
  nic_free(block);
}

} // namespace
