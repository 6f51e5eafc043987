// nicmalloc as a guest in other people's processes: it adds no descriptor a program can see, and
// keeps its lines out of the files a program puts on fd 2.
#include "probe_runner.h"

#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

namespace {

const std::string kPreload = std::string("LD_PRELOAD=") + NIC_LIB_PATH;

// The descriptors a shell's exec'd ls finds open, under a descriptor limit of nofile.
std::string OpenFds(bool preload, int nofile) {
  const std::string script = "ulimit -n " + std::to_string(nofile) + "; exec ls /proc/self/fd";
  auto r = run_program("/bin/sh",
                       preload ? std::vector<std::string>{kPreload} : std::vector<std::string>{},
                       {"-c", script});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  return r.out;
}

TEST(Guest, AddsNoDescriptorWithDefaultSettings) {
  for (int nofile : {4096, 512, 64}) {
    const std::string without = OpenFds(false, nofile);
    ASSERT_NE(without, "");
    EXPECT_EQ(OpenFds(true, nofile), without) << "RLIMIT_NOFILE " << nofile;
  }
}

// Without NICMALLOC_STATS=1 no copy of stderr is kept: a line for a stderr the program closed
// and reused is dropped and counted, never written into the program's file.
TEST(Guest, LinesForAReusedStderrAreDroppedAndCounted) {
  char path[] = "/tmp/nicmalloc-guest-fd2-XXXXXX";
  const int made = mkstemp(path);
  ASSERT_GE(made, 0);
  close(made);
  auto r = run_probe({}, {"stderr-reused", path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("file_fd"), 2) << r.out;
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(path);
  EXPECT_EQ(content, "data\n");
  EXPECT_EQ(r.err, "");
  EXPECT_GE(r.num("dropped"), 1);
}

} // namespace
