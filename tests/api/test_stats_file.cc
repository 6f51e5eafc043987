// NICMALLOC_STATS_FILE: the report at exit written to a file of each process instead of stderr,
// which settings inherited by every program a process runs (a build tool's compiler probes) would
// otherwise fill. Real programs under the preload: bash, which runs others, and true.
#include "nicmalloc.h"
#include "probe_runner.h"
#include "temp_dir.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace {

const std::string kPreload = std::string("LD_PRELOAD=") + NIC_LIB_PATH;

#define GROUP(group, ...) group,
const char *const kGroups[] = {NIC_STATS_FIELDS(GROUP)};
#undef GROUP

// A whole readable report: its title, then the line of every group of the field list in order,
// the last one ended.
void expect_whole_report(const std::string &path) {
  const std::string text = read_all(path);
  ASSERT_EQ(text.rfind("nicmalloc report\n", 0), 0u) << path << ":\n" << text;
  size_t at = 0;
  for (const char *group : kGroups) {
    at = text.find(std::string("\n  ") + group + " ", at);
    ASSERT_NE(at, std::string::npos) << path << ": no line for " << group << "\n" << text;
  }
  EXPECT_NE(text.find('\n', at + 1), std::string::npos) << path << ": cut\n" << text;
  EXPECT_EQ(text.back(), '\n') << path;
}

std::set<std::string> files_in(const std::string &dir) {
  std::set<std::string> names;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names.insert(e->d_name);
    closedir(d);
  }
  return names;
}

