// Profile-guided sites (NICMALLOC_PROFILE, NICMALLOC_SITES) on profile_probe.c: a site whose
// buffers are sent with sendmsg and one whose buffers are not, each run in a child process.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "probe_runner.h"
#include "temp_dir.h"

extern char **environ;

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

int sending_sites(const std::string &path) {
  int sending, all;
  count_sites(path, sending, all);
  return sending;
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

mode_t GetUmask() {
  const mode_t mask = umask(022);
  umask(mask);
  return mask;
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

// A block of s bytes is sampled with probability 1 - e^(-s/mean), a thread's first one too: a
// worker whose first malloc was its 1 MiB I/O buffer was never sampled, and the profile had no
// sending site for it (with a mean of 4 KiB the chance of missing it is e^-256).
TEST(Profile, AThreadsFirstAllocationIsSampled) {
  Profile p;
  auto r = make_profile(p, {"thread-first"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_GT(r.num("first_sent"), 0) << r.out;
  EXPECT_EQ(sending_sites(p.path), 1) << "the worker's buffer is the only block sent";
}

// libunwind tests the addresses it reads by writing them into a pipe it opens on its first walk
// and keeps by number (alloc/routing/unwind_imports.c). A daemon that closes what it inherited
// and makes its own descriptors got them at those numbers, and walks then read and wrote them.
TEST(ProfileWalks, LeaveTheProgramsOwnDescriptorsAlone) {
  Profile p;
  auto r =
      run_probe({"NICMALLOC_PROFILE=" + p.path, "NICMALLOC_PROFILE_SAMPLE=1"}, {"descriptors"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("closed"), 0) << "pipes of the program's closed under it";
  EXPECT_EQ(r.num("changed"), 0) << "pipes of the program read or written";
  EXPECT_EQ(r.num("foreign"), 0) << "descriptors the program never made";
  int sending, all;
  count_sites(p.path, sending, all);
  EXPECT_GE(all, 1) << "the walks recorded sites";
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

// The new file renamed over the profile once came with 0644 whatever the profile had: a profile
// its owner had made 0600 was readable by everyone after the next run. It keeps its mode now.
TEST(Profile, ARewriteKeepsTheProfilesMode) {
  Profile p;
  ASSERT_EQ(make_profile(p).exit_code, 0);
  struct stat st {};
  ASSERT_EQ(stat(p.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u & ~GetUmask()) << "a new profile: 0644 under the umask";
  for (mode_t mode : {0600u, 0640u, 0664u}) {
    ASSERT_EQ(chmod(p.path.c_str(), mode), 0);
    const ino_t before = st.st_ino;
    ASSERT_EQ(make_profile(p).exit_code, 0);
    ASSERT_EQ(stat(p.path.c_str(), &st), 0);
    EXPECT_NE(st.st_ino, before) << "the profile was rewritten, not written in place";
    EXPECT_EQ(st.st_mode & 0777, mode) << std::oct << mode;
  }
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

// A site in a library loaded with dlopen after start-up: its frames could not be turned into
// addresses when the profile was read, and it was dropped without a word. It is routed once the
// library is loaded.
TEST(Profile, ASiteInALibraryLoadedLaterIsRouted) {
  Profile p;
  auto made = make_profile(p, {"plugin", NIC_PLUGIN_PATH});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  ASSERT_EQ(made.num("plugin_dataplane"), 0);
  auto r = run_probe({"NICMALLOC_SITES=" + p.path}, {"plugin", NIC_PLUGIN_PATH});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("plugin_dataplane"), 400) << r.err;
  EXPECT_EQ(count_lines(r.err, "nicmalloc"), 0) << r.err;
}

// The same profile in a run of the program that never loads the library routes nothing, and says
// so at exit, naming the library.
TEST(Profile, ASiteWhoseLibraryNeverLoadsIsNamedAtExit) {
  Profile p;
  ASSERT_EQ(make_profile(p, {"plugin", NIC_PLUGIN_PATH}).exit_code, 0);
  auto r = run_probe({"NICMALLOC_SITES=" + p.path}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("sending_dataplane"), 0);
  const std::string lib = NIC_PLUGIN_PATH;
  EXPECT_EQ(count_lines(r.err, "were never routed: their module " + lib.substr(lib.rfind('/') + 1)),
            1)
      << r.err;
}

// Reading a large profile read /proc/self/exe's link once per frame looked up, and looked up the
// frames of sites that sent nothing: 65540 readlink calls for 16384 sites, in every process. The
// program's path is read once, and only sending sites are looked up, once per module.
TEST(Profile, ALargeProfileReadsTheProgramsPathOnce) {
  Profile p;
  {
    std::ofstream out(p.path);
    out << "# nicmalloc profile 1\n" << std::hex;
    for (int i = 0; i < 2000; i++) // quiet sites, then sending ones, all in the program
      out << "site " << (i < 1000 ? 0 : 1) << " 1 1 1 1 1 " NIC_PROBE_PATH "+0x" << 16 * i
          << " " NIC_PROBE_PATH "+0x" << 16 * i + 8 << "\n";
  }
  auto r = run_probe({"LD_PRELOAD=" NIC_COUNT_READLINK_PATH, "NICMALLOC_SITES=" + p.path}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(r.num("readlink_calls"), 2) << r.out; // once, and the probe reads none
}

// Sending sites naming more modules than the table holds are not routed, and said so for what
// they are: the message used to say they were past the first 2048 sites, with 600 in the file.
TEST(Profile, SitesPastTheModuleTableAreSaidSo) {
  Profile p;
  {
    std::ofstream out(p.path);
    out << "# nicmalloc profile 1\n";
    for (int i = 0; i < 600; i++)
      out << "site 1 1 1 1 1 1 /nonexistent/libmodule" << i << ".so+0x10\n";
  }
  auto r = run_probe({"NICMALLOC_SITES=" + p.path}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(r.err, "88 sending sites name modules past the first 512"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "past the first 2048"), 0) << r.err;
}

// A routed run tests where the program's call returns to before it walks the stack: malloc and
// calloc pass that address down, the other calls walk one frame for it. Sites of every call are
// routed, and only they.
TEST(Profile, SitesOfEveryAllocationCallAreRouted) {
  Profile p;
  ASSERT_EQ(make_profile(p, {"entries"}).exit_code, 0);
  ASSERT_EQ(sending_sites(p.path), 5);
  auto r = run_probe({"NICMALLOC_SITES=" + p.path}, {"entries"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char *call : {"malloc", "calloc", "realloc", "aligned_alloc", "posix_memalign"})
    EXPECT_EQ(r.num(std::string(call) + "_dataplane"), 50) << call << "\n" << r.err;
  auto others = run_probe({"NICMALLOC_SITES=" + p.path}, {});
  ASSERT_EQ(others.exit_code, 0) << others.err;
  EXPECT_EQ(others.num("sending_dataplane"), 0) << "another site of the same program";
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

// A profile routes the run it was made of, wrappers included: a shell (timeout, a pyenv shim)
// that loads none of the sending sites' modules has nothing to route, and used to say so on its
// stderr in every routed run. It says so only when verbose; the program is routed.
TEST(Profile, AWrapperThatLoadsNoSendingModuleRunsUnroutedQuietly) {
  Profile p;
  ASSERT_EQ(make_profile(p).exit_code, 0);
  const std::string shell = "exec " NIC_PROBE_PATH;
  auto r = run_program("/bin/sh", {"LD_PRELOAD=" NIC_LIB_PATH, "NICMALLOC_SITES=" + p.path},
                       {"-c", shell});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("sending_dataplane"), 400) << r.err;
  EXPECT_EQ(count_lines(r.err, "nicmalloc"), 0) << r.err;
  auto verbose = run_program(
      "/bin/sh", {"LD_PRELOAD=" NIC_LIB_PATH, "NICMALLOC_SITES=" + p.path, "NICMALLOC_VERBOSE=1"},
      {"-c", shell});
  EXPECT_EQ(count_lines(verbose.err, "none of its 1 sending sites lies in modules this process"), 1)
      << verbose.err;
}

// A profile in which nothing was sent routes nothing anywhere: that is said, once per run. Every
// process of a run loads the file: a test run routed so printed the line 340 times, and the
// tests that compare a child's stderr failed.
TEST(Profile, AProfileWithoutASendingSiteSaysSoOncePerRun) {
  Profile p;
  std::ofstream(p.path) << "# nicmalloc profile 1\nsite 0 0 1 1 1 1 " NIC_PROBE_PATH "+0x10\n";
  auto r = run_probe({"NICMALLOC_SITES=" + p.path}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("sending_dataplane"), 0);
  EXPECT_EQ(count_lines(r.err, "names no site that sent bytes"), 1) << r.err;
  // A shell that runs the program twice: three processes, one line.
  const std::string twice = NIC_PROBE_PATH " && " NIC_PROBE_PATH;
  auto tree = run_program("/bin/sh", {"LD_PRELOAD=" NIC_LIB_PATH, "NICMALLOC_SITES=" + p.path},
                          {"-c", twice});
  ASSERT_EQ(tree.exit_code, 0) << tree.err;
  EXPECT_EQ(count_lines(tree.err, "names no site that sent bytes"), 1) << tree.err;
  auto verbose = run_program(
      "/bin/sh", {"LD_PRELOAD=" NIC_LIB_PATH, "NICMALLOC_SITES=" + p.path, "NICMALLOC_VERBOSE=1"},
      {"-c", twice});
  EXPECT_EQ(count_lines(verbose.err, "names no site that sent bytes"), 3) << verbose.err;
  EXPECT_EQ(count_lines(verbose.err, "warning: NICMALLOC_SITES"), 1) << verbose.err;
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

// An offset that does not fit 64 bits (or has no digits) is a malformed line like any other:
// strtoull clamped it to ULLONG_MAX and the file loaded without a word.
TEST(Profile, AnOverflowingOrEmptyOffsetIsRefused) {
  Profile p;
  for (std::string offset : {"0xfffffffffffffffffff", "0x", "0x-1"}) {
    std::ofstream(p.path, std::ios::trunc)
        << "# nicmalloc profile 1\nsite 5 1 1 1 1 1 " NIC_PROBE_PATH "+" << offset << "\n";
    auto r = run_probe({"NICMALLOC_SITES=" + p.path}, {});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(count_lines(r.err, "is not a nicmalloc profile (malformed site lines)"), 1)
        << offset << ": " << r.err;
  }
}

// A uid no account uses, for files of "another user" and for a worker that drops privileges.
uid_t other_uid() {
  return 40000 + (uid_t)(getpid() % 20000);
}

// A symbolic link planted at the path (in /tmp, by anyone) used to make root's run write
// through it and overwrite its target.
TEST(ProfileFile, ASymlinkAtThePathIsRefusedAndItsTargetUntouched) {
  TempDir dir;
  const std::string victim = dir.path + "/victim", link = dir.path + "/app.profile";
  std::ofstream(victim) << "precious\n";
  ASSERT_EQ(symlink(victim.c_str(), link.c_str()), 0);
  auto r = run_probe({"NICMALLOC_PROFILE=" + link, "NICMALLOC_PROFILE_SAMPLE=4K"}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_all(victim), "precious\n");
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link itself is left alone too";
  EXPECT_EQ(count_lines(r.err, "symbolic link"), 1) << r.err;
}

// The file name is checked at start-up at its longest, %u as 10 digits (as many as a uid may
// have), with the 22 bytes the new file written beside it adds: one that could be too long is
// refused then, in one line, instead of failing at a write (said only then, by a worker that
// dropped to a long uid). %p is no escape of the profile's: it stays as it is, and such a name of
// the most bytes allowed is written.
TEST(ProfileFile, ANameThatCouldBeTooLongIsRefusedAtStartUp) {
  TempDir dir;
  auto run = [&](const std::string &name) {
    return run_probe({"NICMALLOC_PROFILE=" + dir.path + "/" + name, "NICMALLOC_PROFILE_SAMPLE=4K"},
                     {});
  };
  struct Case {
    std::string given, written;
  };
  const std::string uid = std::to_string(geteuid());
  for (const Case &c : {Case{std::string(223, 'a') + "%u", std::string(223, 'a') + uid},
                        Case{std::string(227, 'b') + "%p%p%p", std::string(227, 'b') + "%p%p%p"}}) {
    const ProbeResult r = run(c.given);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(count_lines(r.err, "nicmalloc"), 0) << r.err;
    EXPECT_EQ(sending_sites(dir.path + "/" + c.written), 1) << c.given;
    unlink((dir.path + "/" + c.written).c_str());
  }
  const std::string over = dir.path + "/" + std::string(224, 'c') + "%u";
  const ProbeResult r = run(std::string(224, 'c') + "%u");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(r.err, "nicmalloc"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "NICMALLOC_PROFILE=" + over +
                                   ": the file name is too long: it may have 234 bytes (%u at 10 "
                                   "digits), over the 233 a name may have here (255 less the 22 "
                                   "that the new file written beside it adds); ignored"),
            1)
      << r.err;
  DIR *d = opendir(dir.path.c_str());
  ASSERT_NE(d, nullptr);
  int entries = 0;
  while (dirent *e = readdir(d))
    entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  EXPECT_EQ(entries, 0) << "nothing is written";
}

// A file another user made at the path (or a directory any user can rename entries in) is not
// written, and what was there stays.
TEST(ProfileFile, AFileOfAnotherUserOrAnUnsafeDirectoryIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root to make a file of another user";
  TempDir dir;
  const std::string foreign = dir.path + "/app.profile";
  std::ofstream(foreign) << "foreign\n";
  ASSERT_EQ(chown(foreign.c_str(), other_uid(), other_uid()), 0);
  auto r = run_probe({"NICMALLOC_PROFILE=" + foreign, "NICMALLOC_PROFILE_SAMPLE=4K"}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_all(foreign), "foreign\n");
  EXPECT_EQ(count_lines(r.err, "owned by uid " + std::to_string(other_uid())), 1) << r.err;

  TempDir open_dir(0777); // world-writable, no sticky bit
  const std::string path = open_dir.path + "/app.profile";
  r = run_probe({"NICMALLOC_PROFILE=" + path, "NICMALLOC_PROFILE_SAMPLE=4K"}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "nothing is written there";
  EXPECT_EQ(count_lines(r.err, "without the sticky bit"), 1) << r.err;
}

// Another user's link on the way (a directory name planted in /tmp pointing at /etc, say) is not
// followed.
TEST(ProfileFile, ALinkOfAnotherUserOnTheWayIsNotFollowed) {
  if (geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root to make a link of another user";
  TempDir dir, victim;
  const std::string link = dir.path + "/profiles";
  ASSERT_EQ(symlink(victim.path.c_str(), link.c_str()), 0);
  ASSERT_EQ(lchown(link.c_str(), other_uid(), other_uid()), 0);
  auto r =
      run_probe({"NICMALLOC_PROFILE=" + link + "/app.profile", "NICMALLOC_PROFILE_SAMPLE=4K"}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(access((victim.path + "/app.profile").c_str(), F_OK), 0) << "nothing written there";
  EXPECT_EQ(count_lines(r.err, "symbolic link of uid"), 1) << r.err;
}

// Root's own link is followed, but not on into another user's link it points to: the owner of
// every link on the way counts, as realpath would follow them all. Links of root's own, chained,
// relative and through "..", lead to the directory written.
TEST(ProfileFile, ALinkOfAnotherUserThatAnOwnLinkPointsToIsNotFollowed) {
  if (geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root to make a link of another user";
  TempDir dir, victim, good;
  const std::string theirs = dir.path + "/theirs", mine = dir.path + "/mine";
  ASSERT_EQ(symlink(victim.path.c_str(), theirs.c_str()), 0);
  ASSERT_EQ(lchown(theirs.c_str(), other_uid(), other_uid()), 0);
  ASSERT_EQ(symlink("theirs", mine.c_str()), 0);
  auto r =
      run_probe({"NICMALLOC_PROFILE=" + mine + "/app.profile", "NICMALLOC_PROFILE_SAMPLE=4K"}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(access((victim.path + "/app.profile").c_str(), F_OK), 0) << "written there";
  EXPECT_EQ(count_lines(r.err, "symbolic link of uid " + std::to_string(other_uid())), 1) << r.err;

  const std::string to_good = dir.path + "/to-good", chained = dir.path + "/chained";
  ASSERT_EQ(symlink(good.path.c_str(), to_good.c_str()), 0);
  ASSERT_EQ(symlink(("../" + dir.path.substr(5) + "/to-good").c_str(), chained.c_str()), 0);
  r = run_probe({"NICMALLOC_PROFILE=" + chained + "/./app.profile", "NICMALLOC_PROFILE_SAMPLE=4K"},
                {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(access((good.path + "/app.profile").c_str(), F_OK), 0) << r.err;
  EXPECT_EQ(count_lines(r.err, "NICMALLOC_PROFILE"), 0) << r.err;
  unlink((good.path + "/app.profile").c_str());
}

// A complete profile: its header, all its site lines well formed, a newline at the end.
bool complete(const std::string &text, const std::string &run, size_t min_sites, std::string &why) {
  if (text.rfind("# nicmalloc profile 1\n", 0) != 0) return why = "no header", false;
  if (text.back() != '\n') return why = "a cut last line", false;
  if (text.find("# run " + run + "\n") == std::string::npos) return why = "not of the run", false;
  std::istringstream in(text);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("site ", 0) != 0) continue;
    std::istringstream f(line.substr(5));
    double x;
    for (int k = 0; k < 6; k++)
      if (!(f >> x)) return why = "a bad line: " + line, false;
    n++;
  }
  if (n < min_sites) return why = std::to_string(n) + " sites", false;
  return true;
}

// The file used to be truncated, then written: a writer killed in between left an empty or cut
// profile, and with it every earlier process's sites. Writers of one run, killed at random points
// of their lives (the profile is large, so many kills land while it is written), must leave the
// previous complete profile or the new one.
TEST(ProfileFile, WritersKilledAtRandomPointsNeverLeaveACutProfile) {
  TempDir dir;
  const std::string path = dir.path + "/app.profile", run = "kill-test-" + std::to_string(getpid());
  const size_t kSites = 12000;
  {
    std::ofstream out(path);
    out << "# nicmalloc profile 1\n# sample_bytes 4096 sent_dataplane 0 sent_other 0 "
           "dropped_samples 0\n# run "
        << run << "\n";
    for (size_t i = 0; i < kSites; i++)
      out << "site 1 1 1 1 1 1 /nonexistent/module+0x" << std::hex << i * 16 << std::dec << "\n";
  }
  const std::string env_profile = "NICMALLOC_PROFILE=" + path,
                    env_run = "NICMALLOC_PROFILE_RUN=" + run;
  std::vector<char *> envp = {const_cast<char *>(env_profile.c_str()),
                              const_cast<char *>(env_run.c_str()),
                              const_cast<char *>("NICMALLOC_PROFILE_SAMPLE=4K")};
  for (char **e = environ; *e; e++)
    envp.push_back(*e);
  envp.push_back(nullptr);
  char *argv[] = {const_cast<char *>(NIC_PROBE_PATH), nullptr};
  posix_spawn_file_actions_t quiet;
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&quiet, 2, "/dev/null", O_WRONLY, 0);
  auto spawn = [&] {
    pid_t pid = -1;
    EXPECT_EQ(posix_spawn(&pid, NIC_PROBE_PATH, &quiet, nullptr, argv, envp.data()), 0);
    return pid;
  };
  // How long a writer lives (the shortest of three, so that a slow first start does not push
  // the kills past the end), so that the kills spread over all of its life.
  long life_us = 0;
  int status = 0;
  pid_t pid;
  for (int i = 0; i < 3; i++) {
    auto t0 = std::chrono::steady_clock::now();
    pid = spawn();
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const long us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    life_us = i == 0 || us < life_us ? us : life_us;
  }
  std::string why;
  ASSERT_TRUE(complete(read_all(path), run, kSites, why)) << why;
  std::mt19937 rng(getpid());
  const int kKills = 150;
  int killed = 0, cut = 0;
  for (int i = 0; i < kKills; i++) {
    pid = spawn();
    const long kill_at = std::uniform_int_distribution<long>(0, life_us * 11 / 10)(rng);
    usleep((useconds_t)kill_at); // where the kill lands, not a wait for anything
    kill(pid, SIGKILL);
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    killed += WIFSIGNALED(status);
    // A writer that ended first lived less than kill_at: writers run faster than the three
    // timed ones did (a machine whose load fell), so the kills follow their lives down, a
    // quarter of the way each time, so that one quick writer does not pull them all early.
    if (!WIFSIGNALED(status) && kill_at < life_us) life_us = (3 * life_us + kill_at) / 4;
    if (!complete(read_all(path), run, kSites, why)) {
      cut++;
      ADD_FAILURE() << "after kill " << i << " at a random point: " << why;
      if (cut >= 3) break;
    }
  }
  int left = 0;
  if (DIR *d = opendir(dir.path.c_str())) {
    while (dirent *e = readdir(d))
      left += strstr(e->d_name, ".tmp") != nullptr;
    closedir(d);
  }
  printf("%d writers, %d killed before they ended, %d cut profiles, %d new files left behind "
         "(life %ld us)\n",
         kKills, killed, cut, left, life_us);
  posix_spawn_file_actions_destroy(&quiet);
  EXPECT_EQ(cut, 0);
  EXPECT_GT(killed, kKills / 2) << "the kills must land before the writers end";
}

// Writers of one run that end together all count: each locks the file it found, and one that
// waited finds it renamed over and merges into the new one instead.
TEST(ProfileFile, WritersOfOneRunEndingTogetherAllCount) {
  TempDir dir;
  const std::string path = dir.path + "/app.profile", run = "many-" + std::to_string(getpid());
  const std::string env_profile = "NICMALLOC_PROFILE=" + path,
                    env_run = "NICMALLOC_PROFILE_RUN=" + run;
  std::vector<char *> envp = {const_cast<char *>(env_profile.c_str()),
                              const_cast<char *>(env_run.c_str()),
                              const_cast<char *>("NICMALLOC_PROFILE_SAMPLE=4K")};
  for (char **e = environ; *e; e++)
    envp.push_back(*e);
  envp.push_back(nullptr);
  char *argv[] = {const_cast<char *>(NIC_PROBE_PATH), nullptr};
  posix_spawn_file_actions_t quiet;
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
  const int kWriters = 16;
  std::vector<pid_t> pids(kWriters);
  for (pid_t &pid : pids)
    ASSERT_EQ(posix_spawn(&pid, NIC_PROBE_PATH, &quiet, nullptr, argv, envp.data()), 0);
  posix_spawn_file_actions_destroy(&quiet);
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(header_sent_other(path), kWriters * kBytes);
}

// A writer killed between making its new file and renaming it leaves that file behind; the next
// writer removes such files once they are old, when they are its own.
TEST(ProfileFile, NewFilesLeftByKilledWritersAreRemoved) {
  TempDir dir;
  const std::string path = dir.path + "/app.profile";
  ASSERT_EQ(run_probe({"NICMALLOC_PROFILE=" + path}, {}).exit_code, 0);
  const std::string ours = dir.path + "/.app.profile.0123456789abcdef.tmp",
                    young = dir.path + "/.app.profile.1123456789abcdef.tmp",
                    theirs = dir.path + "/.app.profile.2123456789abcdef.tmp";
  for (const std::string &f : {ours, young, theirs})
    std::ofstream(f) << "# nicmalloc profile 1\n";
  const struct timespec old[2] = {{time(nullptr) - 3600, 0}, {time(nullptr) - 3600, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, ours.c_str(), old, 0), 0);
  ASSERT_EQ(utimensat(AT_FDCWD, theirs.c_str(), old, 0), 0);
  const bool root = geteuid() == 0;
  if (root) {
    ASSERT_EQ(chown(theirs.c_str(), other_uid(), other_uid()), 0);
  }
  ASSERT_EQ(run_probe({"NICMALLOC_PROFILE=" + path}, {}).exit_code, 0);
  EXPECT_NE(access(ours.c_str(), F_OK), 0) << "an old one of ours goes";
  EXPECT_EQ(access(young.c_str(), F_OK), 0) << "a writer may still be writing it";
  if (root) {
    EXPECT_EQ(access(theirs.c_str(), F_OK), 0) << "not ours to remove";
  }
}

// A daemon stopped by SIGTERM never reaches the exit code that writes the profile. Waits (for
// the periodic write, bounded) until the running daemon's sites are in the profile, then stops it;
// the profile must still hold them, complete.
void sigtermed_daemon_keeps_its_sites(const char *mode, long long sent = kBytes) {
  TempDir dir;
  const std::string path = dir.path + "/app.profile";
  const std::string env_profile = "NICMALLOC_PROFILE=" + path;
  std::vector<char *> envp = {const_cast<char *>(env_profile.c_str()),
                              const_cast<char *>("NICMALLOC_PROFILE_SAMPLE=4K")};
  for (char **e = environ; *e; e++)
    envp.push_back(*e);
  envp.push_back(nullptr);
  char *argv[] = {const_cast<char *>(NIC_PROBE_PATH), const_cast<char *>(mode), nullptr};
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, NIC_PROBE_PATH, &actions, nullptr, argv, envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  std::string said;
  char buf[256];
  for (ssize_t n;
       said.find("ready=1") == std::string::npos && (n = read(out[0], buf, sizeof buf)) > 0;)
    said.append(buf, (size_t)n);
  close(out[0]);
  ASSERT_NE(said.find("ready=1"), std::string::npos) << said;
  int sending = 0, all = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (count_sites(path, sending, all),
         sending == 0 && std::chrono::steady_clock::now() < deadline)
    usleep(100000);
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  count_sites(path, sending, all);
  EXPECT_GE(sending, 1) << "the daemon's sending site, written while it ran";
  EXPECT_EQ(header_sent_other(path), sent);
}

TEST(ProfileFile, ADaemonStoppedBySigtermKeepsItsSites) {
  sigtermed_daemon_keeps_its_sites("daemon");
}

TEST(ProfileFile, ADaemonWhoseHandlerExitsOnSigtermKeepsItsSites) {
  sigtermed_daemon_keeps_its_sites("daemon-handler");
}

// One that sends again and returns from main writes at exit what it counted since its last
// write, nothing twice.
TEST(ProfileFile, ADaemonThatExitsOnSigtermCountsItsBytesOnce) {
  sigtermed_daemon_keeps_its_sites("daemon-exit", 2 * kBytes);
}

// nginx's master stays root and its workers drop to another user: with %u in the file name each
// writes a profile of its own (the worker could neither replace nor be allowed to merge into
// root's file), both complete, in a shared sticky directory such as /tmp.
TEST(ProfileFile, AWorkerThatDropsPrivilegesWritesAProfileOfItsOwn) {
  if (geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root to drop privileges";
  TempDir dir(01777);
  const std::string uid = std::to_string(other_uid());
  auto r = run_probe(
      {"NICMALLOC_PROFILE=" + dir.path + "/app.%u.profile", "NICMALLOC_PROFILE_SAMPLE=4K"},
      {"setuid", uid});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(r.err, "warning"), 0) << r.err;
  for (const std::string &who : {std::string("0"), uid}) {
    const std::string path = dir.path + "/app." + who + ".profile";
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(std::to_string(st.st_uid), who) << path;
    int sending = 0, all = 0;
    count_sites(path, sending, all);
    EXPECT_EQ(sending, 1) << path;
    EXPECT_EQ(header_sent_other(path), kBytes) << path;
  }
}

} // namespace
