// Profile-guided sites (NICMALLOC_PROFILE, NICMALLOC_SITES) on profile_probe.c: a site whose
// buffers are sent with sendmsg and one whose buffers are not, each run in a child process.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "probe_runner.h"

namespace {

const long long kBytes = 400 * 8192; // profile_probe.c: kBlocks * kSize

struct Profile {
  std::string path = "/tmp/nic-profile-" + std::to_string(getpid());
  ~Profile() { unlink(path.c_str()); }
};

// The profile's site lines with SENT (second field) above zero, and all of them.
void count_sites(const std::string &path, int &sending, int &all) {
  std::ifstream in(path);
  std::string line;
  sending = all = 0;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string tag;
    long long sent = 0;
    if (!(f >> tag >> sent) || tag != "site") continue;
    all++;
    sending += sent > 0;
  }
}

// The header's sent_other: bytes sent from memory that was not dataplane, over the run.
long long header_sent_other(const std::string &path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto at = line.find("sent_other ");
    if (line.rfind("# sample_bytes", 0) == 0 && at != std::string::npos)
      return std::stoll(line.substr(at + 11));
  }
  return -1;
}

ProbeResult make_profile(const Profile &p, const std::vector<std::string> &args = {}) {
  return run_probe({"NICMALLOC_PROFILE=" + p.path, "NICMALLOC_PROFILE_SAMPLE=4K"}, args);
}

TEST(Profile, SentBytesAreCountedWithoutAnySetting) {
  auto r = run_probe({}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("sent_other_bytes"), kBytes);
  EXPECT_EQ(r.num("sent_dataplane_bytes"), 0);
}

TEST(Profile, ListsTheSendingSiteOnly) {
  Profile p;
  auto r = make_profile(p);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int sending, all;
  count_sites(p.path, sending, all);
  EXPECT_EQ(sending, 1) << "only sending_site's blocks reach sendmsg";
  EXPECT_GE(all, 2) << "quiet_site is sampled too, with nothing sent";
}

// Every process of a run adds to the one profile: a wrapper that exits after the program it ran
// (as timeout, a shell or a pyenv shim do) used to overwrite the program's profile with its own.
TEST(Profile, AWrapperAndTheProgramItRunsShareOneProfile) {
  Profile p;
  ASSERT_EQ(make_profile(p, {"wrap"}).exit_code, 0);
  int sending, all;
  count_sites(p.path, sending, all);
  EXPECT_EQ(sending, 1);
  EXPECT_EQ(header_sent_other(p.path), kBytes);
}

// A forked child's sends land in the same file, and what its parent sent before the fork is
// counted once (there are no PATH.PID files any more).
TEST(Profile, AForkedChildAddsToItsParentsProfile) {
  Profile p;
  ASSERT_EQ(make_profile(p, {"fork"}).exit_code, 0);
  int sending, all;
  count_sites(p.path, sending, all);
  EXPECT_GE(sending, 1); // the parent's and the child's calls may be two sites
  EXPECT_EQ(header_sent_other(p.path), 2 * kBytes);
}

// A program whose path has a space (or a '%') still gives a profile its next run can route by.
TEST(Profile, AProgramPathWithASpaceRoundTrips) {
  Profile p;
  const std::string dir = "/tmp/nic probe 100% " + std::to_string(getpid());
  const std::string copy = dir + "/profile probe";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  {
    std::ifstream src(NIC_PROBE_PATH, std::ios::binary);
    std::ofstream dst(copy, std::ios::binary);
    dst << src.rdbuf();
  }
  ASSERT_EQ(chmod(copy.c_str(), 0755), 0);
  auto made = run_program(copy, {"NICMALLOC_PROFILE=" + p.path, "NICMALLOC_PROFILE_SAMPLE=4K"}, {});
  auto routed = run_program(copy, {"NICMALLOC_SITES=" + p.path}, {});
  unlink(copy.c_str());
  rmdir(dir.c_str());
  ASSERT_EQ(made.exit_code, 0) << made.err;
  ASSERT_EQ(routed.exit_code, 0) << routed.err;
  EXPECT_EQ(count_lines(routed.err, "not a nicmalloc profile"), 0) << routed.err;
  EXPECT_EQ(routed.num("sent_dataplane_bytes"), kBytes) << routed.err;
}

// A later run replaces the profile rather than adding to it.
TEST(Profile, AnotherRunReplacesTheProfile) {
  Profile p;
  ASSERT_EQ(make_profile(p).exit_code, 0);
  ASSERT_EQ(make_profile(p).exit_code, 0);
  EXPECT_EQ(header_sent_other(p.path), kBytes);
}

TEST(Profile, RoutedRunGivesDataplaneToTheSendingSiteOnly) {
  Profile p;
  ASSERT_EQ(make_profile(p).exit_code, 0);
  auto r = run_probe({"NICMALLOC_SITES=" + p.path}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("sending_dataplane"), 400);
  EXPECT_EQ(r.num("quiet_dataplane"), 0);
  EXPECT_EQ(r.num("sent_dataplane_bytes"), kBytes);
  EXPECT_EQ(count_lines(r.err, "NICMALLOC_SITES"), 0) << r.err; // no budget or file warning
}

