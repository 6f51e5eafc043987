// Resource limits the machine or the user imposes: an address-space limit (RLIMIT_AS) that
// leaves room for only some chunks or for none, a data limit (RLIMIT_DATA) under which a chunk
// maps but mimalloc cannot take it as an arena, a memory cgroup limit that a prefaulted chunk
// would cross (the kernel's answer to that is the OOM killer, so nicmalloc must look first), a
// memory-lock limit under which the io_uring backend cannot register a chunk, io_uring refused
// by a seccomp filter. Each must give the fallback or ENOMEM that NICMALLOC_ON_PIN_FAIL asks
// for, said once (a warning under fail, else with NICMALLOC_VERBOSE=1 only), never a crash or a
// line per request.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "probe_runner.h"
#include "vm_modes.h"

namespace {

// The chunks may take half of what an address-space limit leaves: under 1.5 GiB that is less
// than one chunk of 1 GiB.
const std::vector<std::string> kLargeSpan = {"NICMALLOC_CHUNK_SIZE=1G", "NICMALLOC_MAX_CHUNKS=16"};
const std::vector<std::string> kUnderLimit = {"as-limit-kib", "1572864", "dp-alloc", "1048576",
                                              "4096"};
const char kReserveLine[] = "address space for dataplane chunks";

// Each named value the probe printed, against what it should be.
void expect_values(const ProbeResult &r,
                   std::initializer_list<std::pair<const char *, long long>> want) {
  for (const auto &[name, value] : want)
    EXPECT_EQ(r.num(name), value) << name << "\n" << r.out;
}

std::vector<std::string> with(std::vector<std::string> env, const std::string &extra) {
  env.push_back(extra);
  return env;
}

// The fallback is no warning (most programs under ulimit -v never ask for dataplane memory): it
// is counted, and said once when verbose.
TEST(AddressSpaceLimit, RefusedReservationFallsBackAndSaysSoOnceWhenVerbose) {
  auto r = run_probe(
      with(with(kLargeSpan, "NICMALLOC_ON_PIN_FAIL=fallback"), "NICMALLOC_VERBOSE=1"), kUnderLimit);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("control_blocks"), 256);
  EXPECT_EQ(r.num("nulls"), 0);
  EXPECT_EQ(r.num("dp_fallbacks"), 256);
  EXPECT_EQ(r.num("chunks_max"), 0) << "no chunk could be reserved: " << r.out;
  EXPECT_EQ(count_lines(r.err, kReserveLine), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "use the control heap"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "warning"), 0) << r.err;
  // No control arena either: the check of mimalloc's page flags reads none, and says why.
  EXPECT_EQ(count_lines(r.err, "not laid out as in 2.0.9"), 0) << r.err;
  EXPECT_EQ(count_lines(r.err, "the control heap has no arena of its own"), 1) << r.err;
}

