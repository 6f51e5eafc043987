// nicmalloc as a guest in other people's processes: it adds no descriptor a program can see, and
// keeps its lines out of the files a program puts on fd 2.
#include "nicmalloc.h"
#include "probe_runner.h"

#include <gtest/gtest.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

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

// The backend plugins log through the host (regcache/cache/plugin_host.h): a plugin's line goes
// where nicmalloc's own go, so it too stays out of a file the program opened on fd 2. The dpdk
// plugin runs here on a net_null port and says which port it uses when verbose.
TEST(Guest, PluginLinesGoWhereTheHostsGo) {
  if (access(NIC_DPDK_PLUGIN_PATH, R_OK)) GTEST_SKIP() << "the dpdk plugin is not built here";
  const std::vector<std::string> env = {"NICMALLOC_BACKEND=dpdk", "NICMALLOC_DPDK_VDEV=net_null0",
                                        "NICMALLOC_VERBOSE=1"};
  auto said = run_probe(env, {"open-backend"});
  ASSERT_EQ(said.exit_code, 0) << said.out << said.err;
  ASSERT_EQ(said.values["backend"], "dpdk") << said.out << said.err;
  EXPECT_EQ(count_lines(said.err, "nicmalloc: dpdk backend on port"), 1) << said.err;

  char path[] = "/tmp/nicmalloc-guest-plugin-fd2-XXXXXX";
  const int made = mkstemp(path);
  ASSERT_GE(made, 0);
  close(made);
  auto r = run_probe(env, {"stderr-reused", path, "open-backend"});
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(path);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("file_fd"), 2) << r.out;
  ASSERT_EQ(r.values["backend"], "dpdk") << r.out;
  EXPECT_EQ(content, "data\n");
  EXPECT_EQ(r.err, "");
  EXPECT_GE(r.num("dropped"), 2) << "the free() error and the plugin's line";
}

// Runs `nic_probe open-backend <what>` under each backend (dpdk on a net_null port) and hands
// the result of each that opened here to check; one that did not is skipped, saying why.
static void
ForEachOpenedBackend(const std::string &what,
                     const std::function<void(const std::string &, ProbeResult &)> &check) {
  for (const std::string backend : {"sim", "uring", "dpdk"}) {
    SCOPED_TRACE(backend);
    if (backend == "dpdk" && access(NIC_DPDK_PLUGIN_PATH, R_OK)) {
      std::printf("[ SKIPPED  ] the dpdk plugin is not built here\n");
      continue;
    }
    auto r = run_probe({"NICMALLOC_BACKEND=" + backend, "NICMALLOC_DPDK_VDEV=net_null0"},
                       {"open-backend", what});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    if (r.values["backend"] != backend) {
      std::printf("[ SKIPPED  ] %s does not open here: %s\n", backend.c_str(), r.err.c_str());
      continue;
    }
    check(backend, r);
  }
}