// NICMALLOC_PROFILE and NICMALLOC_SITES on one file: the profile the routed run writes still
// names the routed site as sending, so the run after it is routed too.
TEST(Profile, ARoutedRunThatProfilesKeepsItsRoutedSites) {
  Profile p;
  ASSERT_EQ(make_profile(p).exit_code, 0);
  auto r = run_probe(
      {"NICMALLOC_SITES=" + p.path, "NICMALLOC_PROFILE=" + p.path, "NICMALLOC_PROFILE_SAMPLE=4K"},
      {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("sending_dataplane"), 400);
  int sending = 0, all = 0;
  count_sites(p.path, sending, all);
  EXPECT_EQ(sending, 1);
  auto again = run_probe({"NICMALLOC_SITES=" + p.path}, {});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.num("sending_dataplane"), 400) << again.err;
}

// A writer killed in the middle leaves a last line without its newline: that line is skipped
// with a warning, and the complete lines before it still route.
TEST(Profile, AProfileCutShortStillRoutesItsCompleteLines) {
  Profile p;
  ASSERT_EQ(make_profile(p).exit_code, 0);
  std::string text;
  {
    std::ifstream in(p.path);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_FALSE(text.empty());
  std::ofstream(p.path, std::ios::app) << "site 123 0 1 1 1 1 " NIC_PROBE_PATH "+0x1"; // cut
  auto r = run_probe({"NICMALLOC_SITES=" + p.path}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("sending_dataplane"), 400) << r.err;
  EXPECT_EQ(count_lines(r.err, "ends in a cut line"), 1) << r.err;
}

// A profile of another build names the program's module at offsets where its code no longer
// is: nothing is routed, and the run says so at exit rather than not at all.
TEST(Profile, AProfileOfAnotherBuildRoutesNothingAndSaysSo) {
  Profile p;
  ASSERT_EQ(make_profile(p).exit_code, 0);
  std::ifstream in(p.path);
  std::ostringstream moved;
  for (std::string line; std::getline(in, line);) {
    for (size_t at = line.rfind("site ", 0) == 0 ? line.find("+0x") : std::string::npos;
         at != std::string::npos; at = line.find("+0x", at + 1)) {
      size_t end = line.find_first_of(" \n", at);
      unsigned long off = std::stoul(line.substr(at + 3, end - at - 3), nullptr, 16);
      std::ostringstream hex;
      hex << std::hex << off + 0x40; // the same calls, 64 bytes further on in the new build
      line.replace(at + 3, end == std::string::npos ? std::string::npos : end - at - 3, hex.str());
    }
    moved << line << "\n";
  }
  in.close();
  std::ofstream(p.path, std::ios::trunc) << moved.str();
  auto r = run_probe({"NICMALLOC_SITES=" + p.path}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("sending_dataplane"), 0);
  EXPECT_EQ(count_lines(r.err, "another build of the program"), 1) << r.err;
}

TEST(Profile, BudgetCapsASite) {
  Profile p;
  ASSERT_EQ(make_profile(p).exit_code, 0);
  // 64 KiB of budget: the first eight 8 KiB blocks, then the control heap and one warning.
  auto r = run_probe(
      {"NICMALLOC_SITES=" + p.path, "NICMALLOC_SITES_BUDGET=64K", "NICMALLOC_SITES_HEADROOM=0"},
      {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("sending_dataplane"), 8);
  EXPECT_EQ(r.num("sites_over_budget"), 400 - 8);
  EXPECT_EQ(count_lines(r.err, "budget"), 1) << r.err;
}

TEST(Profile, MissingOrBadProfileWarnsOnceAndRunsUnrouted) {
  char bad[] = "/tmp/nic-bad-profile-XXXXXX";
  int fd = mkstemp(bad);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "site 1 2\n", 9), 9);
  close(fd);
  // Numbers strtoull/strtod would take: a negative count, and a nan budget.
  const std::string signs = std::string(bad) + ".signs";
  std::ofstream(signs) << "# nicmalloc profile 1\nsite -5 0 1 1 1 1 " NIC_PROBE_PATH "+0x10\n"
                       << "site 5 0 1 1 1 nan " NIC_PROBE_PATH "+0x20\n";
  const std::string fifo = std::string(bad) + ".fifo"; // opening it must not wait for a writer
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (std::string path : {std::string("/nonexistent/profile"), std::string(bad), signs, fifo}) {
    auto r = run_probe({"NICMALLOC_SITES=" + path}, {});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(count_lines(r.err, "warning"), 1) << r.err; // no dataplane chunk: no pool warning
    EXPECT_EQ(r.num("sending_dataplane"), 0);
  }
  unlink(fifo.c_str());
  unlink(signs.c_str());
  unlink(bad);
}

} // namespace
