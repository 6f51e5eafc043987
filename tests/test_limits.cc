// Resource limits the machine or the user imposes: an address-space limit (RLIMIT_AS) that
// leaves no room for the dataplane reservation, a data limit (RLIMIT_DATA) under which a chunk
// maps but mimalloc cannot take it as an arena. Each must give one warning and the fallback or
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

// A 1 GiB chunk maps under a 256 MiB data limit, but mimalloc's arena bookkeeping does not fit
// after it. Each try maps and prefaults the whole chunk, so it must not happen per request.
TEST(DataLimit, RefusedChunkIsNotTriedAgainOnEveryRequest) {
  auto r = run_probe(with(kLargeSpan, "NICMALLOC_ON_PIN_FAIL=fallback"),
                     {"data-limit", "256", "dp-alloc", "65536", "4096"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("control_blocks"), 16);
  EXPECT_EQ(r.num("chunks_created"), 0);
  EXPECT_EQ(count_lines(r.err, "refused dataplane chunk"), 1) << r.err;
}

} // namespace
