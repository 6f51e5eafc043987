// A program that links nicmalloc, run under Valgrind's memcheck as its developers would debug
// it. Memcheck's shadow of a 4 TiB reservation cost 45 s and 5 GiB per process (alloc/os/
// valgrind.h), so the control arena is reserved small there. By default Valgrind replaces the
// malloc family in every library that exports it (libnicmalloc's and libmimalloc's): nicmalloc
// says once what follows, and neither its start-up nor nic_free hands Valgrind's free a block of
// nicmalloc's (memcheck calls it invalid, massif aborts). With
// --soname-synonyms=somalloc=nouserintercepts nicmalloc keeps its allocator, and the API's blocks
// come and go without an error from memcheck.
#include <gtest/gtest.h>

#include <unistd.h>

#include <string>

#include "probe_runner.h"

namespace {

const char *kValgrind = "/usr/bin/valgrind";
// Far below the 4 TiB arena nicmalloc reserves natively, far above what memcheck and the
// small arena and dataplane range hold.
constexpr long kVmBoundKb = 1L << 30; // 1 TiB

bool have_valgrind() {
  return access(kValgrind, X_OK) == 0;
}

ProbeResult under_valgrind(const std::vector<std::string> &options,
                           const std::vector<std::string> &probe_args) {
  std::vector<std::string> args = {"-q", "--error-exitcode=9"};
  args.insert(args.end(), options.begin(), options.end());
  args.push_back(NIC_PROBE_PATH);
  args.insert(args.end(), probe_args.begin(), probe_args.end());
  return run_program(kValgrind, {"NICMALLOC_CHUNK_SIZE=64M"}, args);
}

TEST(Valgrind, UnderMemcheckTheProgramsHeapIsValgrindsAndNicmallocSaysSoOnce) {
  if (!have_valgrind()) GTEST_SKIP() << "SKIPPED LOUDLY: no " << kValgrind;
  auto r = under_valgrind({}, {"valgrind-run", "nic"});
  ASSERT_EQ(r.exit_code, 0) << "memcheck found errors (9) or the run failed\n" << r.err;
  EXPECT_EQ(r.num("done"), 1);
  EXPECT_LT(r.num("vm_kb"), kVmBoundKb);
  EXPECT_EQ(count_lines(r.err, "nicmalloc: warning: running under Valgrind, which replaced"), 1)
      << r.err;
  EXPECT_EQ(count_lines(r.err, "nouserintercepts"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "Invalid free"), 0) << r.err;
}

// Massif takes a free of a block it did not allocate for heap corruption and aborts.
TEST(Valgrind, UnderMassifTheDataplaneBlocksFreeDoesNotReachValgrind) {
  if (!have_valgrind()) GTEST_SKIP() << "SKIPPED LOUDLY: no " << kValgrind;
  auto r =
      under_valgrind({"--tool=massif", "--massif-out-file=/dev/null"}, {"valgrind-run", "nic"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("done"), 1);
}

TEST(Valgrind, WithUserInterceptsOffNicmallocKeepsItsAllocatorAndMemcheckFindsNoError) {
  if (!have_valgrind()) GTEST_SKIP() << "SKIPPED LOUDLY: no " << kValgrind;
  auto r = under_valgrind({"--soname-synonyms=somalloc=nouserintercepts"}, {"valgrind-run", "nic"});
  ASSERT_EQ(r.exit_code, 0) << "memcheck found errors (9) or the run failed\n" << r.err;
  EXPECT_EQ(r.num("done"), 1);
  EXPECT_LT(r.num("vm_kb"), kVmBoundKb);
  EXPECT_EQ(count_lines(r.err, "nicmalloc: "), 0) << r.err;
  // Pinning asks nothing of Valgrind it does not know (mlock2 would make it ask for a report).
  EXPECT_EQ(count_lines(r.err, "unhandled amd64-linux syscall"), 0) << r.err;
}

// A program built without PIE binds malloc to its own table entry, whose first definition is
// libnicmalloc's, while Valgrind sends the calls to its own: Valgrind's one warning says it all,
// and nicmalloc must not call itself the program's other allocator.
TEST(Valgrind, AProgramWithoutPieHearsOnlyTheValgrindWarning) {
  if (!have_valgrind()) GTEST_SKIP() << "SKIPPED LOUDLY: no " << kValgrind;
  auto r = run_program(kValgrind, {"NICMALLOC_CHUNK_SIZE=64M", "NICMALLOC_DP_MIN_SIZE=64"},
                       {"-q", PLT_MALLOC_PROGRAM});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(r.err, "nicmalloc: warning: running under Valgrind, which replaced"), 1)
      << r.err;
  EXPECT_EQ(count_lines(r.err, "is not nicmalloc's"), 0) << r.err;
  EXPECT_EQ(count_lines(r.err, "nicmalloc: warning:"), 1) << r.err;
}

} // namespace