// A shell and the shell it runs: one file each, named by its process id, and nothing on stderr.
// With NICMALLOC_STATS=1 the two reports went to the stderr the caller reads.
TEST(StatsFile, EachProcessWritesItsOwnAndStderrIsLeftAlone) {
  TempDir dir;
  const ProbeResult r =
      run_program("/bin/bash", {kPreload, "NICMALLOC_STATS_FILE=" + dir.path + "/stats.%p"},
                  {"-c", "echo outer=$$; /bin/bash -c 'echo inner=$$'; true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string outer = r.values.count("outer") ? r.values.at("outer") : "?";
  const std::string inner = r.values.count("inner") ? r.values.at("inner") : "?";
  EXPECT_NE(outer, inner);
  EXPECT_EQ(files_in(dir.path), (std::set<std::string>{"stats." + outer, "stats." + inner}));
  for (const std::string &pid : {outer, inner})
    expect_whole_report(dir.path + "/stats." + pid);
}

// The close-on-exec copy of stderr that NICMALLOC_STATS=1 keeps for its report is not made when
// the report goes to a file: the shell's descriptors, as a command it runs lists them, are those
// it has without nicmalloc's settings.
TEST(StatsFile, NoCopyOfStderrIsKept) {
  TempDir dir;
  auto fds = [&](const std::vector<std::string> &env) {
    const ProbeResult r = run_program("/bin/bash", env, {"-c", "ls /proc/$$/fd; true"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  const std::string plain = fds({kPreload}), to_stderr = fds({kPreload, "NICMALLOC_STATS=1"});
  ASSERT_NE(to_stderr, plain) << "no copy of stderr to miss";
  EXPECT_EQ(fds({kPreload, "NICMALLOC_STATS_FILE=" + dir.path + "/stats.%p"}), plain);
}

// A relative name is taken from the directory the process started in, wherever it goes later;
// "%%" is a percent sign. env starts bash in the directory, under the settings it hands on.
TEST(StatsFile, ARelativeNameIsTakenFromWhereTheProcessStarted) {
  TempDir dir;
  const ProbeResult r = run_program("/usr/bin/env", {},
                                    {"-C", dir.path, kPreload, "NICMALLOC_STATS_FILE=stats.%p.%%",
                                     "/bin/bash", "-c", "cd / && echo pid=$$"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string name = "stats." + std::to_string(r.num("pid")) + ".%";
  EXPECT_EQ(files_in(dir.path), std::set<std::string>{name});
  expect_whole_report(dir.path + "/" + name);
}

// NICMALLOC_STATS=0 turns the report off, the file's too: nothing is written, nothing said.
TEST(StatsFile, StatsZeroTurnsItOff) {
  TempDir dir;
  const ProbeResult r = run_program(
      "/usr/bin/env", {},
      {kPreload, "NICMALLOC_STATS=0", "NICMALLOC_STATS_FILE=" + dir.path + "/stats", "/bin/true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(files_in(dir.path).empty());
}

// The file name is checked at start-up at its longest, %p and %u as 10 digits each (as many as a
// pid or a uid may have), with the 22 bytes the new file written beside it adds: one that could
// be too long is refused then, in one line, and nothing is said at exit (the report was lost at
// exit, "File name too long", without a word at start-up). A name of the most bytes allowed is
// written with every escape expanded, none cut off.
TEST(StatsFile, ANameThatCouldBeTooLongIsRefusedAtStartUp) {
  TempDir dir;
  const std::string over = dir.path + "/" + std::string(224, 'a') + "%p%p%p";
  ProbeResult r = run_program("/bin/true", {kPreload, "NICMALLOC_STATS_FILE=" + over}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "nicmalloc: warning: NICMALLOC_STATS_FILE=" + over +
                       ": the file name is too long: it may have 254 bytes (%p and %u at 10 "
                       "digits), over the 233 a name may have here (255 less the 22 that the new "
                       "file written beside it adds); ignored\n");
  EXPECT_TRUE(files_in(dir.path).empty());
  const std::string longest = std::string(192, 'b') + "%p%u%p%%%u";
  r = run_program("/usr/bin/env", {},
                  {kPreload, "NICMALLOC_STATS_FILE=" + dir.path + "/" + longest, "/bin/bash", "-c",
                   "echo pid=$$"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string pid = std::to_string(r.num("pid")), uid = std::to_string(geteuid());
  const std::string name = std::string(192, 'b') + pid + uid + pid + "%" + uid;
  EXPECT_EQ(files_in(dir.path), std::set<std::string>{name});
  expect_whole_report(dir.path + "/" + name);
}

// A link planted at the path (in /tmp, by anyone) would have root's run write through it.
TEST(StatsFile, ASymlinkAtThePathIsRefusedAndItsTargetUntouched) {
  TempDir dir;
  const std::string victim = dir.path + "/victim", link = dir.path + "/stats";
  std::ofstream(victim) << "precious\n";
  ASSERT_EQ(symlink(victim.c_str(), link.c_str()), 0);
  const ProbeResult r = run_program("/bin/true", {kPreload, "NICMALLOC_STATS_FILE=" + link}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_all(victim), "precious\n");
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link itself is left alone too";
  EXPECT_EQ(count_lines(r.err, "nicmalloc"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "NICMALLOC_STATS_FILE=" + link + ": " + link +
                                   " is a symbolic link; not written"),
            1)
      << r.err;
  EXPECT_EQ(files_in(dir.path), (std::set<std::string>{"victim", "stats"}));
}

// A directory the process may not write in: one line naming the path and why, no report on
// stderr, and the program runs as it would. Root may write anywhere, so root runs it as nobody.
TEST(StatsFile, AnUnwritableDirectoryIsSaidInOneLine) {
  TempDir dir(0755);
  const std::string path = dir.path + "/stats.%p";
  // env hands the settings to true alone.
  std::string program = "/usr/bin/env";
  std::vector<std::string> args = {kPreload, "NICMALLOC_STATS_FILE=" + path, "/bin/true"};
  if (geteuid() == 0) {
    if (access("/usr/bin/setpriv", X_OK)) GTEST_SKIP() << "no setpriv to run as nobody";
    args.insert(args.begin(), {"--reuid=65534", "--regid=65534", "--clear-groups", program});
    program = "/usr/bin/setpriv";
  } else {
    ASSERT_EQ(chmod(dir.path.c_str(), 0555), 0);
  }
  const ProbeResult r = run_program(program, {}, args);
  if (r.exit_code == 126 || r.exit_code == 127)
    GTEST_SKIP() << "nobody cannot run the program with the library where it was built: " << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "nicmalloc: warning: NICMALLOC_STATS_FILE=" + path +
                       " cannot be written (Permission denied)\n");
  EXPECT_TRUE(files_in(dir.path).empty());
}

} // namespace
