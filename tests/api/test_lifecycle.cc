// Allocation outside main: in constructors before main, in atexit handlers and destructors at
// exit, and in the destructor of a C++ static object. These run in a child process (stdout and
// stderr on one pipe, so the order of lines is the order of events) because what matters is the
// process's own start-up and exit.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "nicmalloc.h"
#include "probe_runner.h"
#include "temp_dir.h"

extern char **environ;

namespace {

// A dataplane block that lives as long as the process: made before main by the C++ runtime and
// freed after main returns, then reported. Only in the child the test spawns (NIC_LIFECYCLE_REPORT
// set): ctest's test discovery runs this binary without the suite's 64 MiB chunk setting, and
// would otherwise map and pin a 1 GiB chunk just to list the tests.
struct StaticDataplaneBuffer {
  static constexpr size_t kSize = 8192;
  char *p = nullptr;
  StaticDataplaneBuffer() {
    if (!getenv("NIC_LIFECYCLE_REPORT")) return;
    p = static_cast<char *>(nic_malloc(kSize));
    if (p) memset(p, 0x5c, kSize);
  }
  ~StaticDataplaneBuffer() {
    if (!getenv("NIC_LIFECYCLE_REPORT")) return;
    bool ok = p && nic_is_dataplane(p);
    for (size_t i = 0; ok && i < kSize; i++)
      ok = p[i] == 0x5c;
    free(p);
    nic_stats s = NIC_STATS_INIT;
    nic_get_stats(&s);
    std::string line = std::string(ok ? "static-dtor-ok" : "FAIL static-dtor") +
                       " dataplane_live=" + std::to_string(s.dataplane_live) + "\n";
    ssize_t w = write(STDOUT_FILENO, line.data(), line.size());
    (void)w;
  }
};
StaticDataplaneBuffer static_buffer;

// NIC_LIFECYCLE_FORK=exit|exec|daemon: before main, fork a child that exits (running the exit
// handlers and destructors, nicmalloc's report among them) or execs this binary again, running
// no tests, while the parent waits for it and then goes on to its own exit; or (daemon) a child
// that exits once its parent has left with _exit, as daemon(3) leaves.
struct ForkBeforeMain {
  ForkBeforeMain() {
    const char *how = getenv("NIC_LIFECYCLE_FORK");
    if (!how) return;
    const pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
      if (!strcmp(how, "exec")) {
        unsetenv("NIC_LIFECYCLE_FORK");
        execl("/proc/self/exe", "/proc/self/exe", "--gtest_filter=NoTestHasThisName", nullptr);
        _exit(127);
      }
      for (int ms = 0; !strcmp(how, "daemon") && getppid() == parent && ms < 20000; ms++)
        usleep(1000);
      exit(0);
    }
    if (!strcmp(how, "daemon")) _exit(0);
    if (child > 0) waitpid(child, nullptr, 0);
  }
};
ForkBeforeMain fork_before_main;

struct Spawned {
  int status = -1;
  std::string output; // stdout and stderr interleaved as written
};

Spawned spawn(const std::string &path, const std::vector<std::string> &args,
              const std::vector<std::string> &env) {
  std::vector<char *> argv, envp;
  argv.push_back(const_cast<char *>(path.c_str()));
  for (auto &a : args)
    argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  // getenv returns the first match, so the test's settings go first.
  for (auto &e : env)
    envp.push_back(const_cast<char *>(e.c_str()));
  for (char **e = environ; *e; e++)
    envp.push_back(*e);
  envp.push_back(nullptr);

  Spawned r;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC)) return r;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  pid_t pid;
  int rc = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc == 0) {
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
      r.output.append(buf, size_t(n));
    waitpid(pid, &r.status, 0);
  }
  close(fds[0]);
  return r;
}