// nic_event_fd and nic_wait in a program that opened no backend are -ENODEV, as documented, and
// none of the three opens one: they started the default one (io_uring's ring and thread, DPDK's
// EAL), and nic_wait(-1) then blocked for good with nothing to wait for. nic_thread_event_fd
// hands out the thread's descriptor, which answers its asks with no backend.
TEST(Guest, WaitingWithNoBackendOpenOpensNone) {
  for (const std::string backend : {"sim", "uring", "dpdk"}) {
    SCOPED_TRACE(backend);
    auto r = run_probe({"NICMALLOC_BACKEND=" + backend, "NICMALLOC_DPDK_VDEV=net_null0"},
                       {"wait-unopened"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.num("event_fd"), -ENODEV) << r.out;
    EXPECT_GE(r.num("thread_event_fd"), 0) << r.out;
    EXPECT_EQ(r.num("wait"), -ENODEV) << r.out;
    EXPECT_EQ(r.values["backend_after"], "none") << r.out << r.err;
    EXPECT_EQ(r.num("other_api_errors"), 2) << r.out;
    EXPECT_EQ(count_lines(r.err, "no backend is open"), 2) << "one line per entry point: " << r.err;
  }
}

// What a backend's open leaves open is close-on-exec: DPDK 22.11's EAL kept its memory's memfd
// (the dataplane's packet buffers), its interrupt pipe, timerfd and epoll set inheritable, so every
// program the process execed got them (5 descriptors here without the fix).
TEST(Guest, ABackendsDescriptorsAreNotPassedToExecedPrograms) {
  ForEachOpenedBackend("fds", [](const std::string &backend, ProbeResult &r) {
    EXPECT_EQ(r.num("fds_inheritable"), 0) << r.out;
    if (backend == "dpdk") {
      EXPECT_GE(r.num("fds_added"), 3) << "nothing tested: " << r.out;
    }
  });
}

// A child of fork never uses the parent's backend (README, fork), so it keeps none of the
// descriptors the backend and nic_event_fd opened: without the fix it kept the sim's
// /proc/<parent>/mem, io_uring's ring and eventfds, DPDK's memfd, pipe, timerfd and epoll set,
// and the event set. Nor does it keep the ring's mappings, each of which holds the ring as its
// descriptor does: with them, the parent's io_uring instance and the steps it registered stayed
// pinned for as long as any child lived (2 mappings without the fix). The parent's backend goes
// on registering.
TEST(Guest, AChildOfForkKeepsNoneOfTheParentsBackendDescriptors) {
  ForEachOpenedBackend("fork-fds", [](const std::string &, ProbeResult &r) {
    EXPECT_EQ(r.num("child_fds_kept"), 0) << r.out;
    EXPECT_EQ(r.num("child_ring_mappings"), 0) << r.out;
    EXPECT_EQ(r.num("parent_register"), 0) << r.out << r.err;
    EXPECT_GE(r.num("fds_added"), 2) << "nothing tested: " << r.out;
  });
}

// DPDK 22.11 has 128 memseg lists and each extmem area takes one; the plugin keeps 64. With an
// area per registration only 64 dataplane steps (256 MiB at the default 4 MiB step) reached the
// port at once. With only virtual ports in IOVA-as-VA mode one area covers the dataplane range
// and each step is a registration inside it: 80 steps register and are sent. Memory outside
// the range (registration-cache regions) still takes an area each, and the cache keeps a
// quarter of the 64 for the steps: past 48 held regions they are refused, and why is said once.
TEST(Guest, DpdkRegistersDataplaneStepsPastItsExtmemAreas) {
  if (access(NIC_DPDK_PLUGIN_PATH, R_OK)) GTEST_SKIP() << "the dpdk plugin is not built here";
  const std::vector<std::string> env = {"NICMALLOC_CHUNK_SIZE=1G", "NICMALLOC_BACKEND=dpdk",
                                        "NICMALLOC_DPDK_VDEV=net_null0"};
  auto r = run_probe(env, {"register-blocks", "80", "4194304", "post"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.values["backend"] != "dpdk") GTEST_SKIP() << "DPDK does not open here: " << r.err;
  EXPECT_EQ(r.num("registered"), 80) << r.out << r.err;
  EXPECT_EQ(r.num("sent"), 80) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err, "are in use"), 0) << r.err;
  auto c = run_probe(env, {"register-blocks", "80", "65536", "control"});
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  EXPECT_EQ(c.num("registered"), 48) << c.out;
  EXPECT_EQ(c.num("first_error"), -ENOSPC) << c.out;
  EXPECT_EQ(count_lines(c.err, "no room for another registration"), 1) << c.err;
}

