// Resource limits the machine or the user imposes: an address-space limit (RLIMIT_AS) that
// leaves no room for the dataplane reservation. Each must give one warning and the fallback or
// ENOMEM that NICMALLOC_ON_PIN_FAIL asks for, never a crash or a line per request.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "probe_runner.h"

namespace {

// 16 chunks of 1 GiB need 16 GiB of address space; 8 GiB leaves none for them.
const std::vector<std::string> kLargeSpan = {"NICMALLOC_CHUNK_SIZE=1G", "NICMALLOC_MAX_CHUNKS=16"};
const std::vector<std::string> kUnderLimit = {"as-limit", "8", "dp-alloc", "1048576", "4096"};
const char kReserveLine[] = "of address space for dataplane chunks";

std::vector<std::string> with(std::vector<std::string> env, const std::string &extra) {
  env.push_back(extra);
  return env;
}

TEST(AddressSpaceLimit, RefusedReservationFallsBackWithOneWarning) {
  auto r = run_probe(with(kLargeSpan, "NICMALLOC_ON_PIN_FAIL=fallback"), kUnderLimit);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("control_blocks"), 256);
  EXPECT_EQ(r.num("nulls"), 0);
  EXPECT_EQ(r.num("dp_fallbacks"), 256);
  EXPECT_EQ(count_lines(r.err, kReserveLine), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "use the control heap"), 1) << r.err;
}

TEST(AddressSpaceLimit, RefusedReservationUnderFailGivesEnomemAndSaysSo) {
  auto r = run_probe(with(kLargeSpan, "NICMALLOC_ON_PIN_FAIL=fail"), kUnderLimit);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("nulls"), 256);
  EXPECT_EQ(r.num("errno"), ENOMEM);
  EXPECT_EQ(r.num("dp_failures"), 256);
  EXPECT_EQ(count_lines(r.err, kReserveLine), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "get ENOMEM"), 1) << r.err;
}

} // namespace