// Position of the first line containing needle, or npos.
size_t line_of(const std::string &text, const std::string &needle) {
  std::istringstream lines(text);
  size_t index = 0;
  for (std::string line; std::getline(lines, line); index++)
    if (line.find(needle) != std::string::npos) return index;
  return std::string::npos;
}

TEST(Lifecycle, AllocationInConstructorsMainAtexitAndDestructors) {
  Spawned r = spawn(NIC_LIFECYCLE_PROBE_PATH, {}, {"NICMALLOC_STATS=1"});
  ASSERT_TRUE(WIFEXITED(r.status)) << "killed by signal " << WTERMSIG(r.status) << "\n" << r.output;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.output;
  EXPECT_EQ(count_lines(r.output, "FAIL"), 0) << r.output;
  const char *stages[] = {"ctor101-ok", "ctor65535-ok",  "main-ok",
                          "atexit-ok",  "destructor-ok", "nicmalloc report"};
  size_t previous = 0;
  for (const char *stage : stages) {
    size_t at = line_of(r.output, stage);
    ASSERT_NE(at, std::string::npos) << "no \"" << stage << "\" line\n" << r.output;
    EXPECT_GE(at, previous) << "\"" << stage << "\" out of order\n" << r.output;
    previous = at;
  }
  EXPECT_EQ(count_lines(r.output, "nicmalloc report"), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, "dataplane_live=0 invalid_frees=0 double_frees=0"), 1)
      << "every dataplane block is freed by the last destructor, with no bad frees\n"
      << r.output;
  EXPECT_EQ(count_lines(r.output, "errors            0 invalid frees, 0 double frees"), 1)
      << r.output;
  EXPECT_EQ(count_lines(r.output, "nicmalloc: error"), 0) << r.output;
}

TEST(Lifecycle, CxxStaticObjectFreesItsDataplaneBlockAtExit) {
  // This very binary, running no tests: only its static objects' start-up and exit happen.
  Spawned r = spawn("/proc/self/exe", {"--gtest_filter=NoTestHasThisName"},
                    {"NIC_LIFECYCLE_REPORT=1", "NICMALLOC_STATS=1"});
  ASSERT_TRUE(WIFEXITED(r.status)) << "killed by signal " << WTERMSIG(r.status) << "\n" << r.output;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.output;
  size_t dtor = line_of(r.output, "static-dtor-ok dataplane_live=0");
  size_t report = line_of(r.output, "nicmalloc report");
  ASSERT_NE(dtor, std::string::npos) << r.output;
  ASSERT_NE(report, std::string::npos) << r.output;
  EXPECT_LT(dtor, report) << "the report comes after the program's own destructors\n" << r.output;
  EXPECT_EQ(count_lines(r.output, "nicmalloc: error"), 0) << r.output;
}

// A malloc from the main program's .preinit_array comes before libc has set environ: the settings
// are taken from /proc's copy of the environment. They were marked read with none found, and the
// whole run ignored them: without the fix it printed preinit_dp=0 main_dp=0 and no report.
TEST(Lifecycle, AMallocFromPreinitArrayHonoursTheSettings) {
  Spawned r =
      spawn(NIC_PREINIT_PROBE_PATH, {}, {"NICMALLOC_DP_MIN_SIZE=1024", "NICMALLOC_STATS=1"});
  ASSERT_TRUE(WIFEXITED(r.status)) << "killed by signal " << WTERMSIG(r.status) << "\n" << r.output;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.output;
  EXPECT_EQ(count_lines(r.output, "preinit_dp=1"), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, "main_dp=1"), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, "nicmalloc report"), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, "nicmalloc: error"), 0) << r.output;
}

