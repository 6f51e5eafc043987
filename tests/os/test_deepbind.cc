// A library loaded with RTLD_DEEPBIND into a program nicmalloc is preloaded into: with the flag
// its malloc and free were glibc's, and a block of ours it freed made glibc abort the program
// (PHP loads its extensions so). The flag is taken off, said once when verbose, and the library
// is still found by the program's own RUNPATH, which glibc's dlopen reads from its caller.
#include <gtest/gtest.h>

#include "probe_runner.h"

namespace {

// The probe loaded the library (with dlopen, or with how), blocks crossed both ways, and the
// flag taken off was said once (line).
void ExpectBlocksCross(const std::vector<std::string> &how, const std::string &line) {
  auto r =
      run_program(DEEPBIND_PROBE_PATH,
                  {std::string("LD_PRELOAD=") + NICMALLOC_LIBRARY, "NICMALLOC_VERBOSE=1"}, how);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("loaded"), 1) << r.err;
  EXPECT_EQ(r.num("theirs_intact"), 1) << r.out;
  EXPECT_EQ(r.num("crossed"), 1) << r.out;
  ASSERT_EQ(r.num("preloaded"), 1) << r.out;
  EXPECT_EQ(r.num("invalid_frees"), 0) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err, line), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "error"), 0) << r.err;
}

TEST(Deepbind, BlocksCrossBetweenTheProgramAndADeepboundLibrary) {
  ExpectBlocksCross({}, "loaded without RTLD_DEEPBIND");
}

// dlmopen into the base namespace is dlopen by another name: without its interposition the
// library's free was glibc's, which aborted on the program's block.
TEST(Deepbind, ThroughDlmopenIntoTheBaseNamespaceToo) {
  ExpectBlocksCross({"dlmopen"}, "dlmopen(LM_ID_BASE");
}

TEST(Deepbind, SaysNothingByDefault) {
  auto r = run_program(DEEPBIND_PROBE_PATH, {std::string("LD_PRELOAD=") + NICMALLOC_LIBRARY}, {});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "");
}

} // namespace