// A backend's own blocks are bookkeeping, never dataplane memory, whatever
// NICMALLOC_DP_MIN_SIZE routes there: the dynamic loader's and DPDK's EAL's blocks from the
// plugin's open were (1.7 MB of them at 1 KiB). What is left is the TLS of EAL's interrupt
// thread (4.5 KB), a thread of DPDK's own whose blocks follow the program's routing.
TEST(Guest, ABackendsOpenLeavesNoBlockInDataplaneMemory) {
  for (const std::string backend : {"sim", "uring", "dpdk"}) {
    SCOPED_TRACE(backend);
    auto r = run_probe({"NICMALLOC_BACKEND=" + backend, "NICMALLOC_DPDK_VDEV=net_null0",
                        "NICMALLOC_DP_MIN_SIZE=1024"},
                       {"open-backend"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    if (r.values["backend"] != backend) {
      std::printf("[ SKIPPED  ] %s does not open here: %s\n", backend.c_str(), r.err.c_str());
      continue;
    }
    EXPECT_LT(r.num("open_dataplane_live"), backend == "dpdk" ? 65536 : 1) << r.out;
  }
}

// The threads a backend starts take none of the program's signals. DPDK's EAL started its
// interrupt thread with the opening thread's mask, all open: the program's SIGTERM could land
// there (a program that takes its signals with sigwait, blocked in its own threads, was ended by
// it), and handlers ran on DPDK's thread.
TEST(Guest, ABackendsThreadsTakeNoneOfTheProgramsSignals) {
  ForEachOpenedBackend("signals", [](const std::string &, ProbeResult &r) {
    EXPECT_EQ(r.num("threads_taking_sigterm"), 0) << r.out;
  });
}

// mimalloc reads its own settings as it loads, before nicmalloc starts: MIMALLOC_RESERVE_OS_MEMORY
// made it reserve an arena its default heap used first. Over 1 GiB (which mimalloc maps without
// its address hint) that arena lies above 20 TiB, and every free of the program was refused there
// ("not allocated by nicmalloc"); below, blocks sat outside the control arena's checks. With a
// preloaded library that brings libstdc++ in (libubsan does), libstdc++'s start allocates before
// mimalloc's: nicmalloc started first and looked before mimalloc had reserved anything, and the
// reservation then stayed writable and unsaid.
TEST(Guest, MimallocsOwnReservationDoesNotTakeTheProgramsBlocks) {
  auto plain = run_probe({}, {"mixed-frees"});
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  EXPECT_EQ(plain.err, "");
  const std::string early = std::string("LD_PRELOAD=") + NIC_CXX_PRELOAD_PATH;
  const std::vector<std::vector<std::string>> runs = {{"MIMALLOC_RESERVE_OS_MEMORY=2G"},
                                                      {"MIMALLOC_RESERVE_OS_MEMORY=96M"},
                                                      {"MIMALLOC_RESERVE_OS_MEMORY=2G", early}};
  for (const auto &env : runs) {
    const std::string &reserve = env[0];
    SCOPED_TRACE(env.size() > 1 ? reserve + " " + early : reserve);
    auto r = run_probe(env, {"mixed-frees"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.num("invalid_frees"), 0) << r.err;
    EXPECT_EQ(r.num("double_frees"), 0);
    EXPECT_EQ(r.num("above_20tib"), 0) << "blocks in mimalloc's own arena";
    // Its pages are kept without access: under vm.overcommit_memory=2 mimalloc commits (and the
    // kernel charges) its reservation, which nicmalloc gives back (2 GiB charged before, 8 MiB
    // after, measured with /proc/self/smaps' "ac" flag). Below 1 GiB mimalloc's hint puts the
    // arena under 20 TiB, where its blocks are recognised, and part of it may serve.
    if (reserve.find("2G") != std::string::npos) {
      EXPECT_LT(r.num("first_arena_writable"), 16 << 20) << r.out;
    }
    EXPECT_EQ(count_lines(r.err, "nicmalloc"), 1) << r.err;
    EXPECT_EQ(count_lines(r.err, "MIMALLOC_RESERVE_OS_MEMORY"), 1) << r.err;
  }
}

// Fallbacks the user did not ask to avoid (no hugetlb pool, no address space, no memlock) are
// counted in the stats and said with NICMALLOC_VERBOSE=1, never on stderr by default: programs
// that merge a child's stderr (cmake) or compare it (test suites) must not notice nicmalloc.
struct Start {
  const char *name;
  std::vector<std::string> env, args;
};

// The suites run with 64 MiB chunks; under ulimit -v the default 1 GiB ones are what a program
// meets. The chunks may take half of what the limit leaves: under about 1.4 GiB not one (the
// reservation is refused, nothing is mapped, so that is cheap); under about 3.8 GiB one.
const std::string kDefaultChunks = "NICMALLOC_CHUNK_SIZE=1G";
const std::vector<std::string> kUlimitV = {"as-limit-kib", "1500000", "guest-start"};
const std::vector<std::string> kUlimitVRoomForOne = {"as-limit-kib", "4000000", "guest-start"};

const std::vector<Start> kStarts = {
    {"default", {}, {"guest-start"}},
    {"dp", {"NICMALLOC_DP_MIN_SIZE=1024"}, {"guest-start"}},
    {"ulimit -v", {kDefaultChunks}, kUlimitV},
    {"ulimit -v, dp", {kDefaultChunks, "NICMALLOC_DP_MIN_SIZE=1024"}, kUlimitV},
    {"ulimit -v with room for a chunk, dp",
     {kDefaultChunks, "NICMALLOC_DP_MIN_SIZE=1024"},
     kUlimitVRoomForOne},
    {"memlock", {}, {"low-memlock-guest"}},
    {"memlock, dp", {"NICMALLOC_DP_MIN_SIZE=1024"}, {"low-memlock-guest"}},
};

TEST(Guest, StartUpPrintsNothing) {
  for (const auto &start : kStarts) {
    auto r = run_probe(start.env, start.args);
    ASSERT_EQ(r.exit_code, 0) << start.name << "\n" << r.out << r.err;
    EXPECT_EQ(r.err, "") << start.name;
  }
}

TEST(Guest, FallbacksAreCountedAndSaidWhenVerbose) {
  const std::string dp = "NICMALLOC_DP_MIN_SIZE=1024";
  auto limited = run_probe({kDefaultChunks, dp}, kUlimitV);
  ASSERT_EQ(limited.exit_code, 0) << limited.err;
  EXPECT_GE(limited.num("vspace_refusals"), 2) << "the control arena's and the dataplane span's";
  EXPECT_GT(limited.num("dp_fallbacks"), 0);
  auto said = run_probe({kDefaultChunks, dp, "NICMALLOC_VERBOSE=1"}, kUlimitV);
  EXPECT_EQ(count_lines(said.err, "cannot reserve address space for the control heap"), 1)
      << said.err;
  EXPECT_EQ(count_lines(said.err, "address space for dataplane chunks"), 1) << said.err;
  EXPECT_EQ(count_lines(said.err, "warning"), 0) << said.err;

  auto unpinned = run_probe({dp, "NICMALLOC_VERBOSE=1"}, {"low-memlock-guest"});
  ASSERT_EQ(unpinned.exit_code, 0) << unpinned.err;
  EXPECT_GE(unpinned.num("pin_failures"), 1);
  EXPECT_EQ(count_lines(unpinned.err, "cannot lock dataplane chunk"), 1) << unpinned.err;
  // Without a hugetlb pool the chunk gets smaller pages; said once, counted for each chunk.
  EXPECT_EQ(count_lines(unpinned.err, "pages, not"), unpinned.num("page_fallbacks") ? 1 : 0)
      << unpinned.err;
  EXPECT_EQ(count_lines(unpinned.err, "warning"), 0) << unpinned.err;
}

// A 1 GiB page cannot back a smaller step: naming 1g takes 1 GiB steps, unless the step is
// named too (then the pages fall back, with the warning above).
TEST(Guest, OneGigabytePagesTakeOneGigabyteSteps) {
  auto named = run_probe({"NICMALLOC_PAGE_KIND=1g", "NICMALLOC_CHUNK_SIZE=1G"},
                         {"dp-alloc", "4096", "4096"});
  ASSERT_EQ(named.exit_code, 0) << named.err;
  EXPECT_EQ(named.num("pin_step"), 1ll << 30);
  auto both =
      run_probe({"NICMALLOC_PAGE_KIND=1g", "NICMALLOC_PIN_STEP=64M", "NICMALLOC_CHUNK_SIZE=1G"},
                {"dp-alloc", "4096", "4096"});
  ASSERT_EQ(both.exit_code, 0) << both.err;
  EXPECT_EQ(both.num("pin_step"), 64ll << 20);
  auto smaller = run_probe({"NICMALLOC_PAGE_KIND=1g", "NICMALLOC_CHUNK_SIZE=256M"},
                           {"dp-alloc", "4096", "4096"});
  ASSERT_EQ(smaller.exit_code, 0) << smaller.err;
  EXPECT_EQ(smaller.num("pin_step"), 256ll << 20);
}

// Where the user's explicit setting is refused, it is a warning, once.
TEST(Guest, RefusingAnExplicitSettingWarnsOnce) {
  auto r = run_probe({"NICMALLOC_DP_MIN_SIZE=1024", "NICMALLOC_ON_PIN_FAIL=fail"},
                     {"low-memlock-guest"});
  EXPECT_EQ(count_lines(r.err, "warning: cannot lock dataplane chunk"), 1) << r.err;
  auto big = run_probe({"NICMALLOC_PAGE_KIND=1g", "NICMALLOC_CHUNK_SIZE=1G"},
                       {"dp-alloc", "4096", "4096"});
  ASSERT_EQ(big.exit_code, 0) << big.err;
  EXPECT_EQ(count_lines(big.err, "warning: dataplane chunk 0 step 0 is backed by"),
            big.values["page_kind"] == "1g" ? 0 : 1)
      << big.err;
}

// An error the API returns is the caller's to handle: a program that gets it in a loop must not
// fill stderr. Each kind is said once; nic_get_stats counts every call.
TEST(Guest, AnApiErrorIsSaidOnceAndCountedEveryTime) {
  constexpr unsigned kCalls = 1000;
  int on_stack = 0;
  nic_sga raw = {};
  char *block = static_cast<char *>(malloc(64));
  nic_stats before = NIC_STATS_INIT;
  nic_get_stats(&before);
  testing::internal::CaptureStderr();
  for (unsigned i = 0; i < kCalls; i++) {
    EXPECT_EQ(nic_hold(&on_stack), -EINVAL);
    EXPECT_EQ(nic_release(&on_stack), -NIC_ENOHOLD);
    EXPECT_EQ(nic_sga_add(&raw, block, 64), -EINVAL);
    EXPECT_EQ(nic_register(block, 64, NIC_REG_LOCAL, nullptr), -EINVAL);
    EXPECT_EQ(nic_fence_write(block, 0), -NIC_ERANGE);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  nic_stats after = NIC_STATS_INIT;
  nic_get_stats(&after);
  free(block);
  EXPECT_EQ(count_lines(err, "error: nic_hold("), 1) << err;
  EXPECT_EQ(count_lines(err, "nic_release("), 1) << err;
  EXPECT_EQ(count_lines(err, "nic_sga_add("), 1) << err;
  EXPECT_EQ(count_lines(err, "nic_register("), 1) << err;
  EXPECT_EQ(count_lines(err, "nic_fence_write("), 1) << err;
  EXPECT_EQ(count_lines(err, "nicmalloc:"), 5) << err;
  EXPECT_EQ(after.hold_errors - before.hold_errors, 2 * kCalls);
  EXPECT_EQ(after.sga_errors - before.sga_errors, kCalls);
  EXPECT_EQ(after.registration_errors - before.registration_errors, kCalls);
  EXPECT_EQ(after.other_api_errors - before.other_api_errors, kCalls);
}

// The report shows the counts.
TEST(Guest, TheReportShowsApiErrors) {
  nic_stats before = NIC_STATS_INIT; // the suite's other tests in this process count errors too
  ASSERT_EQ(nic_get_stats(&before), 0);
  nic_sga raw = {};
  int on_stack = 0;
  testing::internal::CaptureStderr();
  nic_sga_add(&raw, &on_stack, 4);
  nic_sga_add(&raw, &on_stack, 4);
  testing::internal::GetCapturedStderr();
  char path[] = "/tmp/nicmalloc-guest-report-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  nic_print_stats(fd);
  close(fd);
  std::ifstream in(path);
  std::string report((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(path);
  const std::string said =
      "calls that returned an error: " + std::to_string(before.sga_errors + 2) + " sga, ";
  EXPECT_EQ(count_lines(report, said), 1) << report;
}

} // namespace