// Under 8 GiB, 16 chunks of 1 GiB would leave the program none of it: the range holds as many
// chunks as fit in half of what the limit leaves, and the program can map the other half.
TEST(AddressSpaceLimit, TheDataplaneTakesAtMostHalfOfWhatTheLimitLeaves) {
  auto r = run_probe(with(kLargeSpan, "NICMALLOC_VERBOSE=1"), {"as-limit", "8", "dp-room"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("dp"), 1) << r.out << r.err;
  const long long reserved = r.num("reserved_mib");
  // The room when the range was reserved: at the first request, or at start-up when taken then.
  const long long room = r.num("room_before_mib") + r.num("reserved_before_mib");
  EXPECT_EQ(r.num("reserved_before_mib"), 0) << "no request yet: " << r.out;
  EXPECT_GE(r.num("chunks_max"), 1) << r.out;
  EXPECT_LT(r.num("chunks_max"), 16) << r.out;
  EXPECT_EQ(reserved, r.num("chunks_max") * 1024) << r.out;
  EXPECT_LE(reserved, room / 2) << r.out;
  EXPECT_GT(reserved + 1024, room / 2) << r.out; // as many as fit
  EXPECT_GE(r.num("mappable_mib"), room / 2 - 128) << r.out;
  EXPECT_EQ(count_lines(r.err, "dataplane reserves address space for"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "warning"), 0) << r.err;
}

// Reserved at start-up, the range would take half of what the limit leaves from every program,
// most of which never ask for dataplane memory: under a limit it waits for the first request.
TEST(AddressSpaceLimit, AProgramThatAsksNoDataplaneMemoryKeepsItsRoom) {
  auto r = run_probe(kLargeSpan, {"as-limit", "8", "dp-room", "none"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("reserved_mib"), 0) << r.out;
  // Not reserved yet: as many as a reservation would take now, not NICMALLOC_MAX_CHUNKS.
  EXPECT_GE(r.num("chunks_max"), 1) << r.out;
  EXPECT_LT(r.num("chunks_max"), 16) << r.out;
  EXPECT_GE(r.num("mappable_mib"), r.num("room_before_mib") - 128) << r.out;
  EXPECT_GT(r.num("room_before_mib"), 6 * 1024) << r.out;
}

// Without /proc, VmSize cannot say what room a limit leaves: it is found by trying mappings, and
// the range takes at most half of it, as with /proc. It took what the kernel gave before, halving
// from NICMALLOC_MAX_CHUNKS, and left the program less to map than it took (4 GiB reserved, 3.8
// mappable, under 8 GiB).
TEST(AddressSpaceLimit, WithoutProcTheRoomIsFoundByTryingAndTheDataplaneTakesAtMostHalf) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to hide /proc in a mount namespace";
  // The settings through env(1): the shell keeps the last of two same-named variables, and the
  // suite's own environment comes after the test's.
  const std::string script = "mount -t tmpfs none /proc || exit 77; exec env "
                             "NICMALLOC_CHUNK_SIZE=1G NICMALLOC_MAX_CHUNKS=16 NICMALLOC_VERBOSE=1 "
                             "\"$0\" as-limit 8 dp-room";
  auto r = run_program("/usr/bin/unshare", {}, {"--mount", "sh", "-c", script, NIC_PROBE_PATH});
  if (r.exit_code == 77 || r.err.find("unshare failed") != std::string::npos)
    GTEST_SKIP() << "SKIPPED LOUDLY: no mount namespace could be made here: " << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("dp"), 1) << r.out << r.err;
  const long long reserved = r.num("reserved_mib"), mappable = r.num("mappable_mib");
  EXPECT_GE(r.num("chunks_max"), 1) << r.out;
  EXPECT_EQ(reserved, r.num("chunks_max") * 1024) << r.out;
  EXPECT_GE(mappable, reserved) << "the program keeps at least what the dataplane took" << r.out;
  EXPECT_GT(reserved + 1024, (reserved + mappable) / 2) << "as many as fit in half" << r.out;
  EXPECT_EQ(count_lines(r.err, "no more than half of that"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "warning"), 0) << r.err;
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

// A user's program (not root, RLIMIT_MEMLOCK 16 KiB) that leaves the backend to auto on a machine
// with no RDMA device: verbs, first in auto's order, is not loaded, so libibverbs does not tell
// the program's stderr that the limit "will severely limit memory registrations" for a backend
// nobody asked for. The backend picked is another (io_uring may be refused that limit too).
TEST(MemlockLimit, AutoLoadsNoRdmaLibraryWhereNoDeviceIsListed) {
  if (access("/sys/class/infiniband_verbs", F_OK) == 0)
    GTEST_SKIP() << "the kernel lists RDMA devices here: verbs is tried, and may warn";
  auto r = run_probe({"NICMALLOC_BACKEND=auto"}, {"user-auto-sga"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.num("setup_failed") != 0) GTEST_SKIP() << "cannot become a user here: " << r.out;
  EXPECT_EQ(r.num("init"), 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("libibverbs"), std::string::npos) << r.err;
}

// Under 8 GiB there is no room for the control arena either, and mimalloc maps a block over
// 1 GiB wherever the kernel likes, above the 20 TiB its map covers. The start-up line (verbose)
// says bad frees can then go unnoticed; good ones must still be taken, not reported and leaked.
TEST(AddressSpaceLimit, WithoutTheControlArenaBigBlocksCanBeReallocatedAndFreed) {
  auto r = run_probe({"NICMALLOC_VERBOSE=1"}, {"as-limit", "8", "big-block", "1100"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err, "cannot reserve address space for the control heap"), 1) << r.err;
  EXPECT_EQ(r.num("realloc_same"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "not allocated by nicmalloc"), 0) << r.err;
}

// A limit lowered while the program runs: the kernel counts the reserved, uncommitted arena
// against it, so the program can map nothing more. That cannot be undone; the first refused
// mapping says why, once, with the way out (setting the limit before start-up), and malloc goes
// on. (A limit set before an exec says nothing: RefusedReservation... above run under one.)
TEST(AddressSpaceLimit, AMappingRefusedUnderALimitLoweredWhileRunningSaysWhyOnce) {
  auto r = run_probe({}, {"as-limit-later", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("mmap_errno"), ENOMEM) << "the reservation counts: nothing more maps";
  EXPECT_EQ(r.num("small_malloc"), 1);
  EXPECT_EQ(count_lines(r.err, "RLIMIT_AS was lowered to 8192 MiB"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "before the program starts"), 1) << r.err;
}

// The same limit does not count a commit inside the control arena's reservation: malloc of a
// block over 16 MiB (a segment of its own, committed in the arena) goes on, as glibc's malloc
// of a fresh mapping within the limit does. The check before such a commit made a mapping of
// its size and took the limit's refusal of that mapping for the commit's.
TEST(AddressSpaceLimit, HugeBlocksUnderALimitLoweredWhileRunningAreCommittedInTheArena) {
  auto r = run_probe({}, {"as-limit-huge", "32", "17825792", "20971520", "104857600"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char *size : {"17825792", "20971520", "104857600"}) {
    EXPECT_EQ(r.num(std::string("got_") + size), 1) << size << "\n" << r.out << r.err;
    EXPECT_EQ(r.num(std::string("errno_") + size), 0) << size;
  }
}

// A limit above what the process maps says nothing.
TEST(AddressSpaceLimit, ALimitAboveTheReservationsSaysNothing) {
  auto r = run_probe({}, {"as-limit-later", "16384"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("mmap_errno"), 0);
  EXPECT_EQ(count_lines(r.err, "RLIMIT_AS"), 0) << r.err;
}

// mlockall(MCL_CURRENT) without CAP_IPC_LOCK: the kernel tests the whole mapped address space,
// nicmalloc's reserved arena included, against the limit, and refuses. The call's answer stays
// the kernel's; why is said once.
TEST(MemoryLockLimit, MlockallRefusedForTheReservedArenaSaysWhyOnce) {
  auto r = run_probe({}, {"mlockall-limited"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("mlockall_errno_0"), ENOMEM);
  EXPECT_EQ(r.num("mlockall_errno_1"), ENOMEM);
  EXPECT_EQ(count_lines(r.err, "mlockall(MCL_CURRENT) was refused"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "With CAP_IPC_LOCK"), 1) << r.err;
}

// Under 80 GiB the control arena is 64 GiB, which blocks never written can fill without using
// memory. Then mimalloc refuses even the small requests malloc's fast path takes: NULL and
// ENOMEM (the fast path does not keep the size to ask again: the general path would only ask
// mimalloc for the same block), and the heap goes on once blocks are freed.
TEST(AddressSpaceLimit, FullControlArenaGivesEnomemToSmallRequests) {
  auto r = run_probe({}, {"as-limit", "80", "fill-control"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Under vm.overcommit_memory=2 the commit limit ends it first, with the same answers.
  EXPECT_GT(r.num("blocks"), nic_strict_overcommit() ? 0 : 200) << r.out;
  expect_values(r, {{"small_null", 1},
                    {"small_errno", ENOMEM},
                    {"tiny_null", 1},
                    {"tiny_errno", ENOMEM},
                    {"calloc_null", 1},
                    {"calloc_errno", ENOMEM},
                    {"again", 1}});
}

// mimalloc 2.0.9 uses its arena's commit of a huge block's segment without looking at the
// answer: under a data limit (or vm.overcommit_memory=2's commit limit) a refused commit was a
// SIGSEGV inside malloc. Requests past the limit get NULL and ENOMEM, as under glibc's or
// mimalloc's own malloc; a failed realloc keeps its block; the heap goes on once blocks are freed.
TEST(DataLimit, HugeRequestsPastTheLimitGetEnomemNotASegfault) {
  auto r = run_probe({}, {"data-limit", "600", "huge-until-null", "20000000"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // 600 MiB less what start-up committed, in whole 32 MiB arena blocks: the data limit also
  // keeps fresh blocks at their size (no huge classes of the next power of two).
  EXPECT_GE(r.num("blocks"), 12) << r.out;
  expect_values(r, {{"null_errno", ENOMEM},
                    {"calloc_null", 1},
                    {"calloc_errno", ENOMEM},
                    {"realloc_null", 1},
                    {"realloc_errno", ENOMEM},
                    {"realloc_kept", 1},
                    {"again", 1}});
}

// Room taken between the check and mimalloc's commit (here every mprotect refused after
// start-up) cannot be given back to the request: the abort that stands in for mimalloc's SIGSEGV
// says why.
TEST(DataLimit, AnArenaCommitRefusedAfterTheCheckIsSaidBeforeTheAbort) {
  auto r = run_probe({}, {"refused-arena-commit", "20000000"});
  EXPECT_EQ(r.num("filtered"), 1) << r.out << r.err;
  EXPECT_EQ(r.exit_code, -SIGABRT) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err, "uses an arena commit without checking it"), 1) << r.err;
}

// A 1 GiB chunk maps under a 256 MiB data limit, but mimalloc's arena bookkeeping does not fit
// after it. Each try maps and prefaults the whole chunk, so it must not happen per request.
TEST(DataLimit, RefusedChunkIsNotTriedAgainOnEveryRequest) {
  auto r =
      run_probe(with(with(kLargeSpan, "NICMALLOC_ON_PIN_FAIL=fallback"), "NICMALLOC_VERBOSE=1"),
                {"data-limit", "256", "dp-alloc", "65536", "4096"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("control_blocks"), 16);
  EXPECT_EQ(r.num("chunks_created"), 0);
  EXPECT_EQ(count_lines(r.err, "refused dataplane chunk"), 1) << r.err;
}

// A child of this process's memory cgroup (v1, or v2 with the memory controller) with a limit,
// removed when the scope ends. path() is empty when none could be made.
// This process's memory cgroup directory: cgroup v1's memory hierarchy, else v2's; empty when
// neither is there.
struct OwnCgroup {
  std::string dir;
  bool v1 = false;
  const char *limit_file() const { return v1 ? "memory.limit_in_bytes" : "memory.max"; }
};
OwnCgroup own_memory_cgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, v1, v2;
  while (std::getline(in, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (("," + controllers + ",").find(",memory,") != std::string::npos)
      v1 = "/sys/fs/cgroup/memory" + path;
    else if (line.compare(0, 3, "0::") == 0)
      v2 = "/sys/fs/cgroup" + path;
  }
  return v1.empty() ? OwnCgroup{v2, false} : OwnCgroup{v1, true};
}

// Whether a memory limit applies at this process's cgroup or any above it (v1 writes no limit as
// a number from 2^62 up, v2 as "max").
bool memory_limit_above() {
  OwnCgroup own = own_memory_cgroup();
  const std::string top = own.v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
  for (std::string dir = own.dir; dir.size() >= top.size(); dir = dir.substr(0, dir.rfind('/'))) {
    std::ifstream in(dir + "/" + own.limit_file());
    std::string value;
    if (in >> value && value != "max" && std::stod(value) < 4.6e18) return true;
    if (dir == top) break;
  }
  return false;
}

class LimitedCgroup {
public:
  // limit: a number of bytes, or "none"
  explicit LimitedCgroup(const std::string &limit) {
    own_ = own_memory_cgroup();
    const std::string name = "/nic-limits-" + std::to_string(getpid());
    if (own_.dir.empty() || mkdir((own_.dir + name).c_str(), 0755) != 0) return;
    made_ = own_.dir + name;
    std::ofstream out(made_ + "/" + own_.limit_file());
    out << (limit != "none" ? limit : own_.v1 ? "-1" : "max") << "\n";
    out.flush();
    if (out) path_ = made_;
  }
  explicit LimitedCgroup(long long limit) : LimitedCgroup(std::to_string(limit)) {}
  ~LimitedCgroup() {
    if (!made_.empty() && rmdir(made_.c_str()) != 0)
      ADD_FAILURE() << "could not remove the test cgroup " << made_;
  }
  const std::string &path() const { return path_; }
  const char *limit_file() const { return own_.limit_file(); }

private:
  OwnCgroup own_;
  std::string made_, path_;
};

// A test cgroup named cg under this process's own, with the limit given; the test skips without
// root or without a memory cgroup hierarchy to make it in.
#define MAKE_CGROUP_OR_SKIP(cg, limit)                                                             \
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a memory cgroup; uid " << geteuid();     \
  LimitedCgroup cg(limit);                                                                         \
  if (cg.path().empty())                                                                           \
  GTEST_SKIP() << "SKIPPED LOUDLY: no memory cgroup could be made under this process's own "       \
                  "(neither cgroup v1's memory hierarchy nor v2 with the memory controller)"

// 160 MiB holds four 32 MiB chunks and the probe, not ten: the fifth or so must be refused
// with ENOMEM, not prefaulted into the OOM killer.
TEST(MemoryCgroup, ChunkPastTheLimitIsRefusedNotKilled) {
  MAKE_CGROUP_OR_SKIP(cg, 160ll << 20);
  auto r = run_probe(
      {"NICMALLOC_CHUNK_SIZE=32M", "NICMALLOC_PAGE_KIND=4k", "NICMALLOC_ON_PIN_FAIL=fail"},
      {"in-cgroup", cg.path(), "dp-alloc", std::to_string(320 << 20), "65536"});
  ASSERT_EQ(r.exit_code, 0) << "killed? " << r.out << r.err;
  EXPECT_GT(r.num("dp"), 0);
  EXPECT_GT(r.num("nulls"), 0);
  EXPECT_EQ(r.num("errno"), ENOMEM);
  EXPECT_LE(r.num("mapped"), 160ll << 20);
  EXPECT_EQ(count_lines(r.err, "memory cgroup's limit"), 1) << r.err;
}

// A 100 MiB block's claim needs 25 steps, and the cgroup has room for a few: mimalloc 2.0.9 would
// hand the block out with the commit of its claim refused, unbacked, to be faulted in past the
// limit by calloc's clearing or the program's writes (the OOM killer). It is refused instead.
TEST(MemoryCgroup, HugeBlockPastTheLimitIsRefusedNotKilled) {
  MAKE_CGROUP_OR_SKIP(cg, 64ll << 20);
  for (const char *mode : {"malloc", "calloc"}) {
    SCOPED_TRACE(mode);
    auto r = run_probe(
        {"NICMALLOC_CHUNK_SIZE=256M", "NICMALLOC_PIN_STEP=4M", "NICMALLOC_PAGE_KIND=4k",
         "NICMALLOC_ON_PIN_FAIL=fail"},
        {"in-cgroup", cg.path(), "pin-refused", "0", std::to_string(100 << 20), "2", mode});
    ASSERT_EQ(r.exit_code, 0) << "killed? " << r.out << r.err;
    EXPECT_EQ(r.num("got"), 0);
    EXPECT_EQ(r.num("errno"), ENOMEM);
    EXPECT_EQ(r.num("dp_failures"), 2);
    EXPECT_EQ(r.num("in_segments"), 32ll << 20);
    EXPECT_EQ(count_lines(r.err, "memory cgroup's limit"), 1) << r.err;
    EXPECT_EQ(count_lines(r.err, "nicmalloc: warning"), 1) << r.err;
  }
}

// Where no memory limit applies (most machines), a look that found none stands for a second:
// backing steps fast (large blocks freed and allocated again) spent a seventh of its time reading
// the cgroup files of every level for each step, twice.
TEST(MemoryCgroup, StepsBackedWhereNoLimitAppliesDoNotReadTheCgroupFilesEachTime) {
  if (memory_limit_above())
    GTEST_SKIP() << "SKIPPED LOUDLY: a memory limit applies to this process's cgroup, so every "
                    "step looks again";
  auto r = run_probe({"NICMALLOC_PIN_STEP=4M", "NICMALLOC_PAGE_KIND=4k"},
                     {"step-reads", "16", std::to_string(8 << 20)});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_GE(r.num("steps"), 32);
  EXPECT_LT(r.num("reads"), 16) << "read calls for " << r.num("steps") << " steps backed";
}

// The probe moves into cg (no limit yet), backs its first dataplane step, sets a 64 MiB limit,
// waits wait_ms and asks for a 100 MiB block under fail: it must be refused, not faulted in past
// the limit (the OOM killer). populate: NICMALLOC_DP_POPULATE.
void expect_later_limit_held(const LimitedCgroup &cg, const char *populate, const char *wait_ms) {
  auto r =
      run_probe({"NICMALLOC_CHUNK_SIZE=256M", "NICMALLOC_PIN_STEP=4M", "NICMALLOC_PAGE_KIND=4k",
                 "NICMALLOC_ON_PIN_FAIL=fail", std::string("NICMALLOC_DP_POPULATE=") + populate},
                {"limit-later", cg.path(), cg.limit_file(), std::to_string(64 << 20),
                 std::to_string(100 << 20), wait_ms});
  ASSERT_EQ(r.exit_code, 0) << "killed? " << r.out << r.err;
  EXPECT_EQ(r.num("first_dp"), 1);
  EXPECT_EQ(r.num("got"), 0);
  EXPECT_EQ(r.num("errno"), ENOMEM);
  EXPECT_EQ(count_lines(r.err, "memory cgroup's limit"), 1) << r.err;
}

// ... and a limit set after such a look is held to once the second is over by steps locked as
// touched.
TEST(MemoryCgroup, ALimitSetWhileTheProcessRunsIsHeldToASecondLater) {
  MAKE_CGROUP_OR_SKIP(cg, "none");
  expect_later_limit_held(cg, "register", "1100");
}

// Steps faulted in whole (NICMALLOC_DP_POPULATE=commit) always look again: a prefault past a
// limit wakes the OOM killer, so the limit set just now is held to at once.
TEST(MemoryCgroup, ALimitSetWhileTheProcessRunsIsHeldToAtOnceForPrefaultedSteps) {
  MAKE_CGROUP_OR_SKIP(cg, "none");
  expect_later_limit_held(cg, "commit", "0");
}

// Without CAP_IPC_LOCK and with 64 KiB of RLIMIT_MEMLOCK, io_uring cannot pin a chunk as a fixed
// buffer. Each entry in it gets the error; the backend is not asked again for each one, and
// the cause is told once.
TEST(MemlockLimit, RefusedChunkRegistrationIsToldOnceNotPerEntry) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop CAP_IPC_LOCK; uid " << geteuid();
  auto r = run_probe({"NICMALLOC_BACKEND=uring", "NICMALLOC_PAGE_KIND=4k"},
                     {"low-memlock-register", "50", "4096"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.values["backend"] != "uring")
    GTEST_SKIP() << "SKIPPED LOUDLY: io_uring cannot run here (backend " << r.values["backend"]
                 << ")";
  EXPECT_EQ(r.num("register_failures"), 50);
  EXPECT_EQ(r.num("first_rc"), -ENOMEM);
  EXPECT_EQ(count_lines(r.err, "cannot register dataplane chunk"), 1) << r.err;
  EXPECT_LE(count_lines(r.err, "io_uring cannot pin"), 1) << r.err;
}

// A registration io_uring refuses for want of pinnable memory takes room from the cache's idle
// regions, but not for one larger than RLIMIT_MEMLOCK itself: no eviction lets that in, and the
// cache would be emptied for nothing (each region a miss again after).
TEST(MemlockLimit, RegistrationOverTheLimitEvictsNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop CAP_IPC_LOCK; uid " << geteuid();
  auto r = run_probe({"NICMALLOC_BACKEND=uring"},
                     {"memlock-rcache", "8388608", "8", "262144", "33554432"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.values["backend"] != "uring")
    GTEST_SKIP() << "SKIPPED LOUDLY: io_uring cannot run here (backend " << r.values["backend"]
                 << ")";
  EXPECT_EQ(r.num("small_failures"), 0) << r.err;
  EXPECT_EQ(r.num("big_rc"), -ENOMEM);
  EXPECT_EQ(r.num("regions_before"), 8);
  EXPECT_EQ(r.num("regions_after"), 8);
  EXPECT_EQ(r.num("evictions"), 0);
  EXPECT_EQ(r.num("hits_again"), 8);
}

// One that fits the limit once idle regions let go of their pins gets in: as many are evicted
// as it needs (6 MiB cached and idle, 4 MiB asked for, 8 MiB of limit), not all of them.
TEST(MemlockLimit, RegistrationThatFitsOnceIdleRegionsGoEvictsWhatItNeeds) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop CAP_IPC_LOCK; uid " << geteuid();
  auto r = run_probe({"NICMALLOC_BACKEND=uring"},
                     {"memlock-rcache", "8388608", "6", "1048576", "4194304"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.values["backend"] != "uring")
    GTEST_SKIP() << "SKIPPED LOUDLY: io_uring cannot run here (backend " << r.values["backend"]
                 << ")";
  EXPECT_EQ(r.num("small_failures"), 0) << r.err;
  EXPECT_EQ(r.num("big_rc"), 0) << r.err;
  EXPECT_EQ(r.num("regions_before"), 6);
  EXPECT_GE(r.num("evictions"), 1);
  EXPECT_LE(r.num("evictions"), 5);
}

// The step cannot be registered (8 MiB of RLIMIT_MEMLOCK, 32 MiB steps, io_uring), so its
// entries are copied, as nic_sga_add promises; the bounce slab must then not come from that same
// chunk, or the copy cannot be registered either.
TEST(MemlockLimit, EntryOfAnUnregistrableChunkIsCopied) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop CAP_IPC_LOCK; uid " << geteuid();
  auto r = run_probe({"NICMALLOC_BACKEND=uring", "NICMALLOC_PAGE_KIND=4k",
                      "NICMALLOC_CHUNK_SIZE=64M", "NICMALLOC_PIN_STEP=32M"},
                     {"low-memlock-sga", "8192", "4096"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.values["backend"] != "uring")
    GTEST_SKIP() << "SKIPPED LOUDLY: io_uring cannot run here (backend " << r.values["backend"]
                 << ")";
  EXPECT_EQ(r.num("add_rc"), 0) << r.err;
  EXPECT_EQ(r.num("copied"), 1);
  EXPECT_EQ(count_lines(r.err, "cannot be resolved"), 0) << r.err;
}

// The default step fits the usual non-root RLIMIT_MEMLOCK of 8 MiB: the same entry goes to the
// NIC in place, registered with io_uring, not copied.
TEST(MemlockLimit, UnderTheUsualEightMebibyteLimitTheDefaultStepIsRegistered) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop CAP_IPC_LOCK; uid " << geteuid();
  auto r =
      run_probe({"NICMALLOC_BACKEND=uring", "NICMALLOC_PAGE_KIND=4k", "NICMALLOC_CHUNK_SIZE=64M"},
                {"low-memlock-sga", "8192", "4096"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.values["backend"] != "uring")
    GTEST_SKIP() << "SKIPPED LOUDLY: io_uring cannot run here (backend " << r.values["backend"]
                 << ")";
  EXPECT_EQ(r.num("add_rc"), 0) << r.err;
  EXPECT_EQ(r.num("copied"), 0) << r.err;
}

// MADV_POPULATE_WRITE failing with ENOMEM means the memory cannot be had: touching the pages
// one by one instead would end in the OOM killer (or a SIGBUS, or a wait forever in a cgroup
// whose OOM killer is off). The chunk must be refused, with the policy's fallback.
TEST(PrefaultFailure, RefusesTheChunkInsteadOfTouchingIt) {
  auto r = run_probe({"NICMALLOC_CHUNK_SIZE=64M", "NICMALLOC_PAGE_KIND=4k",
                      "NICMALLOC_ON_PIN_FAIL=fallback", "NICMALLOC_VERBOSE=1",
                      "NICMALLOC_DP_POPULATE=commit"},
                     {"no-populate", "dp-alloc", "1048576", "4096"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("chunks_created"), 0);
  EXPECT_EQ(r.num("control_blocks"), 256);
  EXPECT_EQ(count_lines(r.err, "cannot back dataplane chunk 0 step 0"), 1) << r.err;
}

// A step locked as it is touched is faulted in whole before its first registration; when the
// kernel will not (the memory cannot be had) the registration is refused, once said, and the
// block keeps its bytes, instead of a NIC meeting missing pages.
TEST(PrefaultFailure, ARegistrationWhoseStepCannotBeFaultedInIsRefused) {
  auto r = run_probe({"NICMALLOC_CHUNK_SIZE=64M", "NICMALLOC_PAGE_KIND=4k", "NICMALLOC_BACKEND=sim",
                      "NICMALLOC_ON_PIN_FAIL=fallback", "NICMALLOC_VERBOSE=1"},
                     {"no-populate", "dp-register", "65536"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("dp"), 1) << "a step locked as touched needs no fault-in to be backed";
  EXPECT_NE(r.num("register_rc"), 0) << r.out;
  EXPECT_EQ(r.num("intact"), 1);
  EXPECT_EQ(count_lines(r.err, "cannot fault in dataplane chunk 0 step 0 before its registration"),
            1)
      << r.err;
}

// With io_uring_setup refused (ENOSYS, as a container's seccomp profile does), auto quietly
// takes the next backend; an explicit uring says once that it could not start, and the
// endpoint's error must not tell the user to set what is set already.
TEST(NoUring, AutoChoosesAnotherBackendQuietly) {
  auto r = run_probe({"NICMALLOC_BACKEND=auto"}, {"no-uring", "uring-endpoint"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.values["backend"], "uring");
  EXPECT_EQ(r.num("endpoint"), 0);
  EXPECT_EQ(r.num("errno"), ENODEV);
  EXPECT_EQ(count_lines(r.err, "warning"), 0) << r.err;
}

TEST(NoUring, ExplicitUringSaysItCouldNotStart) {
  auto r = run_probe({"NICMALLOC_BACKEND=uring"}, {"no-uring", "uring-endpoint"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.values["backend"], "uring");
  EXPECT_EQ(r.num("errno"), ENODEV);
  EXPECT_EQ(count_lines(r.err, "backend uring cannot run here (Function not implemented)"), 1)
      << r.err;
  EXPECT_EQ(count_lines(r.err, "NICMALLOC_BACKEND=uring is set but could not start here"), 1)
      << r.err;
  EXPECT_EQ(count_lines(r.err, "(set NICMALLOC_BACKEND=uring)"), 0) << r.err;
}

// EAL refusing its arguments answers EINVAL: that is dpdk failing to start, not a bad
// NICMALLOC_BACKEND value.
TEST(BackendChoice, ADpdkThatCannotStartIsNotCalledAnInvalidName) {
  auto r = run_probe({"NICMALLOC_BACKEND=dpdk", "NICMALLOC_DPDK_EAL_ARGS=--no-such-eal-option"},
                     {"uring-endpoint"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.values["backend"], "dpdk");
  EXPECT_EQ(count_lines(r.err, "NICMALLOC_BACKEND=dpdk:"), 0) << r.err;
  EXPECT_EQ(count_lines(r.err, "backend dpdk cannot run here (Invalid argument)"), 1) << r.err;
  auto bad = run_probe({"NICMALLOC_BACKEND=dpkd"}, {"uring-endpoint"});
  EXPECT_EQ(
      count_lines(bad.err,
                  "NICMALLOC_BACKEND=dpkd: expected auto, sim, uring, verbs or dpdk; using auto"),
      1)
      << bad.err;
}

} // namespace