// Without /proc (a chroot, or a setgid program, which cannot open its own /proc files) the
// settings come from the initial stack: they were all ignored, silently, when only /proc's copy
// was read. /proc is hidden under a tmpfs in a mount namespace of the probe's own (root only).
TEST(Lifecycle, AMallocFromPreinitArrayHonoursTheSettingsWithoutProc) {
  if (geteuid() != 0) GTEST_SKIP() << "SKIPPED LOUDLY: needs root for a mount namespace";
  Spawned r = spawn("/usr/bin/unshare",
                    {"-m", "sh", "-c", "mount -t tmpfs none /proc || exit 99; exec \"$0\"",
                     NIC_PREINIT_PROBE_PATH},
                    {"NICMALLOC_DP_MIN_SIZE=1024", "NICMALLOC_STATS=1"});
  ASSERT_TRUE(WIFEXITED(r.status)) << "killed by signal " << WTERMSIG(r.status) << "\n" << r.output;
  if (WEXITSTATUS(r.status) == 99 || r.output.find("unshare:") != std::string::npos)
    GTEST_SKIP() << "SKIPPED LOUDLY: no mount namespace here\n" << r.output;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.output;
  EXPECT_EQ(count_lines(r.output, "preinit_dp=1"), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, "main_dp=1"), 1) << r.output;
  EXPECT_EQ(count_lines(r.output, "nicmalloc report"), 1) << r.output;
}

// The report comes however the process exits: from a thread other than main's, or by exit() from a
// destructor, which ends the process before the destructors of the libraries run (nicmalloc's,
// which wrote it, among them): the report used to be missing then.
TEST(Lifecycle, TheReportComesWhenAThreadOrADestructorCallsExit) {
  for (const char *how : {"thread", "destructor"}) {
    Spawned r = spawn(NIC_LIFECYCLE_PROBE_PATH, {},
                      {std::string("NIC_LIFECYCLE_EXIT=") + how, "NICMALLOC_STATS=1"});
    ASSERT_TRUE(WIFEXITED(r.status)) << how << "\n" << r.output;
    EXPECT_EQ(WEXITSTATUS(r.status), 0) << how << "\n" << r.output;
    EXPECT_EQ(count_lines(r.output, "FAIL"), 0) << how << "\n" << r.output;
    const size_t destructor = line_of(r.output, "destructor-ok dataplane_live=0");
    const size_t report = line_of(r.output, "nicmalloc report");
    ASSERT_NE(destructor, std::string::npos) << how << "\n" << r.output;
    ASSERT_NE(report, std::string::npos) << how << ": no report\n" << r.output;
    EXPECT_LT(destructor, report) << how << "\n" << r.output;
    EXPECT_EQ(count_lines(r.output, "nicmalloc report"), 1) << how << "\n" << r.output;
    EXPECT_EQ(count_lines(r.output, "  errors  "), 1) << how << ": the report is whole\n"
                                                      << r.output;

    // The same report into NICMALLOC_STATS_FILE.
    TempDir dir;
    r = spawn(
        NIC_LIFECYCLE_PROBE_PATH, {},
        {std::string("NIC_LIFECYCLE_EXIT=") + how, "NICMALLOC_STATS_FILE=" + dir.path + "/report"});
    ASSERT_TRUE(WIFEXITED(r.status)) << how << "\n" << r.output;
    EXPECT_EQ(WEXITSTATUS(r.status), 0) << how << "\n" << r.output;
    EXPECT_EQ(count_lines(r.output, "nicmalloc"), 0) << how << "\n" << r.output;
    const std::string file = read_all(dir.path + "/report");
    EXPECT_EQ(line_of(file, "nicmalloc report"), 0u) << how << ": no report in the file\n" << file;
    EXPECT_EQ(count_lines(file, "  errors  "), 1) << how << ": the report is whole\n" << file;
  }
}

// NICMALLOC_STATS reports at the exit of the process, not at the exit of a child of fork while
// its parent runs (a second report of the parent's figures: with json, a second object on the
// same stderr). A child that execs is a new process, which reports its own, and so does a child
// that outlives its parent (a daemon's parent leaves with _exit, reporting nothing). The same for
// NICMALLOC_STATS_FILE, with a file per process (%p).
TEST(Lifecycle, AForkChildReportsOnlyAfterExecOrOnceItsParentIsGone) {
  for (const char *how : {"exit", "exec", "daemon"}) {
    Spawned r = spawn("/proc/self/exe", {"--gtest_filter=NoTestHasThisName"},
                      {std::string("NIC_LIFECYCLE_FORK=") + how, "NICMALLOC_STATS=json"});
    ASSERT_TRUE(WIFEXITED(r.status)) << how << "\n" << r.output;
    EXPECT_EQ(WEXITSTATUS(r.status), 0) << how << "\n" << r.output;
    const int reports = !strcmp(how, "exec") ? 2 : 1;
    EXPECT_EQ(count_lines(r.output, "{\"version\": "), reports) << how << "\n" << r.output;

    TempDir dir;
    r = spawn("/proc/self/exe", {"--gtest_filter=NoTestHasThisName"},
              {std::string("NIC_LIFECYCLE_FORK=") + how, "NICMALLOC_STATS=json",
               "NICMALLOC_STATS_FILE=" + dir.path + "/report.%p"});
    ASSERT_TRUE(WIFEXITED(r.status)) << how << "\n" << r.output;
    EXPECT_EQ(count_lines(r.output, "{\"version\": "), 0) << how << "\n" << r.output;
    int files = 0;
    if (DIR *d = opendir(dir.path.c_str())) {
      while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        files++;
        EXPECT_EQ(read_all(dir.path + "/" + e->d_name).rfind("{\"version\": ", 0), 0u) << how;
      }
      closedir(d);
    }
    EXPECT_EQ(files, reports) << how;
  }
}

// exit() from a signal handler (not async-signal-safe, but programs do it) that lands while the
// thread holds a lock of nicmalloc: the report at exit waited for that lock, its own, and the
// process hung (about one run in two). The report is best-effort: it goes without what it cannot
// read, and says so. Each run is killed after a deadline far beyond a normal exit.
TEST(Lifecycle, ExitFromASignalHandlerNeverWaitsForTheReport) {
  constexpr int kRuns = 24;
  int hung = 0;
  for (int run = 0; run < kRuns; run++) {
    TempDir dir;
    const std::string out = dir.path + "/out";
    const bool to_file = run % 2;
    std::vector<std::string> env = {to_file ? "NICMALLOC_STATS_FILE=" + dir.path + "/report"
                                            : "NICMALLOC_STATS=1"};
    std::vector<char *> envp;
    for (auto &e : env)
      envp.push_back(const_cast<char *>(e.c_str()));
    for (char **e = environ; *e; e++)
      envp.push_back(*e);
    envp.push_back(nullptr);
    const std::string delay = std::to_string(1000 + run * 500); // microseconds
    char *argv[] = {const_cast<char *>(NIC_SIGEXIT_PROBE_PATH), const_cast<char *>(delay.c_str()),
                    nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    pid_t pid;
    ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv, envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    int status = 0;
    pid_t done = 0;
    for (int ms = 0; ms < 60000 && (done = waitpid(pid, &status, WNOHANG)) == 0; ms += 10)
      usleep(10000);
    if (done == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      hung++;
      break; // one is enough: the rest would each take the whole deadline
    }
    const std::string output = read_all(out);
    ASSERT_TRUE(WIFEXITED(status)) << "run " << run << ": signal " << WTERMSIG(status) << "\n"
                                   << output;
    EXPECT_EQ(WEXITSTATUS(status), 7) << "run " << run << "\n" << output;
    const std::string report = to_file ? read_all(dir.path + "/report") : output;
    EXPECT_EQ(count_lines(report, "nicmalloc report"), 1) << "run " << run << "\n" << output;
    EXPECT_EQ(count_lines(report, "  errors  "), 1) << "run " << run << "\n" << report;
  }
  EXPECT_EQ(hung, 0) << "a run was still running after 60 s, and killed";
}

} // namespace
