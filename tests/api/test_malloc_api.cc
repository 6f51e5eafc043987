// The standard malloc family and operator new/delete, as a program linked with -lnicmalloc sees
// them.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "nicmalloc.h"
#include "probe_runner.h"
#include "refuse_syscall.h"

namespace {

bool filled_with(const void *p, int byte, size_t n) {
  const unsigned char *c = static_cast<const unsigned char *>(p);
  for (size_t i = 0; i < n; i++)
    if (c[i] != byte) return false;
  return true;
}

TEST(MallocApi, MallocReturnsWritableControlMemory) {
  for (size_t size : {0ul, 1ul, 8ul, 15ul, 16ul, 100ul, 4096ul, 1ul << 20, 40ul << 20}) {
    void *p = malloc(size);
    ASSERT_NE(p, nullptr) << size;
    EXPECT_FALSE(nic_is_dataplane(p)) << "outside a scope malloc is control";
    EXPECT_GE(malloc_usable_size(p), size);
    memset(p, 0xab, size);
    free(p);
  }
}

TEST(MallocApi, CallocZeroesReusedMemory) {
  // Dirty blocks first, so calloc must really clear recycled memory (including the word where
  // nicmalloc keeps its free key).
  for (int round = 0; round < 3; round++) {
    void *dirty[64];
    for (auto &d : dirty) {
      d = malloc(256);
      memset(d, 0xff, 256);
    }
    for (auto &d : dirty)
      free(d);
    for (int i = 0; i < 64; i++) {
      void *p = calloc(16, 16);
      ASSERT_NE(p, nullptr);
      EXPECT_TRUE(filled_with(p, 0, 256));
      free(p);
    }
  }
}

TEST(MallocApi, CallocAndReallocarrayRejectOverflow) {
  errno = 0;
  EXPECT_EQ(calloc(SIZE_MAX / 2, 4), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  void *p = malloc(8);
  errno = 0;
  EXPECT_EQ(reallocarray(p, SIZE_MAX / 2, 4), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  free(p); // still valid after the failed reallocarray
}

// With no dataplane configured no request is a dataplane one, SIZE_MAX included: it fails as
// glibc's does, ENOMEM and nothing said.
TEST(MallocApi, MallocOfSizeMaxFailsQuietly) {
  testing::internal::CaptureStderr();
  errno = 0;
  EXPECT_EQ(malloc(SIZE_MAX), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(calloc(1, SIZE_MAX), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "");
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  EXPECT_EQ(s.dataplane_fallbacks + s.dataplane_failures, 0u);
}

TEST(MallocApi, ReallocKeepsContentsWhenGrowingAndShrinking) {
  char *p = static_cast<char *>(malloc(10));
  memcpy(p, "0123456789", 10);
  p = static_cast<char *>(realloc(p, 100000));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(memcmp(p, "0123456789", 10), 0);
  p = static_cast<char *>(realloc(p, 5));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(memcmp(p, "01234", 5), 0);
  free(p);
}

TEST(MallocApi, ReallocNullIsMallocAndZeroFrees) {
  void *p = realloc(nullptr, 32);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(realloc(p, 0), nullptr) << "glibc semantics: realloc(p, 0) frees p";
}

TEST(MallocApi, ReallocFailureLeavesTheBlockValid) {
  char *p = static_cast<char *>(malloc(16));
  strcpy(p, "still here");
  errno = 0;
  EXPECT_EQ(realloc(p, SIZE_MAX - 4096), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_STREQ(p, "still here");
  free(p);
}

TEST(MallocApi, AlignedEntryPointsValidateTheirArguments) {
  void *p = reinterpret_cast<void *>(1);
  EXPECT_EQ(posix_memalign(&p, 3, 16), EINVAL);
  EXPECT_EQ(posix_memalign(&p, 4, 16), EINVAL) << "must be a multiple of sizeof(void*)";
  EXPECT_EQ(p, reinterpret_cast<void *>(1)) << "the out pointer is untouched on error";
  errno = 0;
  EXPECT_EQ(aligned_alloc(24, 48), nullptr);
  EXPECT_EQ(errno, EINVAL);
  void *m = memalign(24, 10); // glibc rounds up to 32
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m) % 32, 0u);
  free(m);
}

TEST(MallocApi, VallocAndPvallocArePageAligned) {
  const size_t page = sysconf(_SC_PAGESIZE);
  void *v = valloc(10);
  void *pv = pvalloc(page + 1);
  ASSERT_NE(v, nullptr);
  ASSERT_NE(pv, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v) % page, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pv) % page, 0u);
  EXPECT_GE(malloc_usable_size(pv), 2 * page) << "pvalloc rounds the size up to pages";
  free(v);
  free(pv);
}

TEST(MallocApi, EveryOperatorNewVariantPairsWithDelete) {
  int *a = new int(7);
  int *b = new int[100];
  auto *c = new (std::nothrow) int(8);
  auto *d = new (std::nothrow) int[10];
  struct alignas(256) Wide {
    char bytes[256];
  };
  Wide *e = new Wide;
  Wide *f = new Wide[3];
  Wide *g = new (std::nothrow) Wide;
  for (void *p : {static_cast<void *>(a), static_cast<void *>(b), static_cast<void *>(c),
                  static_cast<void *>(d)})
    ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(e) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(g) % 256, 0u);
  delete a;
  delete[] b;
  delete c;
  delete[] d;
  delete e;
  delete[] f;
  delete g;
  ::operator delete(::operator new(40), 40); // sized
  ::operator delete(::operator new(40, std::align_val_t(64)), std::align_val_t(64));
  ::operator delete(::operator new(40, std::align_val_t(64)), 40, std::align_val_t(64));
  ::operator delete[](::operator new[](40, std::nothrow), std::nothrow);
}

TEST(MallocApi, FailedNewThrowsBadAlloc) {
  EXPECT_THROW((void)::operator new(SIZE_MAX - 8192), std::bad_alloc);
  EXPECT_THROW((void)::operator new[](SIZE_MAX - 8192), std::bad_alloc);
  EXPECT_THROW((void)::operator new(SIZE_MAX - 8192, std::align_val_t(64)), std::bad_alloc);
  EXPECT_EQ(::operator new(SIZE_MAX - 8192, std::nothrow), nullptr);
}

int handler_calls;
void release_and_give_up() {
  handler_calls++;
  std::set_new_handler(nullptr); // the next failure throws
}

TEST(MallocApi, FailedNewCallsTheNewHandlerFirst) {
  handler_calls = 0;
  std::set_new_handler(release_and_give_up);
  EXPECT_THROW((void)::operator new(SIZE_MAX - 8192), std::bad_alloc);
  EXPECT_EQ(handler_calls, 1);
}

TEST(MallocApi, StatsShowControlMemoryFromTheKernel) {
  nic_stats before = NIC_STATS_INIT, during = NIC_STATS_INIT;
  nic_get_stats(&before);
  char *p = static_cast<char *>(malloc(64 << 20));
  memset(p, 1, 64 << 20); // resident only once touched
  nic_get_stats(&during);
  EXPECT_GE(during.control_committed, before.control_committed + (64 << 20));
  EXPECT_GE(during.control_resident, before.control_resident + (60 << 20));
  EXPECT_LE(during.control_resident, during.control_committed);
  free(p);
}

} // namespace

// glibc's malloc_stats, called by programs that know nothing of nicmalloc, prints our report.
TEST(MallocApi, MallocStatsPrintsTheNicmallocReport) {
  char path[] = "/tmp/nic_malloc_stats_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  unlink(path);
  int saved = dup(STDERR_FILENO);
  ASSERT_GE(saved, 0);
  ASSERT_EQ(dup2(fd, STDERR_FILENO), STDERR_FILENO);
  malloc_stats();
  dup2(saved, STDERR_FILENO);
  close(saved);
  char text[4096] = {};
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  close(fd);
  ASSERT_GT(n, 0);
  EXPECT_NE(strstr(text, "nicmalloc report"), nullptr) << text;
  EXPECT_NE(strstr(text, "control heap"), nullptr) << text;
}

// mallinfo2 and mallinfo describe nicmalloc's heap, not glibc's unused arena (all zeros before):
// the bytes of blocks in use, every thread's, the free bytes beside them, and the blocks
// nicmalloc maps itself.
TEST(MallocApi, MallinfoReportsTheBlocksInUseOfEveryThread) {
  constexpr size_t kBlocks = 20000, kSize = 1000, kClass = 1024; // mimalloc's size class
  const struct mallinfo2 start = mallinfo2();
  std::vector<char *> blocks(kBlocks);
  for (auto &b : blocks)
    memset(b = static_cast<char *>(malloc(kSize)), 1, kSize);
  const struct mallinfo2 filled = mallinfo2();
  EXPECT_GE(filled.uordblks, start.uordblks + kBlocks * kSize);
  EXPECT_LE(filled.uordblks, start.uordblks + kBlocks * kClass + (1 << 20));
  EXPECT_GE(filled.arena, filled.uordblks);
  EXPECT_EQ(filled.fordblks, filled.arena - filled.uordblks);

  // Another thread's blocks, live while it waits.
  constexpr size_t kTheirs = 10000, kTheirSize = 100, kTheirClass = 112;
  std::atomic<int> stage{0};
  std::thread other([&stage] {
    std::vector<void *> theirs(kTheirs);
    for (auto &b : theirs)
      memset(b = malloc(kTheirSize), 2, kTheirSize);
    stage = 1;
    while (stage.load() != 2)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (auto *b : theirs)
      free(b);
  });
  while (stage.load() != 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const struct mallinfo2 both = mallinfo2();
  stage = 2;
  other.join();
  EXPECT_GE(both.uordblks, filled.uordblks + kTheirs * kTheirSize);
  EXPECT_LE(both.uordblks, filled.uordblks + kTheirs * kTheirClass + (1 << 20));

  // A huge block (over 16 MiB: its own mimalloc segment) is in use while live, and not once freed
  // into the huge-block cache, which keeps it allocated in mimalloc for the next such request.
  constexpr size_t kHuge = size_t(40) << 20;
  void *volatile huge = malloc(kHuge);
  ASSERT_NE(huge, nullptr);
  const struct mallinfo2 with_huge = mallinfo2();
  EXPECT_GE(with_huge.uordblks, both.uordblks + kHuge) << "while live";
  free(huge);
  nic_stats stats = NIC_STATS_INIT;
  nic_get_stats(&stats);
  EXPECT_GE(stats.huge_cached_bytes, kHuge) << "the cache keeps it";
  EXPECT_LE(mallinfo2().uordblks, both.uordblks + (1 << 20)) << "cached, not in use";

  // A block nicmalloc maps itself (1 GiB and more: address space, untouched).
  void *volatile mapped = malloc((size_t(1) << 30) + 1);
  ASSERT_NE(mapped, nullptr);
  const struct mallinfo2 with_mapping = mallinfo2();
  EXPECT_EQ(with_mapping.hblks, start.hblks + 1);
  EXPECT_GE(with_mapping.hblkhd, start.hblkhd + (size_t(1) << 30));
  free(mapped);
  EXPECT_EQ(mallinfo2().hblks, start.hblks);

  for (auto *b : blocks)
    free(b);
  const struct mallinfo2 freed = mallinfo2();
  EXPECT_LE(freed.uordblks, start.uordblks + (1 << 20));
  // The old interface, the same figures in ints.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
  EXPECT_EQ(size_t(old.uordblks), mallinfo2().uordblks);
}

// Where the kernel's copy of our own memory is refused (a seccomp filter), the live bytes cannot
// be read: every committed control byte counts as in use (less the huge-block cache's) rather
// than none (the walk skipped every segment then, and reported an empty heap).
TEST(MallocApi, MallinfoCountsTheWholeHeapInUseWhereItCannotReadIt) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (nic_refuse_syscall(SYS_process_vm_readv, -1, EPERM)) _exit(2);
    std::vector<char *> blocks(20000);
    for (auto &b : blocks)
      memset(b = static_cast<char *>(malloc(1000)), 1, 1000);
    const struct mallinfo2 m = mallinfo2();
    nic_stats s = NIC_STATS_INIT;
    nic_get_stats(&s);
    _exit(m.uordblks >= 20000 * 1000 && s.control_live == s.control_committed - s.huge_cached_bytes
              ? 0
              : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_NE(WEXITSTATUS(status), 2) << "the kernel refused the filter";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// glibc's own names (__libc_malloc, __libc_free, ...) are answered by nicmalloc, as by mimalloc
// and tcmalloc: a block crosses between them and the standard names, a double free through
// __libc_free is reported under its name, and the size rule routes them as it routes malloc.
TEST(MallocApi, GlibcsOwnNamesServeAndFreeOurBlocks) {
  for (const bool dataplane : {false, true}) {
    auto r = run_probe(dataplane ? std::vector<std::string>{"NICMALLOC_DP_MIN_SIZE=64"}
                                 : std::vector<std::string>{},
                       {"libc-names"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.num("usable_ok"), 1);
    EXPECT_EQ(r.num("aligned"), 1);
    EXPECT_EQ(r.num("kept"), 1);
    EXPECT_EQ(r.num("zeroed"), 1);
    EXPECT_EQ(r.num("posix_rc"), 0);
    EXPECT_EQ(r.num("dataplane"), dataplane ? 7 : 0) << "each name routes as malloc does";
    EXPECT_EQ(count_lines(r.err, "__libc_free("), 1) << r.err;
    EXPECT_EQ(count_lines(r.err, "double free"), 1) << r.err;
    EXPECT_EQ(count_lines(r.err, "nicmalloc"), 1) << "nothing else is reported\n" << r.err;
  }
}

// A call that succeeds leaves errno as it was, and free never changes it (POSIX.1-2024, glibc
// since 2.33): a program may test errno after a call that allocates inside. The settings reach
// the general path's calls that fail on the way to an answer: stack walks (a profile, the
// detect fence), and dataplane requests the chunks cannot hold.
TEST(MallocApi, CallsThatSucceedLeaveErrnoAlone) {
  const std::string profile = "/tmp/nic-errno-" + std::to_string(getpid()) + ".profile";
  const std::vector<std::vector<std::string>> settings = {
      {},
      {"NICMALLOC_DP_MIN_SIZE=1", "NICMALLOC_CHUNK_SIZE=64M"},
      {"NICMALLOC_PROFILE=" + profile, "NICMALLOC_PROFILE_SAMPLE=1K"},
      {"NICMALLOC_FENCE=detect", "NICMALLOC_DP_MIN_SIZE=1024"},
  };
  for (const auto &env : settings) {
    const std::string name = env.empty() ? "defaults" : env[0];
    auto r = run_probe(env, {"errno-kept"});
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.err;
    for (const char *key :
         {"malloc_changed", "realloc_changed", "free_changed", "calloc_changed", "aligned_changed"})
      EXPECT_EQ(r.num(key), 0) << name << ": " << key;
    EXPECT_EQ(r.num("refused"), 1) << name;
    EXPECT_EQ(r.num("refused_enomem"), 1) << name;
    EXPECT_EQ(r.num("realloc0_kept"), 1) << name;
  }
  unlink(profile.c_str());
}

// Loaded with dlopen by a program whose malloc is glibc's, nicmalloc is not the malloc: it says
// so once at load; mimalloc's commits still reach it (else every block looked freed); its blocks
// go back through nic_free, and its own buffers (a received message) never reach glibc's free,
// which would abort; memory that is not its own, whose frees it cannot see, is not registered
// and is copied into posts.
TEST(MallocApi, LoadedWithDlopenItSaysItIsNotTheMallocAndFreesItsOwnBlocks) {
  auto r = run_program(DLOPEN_HOST, {}, {DLOPEN_EXT, NIC_LIB_PATH});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("nic_malloc_dataplane"), 1);
  EXPECT_EQ(r.num("malloc_dataplane"), 0) << "malloc is glibc's here";
  EXPECT_EQ(r.num("register_plain_rc"), -EPERM) << "its frees and unmaps go by unseen";
  EXPECT_EQ(r.num("register_dp_rc"), 0);
  EXPECT_EQ(r.num("post_rc"), 0) << r.err;
  EXPECT_EQ(r.num("copied_bytes"), 16384) << "the glibc block is copied, the dataplane one not";
  EXPECT_EQ(r.num("posts_done"), 2);
  EXPECT_EQ(r.num("received_ok"), 2);
  EXPECT_EQ(r.num("received_bytes"), 3000 + 16384);
  EXPECT_EQ(r.num("destroy_rc"), 0);
  EXPECT_GE(r.num("freed_live_bytes"), 3000) << "nic_free gave the block back";
  EXPECT_EQ(r.num("still_loaded"), 1) << "its threads run on after the library that loaded it";
  EXPECT_EQ(count_lines(r.err, "the program's malloc is not nicmalloc's but "), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "link the program with it to make it the malloc"), 1)
      << "the line whole, its advice too\n"
      << r.err;
  EXPECT_EQ(count_lines(r.err, "libc.so"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "nic_register("), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "nicmalloc: "), 2) << "the two lines, nothing else\n" << r.err;
  // Preloaded, the same program has nicmalloc as its malloc: nothing said, malloc routed.
  auto preloaded =
      run_program(DLOPEN_HOST, {"LD_PRELOAD=" NIC_LIB_PATH, "NICMALLOC_DP_MIN_SIZE=64"},
                  {DLOPEN_EXT, NIC_LIB_PATH});
  ASSERT_EQ(preloaded.exit_code, 0) << preloaded.err;
  EXPECT_EQ(preloaded.num("malloc_dataplane"), 1);
  EXPECT_EQ(preloaded.err, "");
  EXPECT_EQ(preloaded.num("register_plain_rc"), 0) << "its frees are seen: registered";
  EXPECT_EQ(preloaded.num("copied_bytes"), 0);
}

// Code compiled with the LLVM pass allocates through the site ABI and keeps its own frees. In a
// library loaded with dlopen those frees are glibc's, which aborted the program on nicmalloc's
// blocks ("free(): invalid pointer"): the sites allocate from the program's malloc family there.
// Preloaded, nicmalloc is the malloc, and the sites' blocks are dataplane memory.
TEST(MallocApi, CodeCompiledWithThePassInALibraryLoadedWithDlopenFreesWithTheProgramsFree) {
  auto r = run_program(DLOPEN_HOST, {}, {DLOPEN_SITE_EXT, NIC_LIB_PATH});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("freed"), 1);
  EXPECT_EQ(r.num("blocks"), 13);
  EXPECT_EQ(r.num("dataplane_blocks"), 0) << "glibc's blocks";
  EXPECT_EQ(r.num("calloc_zeroed"), 1);
  EXPECT_EQ(r.num("realloc_kept"), 1);
  EXPECT_EQ(r.num("aligned"), 1);
  EXPECT_EQ(count_lines(r.err, "the LLVM pass allocates with the program's malloc"), 1) << r.err;
  auto preloaded =
      run_program(DLOPEN_HOST, {"LD_PRELOAD=" NIC_LIB_PATH}, {DLOPEN_SITE_EXT, NIC_LIB_PATH});
  ASSERT_EQ(preloaded.exit_code, 0) << preloaded.out << preloaded.err;
  EXPECT_EQ(preloaded.num("dataplane_blocks"), 13);
  EXPECT_EQ(preloaded.num("calloc_zeroed"), 1);
  EXPECT_EQ(preloaded.num("realloc_kept"), 1);
  EXPECT_EQ(preloaded.err, "");
}

// The same host built without PIE, taking malloc's and free's addresses: the names are bound to
// the program's own table entries, which lead to glibc's. nicmalloc still finds that it is not
// the malloc and names glibc's library, not the program.
TEST(MallocApi, LoadedWithDlopenIntoAProgramWithoutPieItNamesTheMallocCallsReach) {
  auto r = run_program(DLOPEN_HOST_NO_PIE, {}, {DLOPEN_EXT, NIC_LIB_PATH});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("malloc_dataplane"), 0) << "malloc is glibc's here";
  EXPECT_EQ(r.num("register_plain_rc"), -EPERM) << "its frees and unmaps go by unseen";
  EXPECT_EQ(count_lines(r.err, "the program's malloc is not nicmalloc's but "), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "libc.so"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "defines its own"), 0) << r.err;
}

// A program built without PIE that takes malloc's and free's addresses (Debian's node) binds the
// names to its own table entries, which lead to nicmalloc's: linked or preloaded, nicmalloc is
// the malloc. It said the program had a malloc of its own and refused to register memory whose
// frees it does see.
TEST(MallocApi, InAProgramWithoutPieThatTakesMallocsAddressItIsTheMalloc) {
  const std::string preload = std::string("LD_PRELOAD=") + NIC_LIB_PATH;
  for (const bool preloaded : {false, true}) {
    std::vector<std::string> env{"NICMALLOC_DP_MIN_SIZE=64"};
    if (preloaded) env.push_back(preload);
    auto r = run_program(PLT_MALLOC_PROGRAM, env, {});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.num("malloc_dataplane"), 1) << preloaded;
    EXPECT_EQ(r.num("register_plain_rc"), 0) << preloaded << r.err;
    EXPECT_EQ(r.num("invalid_frees"), 0) << preloaded;
    EXPECT_EQ(r.err, "") << preloaded;
  }
}

// Preloaded into a program that defines its own malloc (rustc has jemalloc), nicmalloc cannot be
// the malloc: said when a setting asks for routing that cannot happen, else only when verbose (a
// preloaded build meets many such programs).
TEST(MallocApi, PreloadedIntoAProgramWithItsOwnMallocItSaysSoWhenASettingAsks) {
  const std::string preload = std::string("LD_PRELOAD=") + NIC_LIB_PATH;
  auto quiet = run_program(OWN_MALLOC_PROGRAM, {preload}, {});
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_GT(quiet.num("own_calls"), 0) << "the program's malloc serves it";
  EXPECT_EQ(quiet.num("same"), 1);
  EXPECT_EQ(quiet.err, "");
  auto asked = run_program(OWN_MALLOC_PROGRAM, {preload, "NICMALLOC_DP_MIN_SIZE=64"}, {});
  ASSERT_EQ(asked.exit_code, 0) << asked.err;
  EXPECT_EQ(count_lines(asked.err, "warning: the program defines its own malloc"), 1) << asked.err;
  EXPECT_EQ(count_lines(asked.err, "nicmalloc: "), 1) << asked.err;
  auto verbose = run_program(OWN_MALLOC_PROGRAM, {preload, "NICMALLOC_VERBOSE=1"}, {});
  ASSERT_EQ(verbose.exit_code, 0) << verbose.err;
  EXPECT_EQ(count_lines(verbose.err, "the program defines its own malloc"), 1) << verbose.err;
}

// A request larger than memory and swap together is refused (NULL, ENOMEM) as glibc's malloc
// refuses it under the kernel's default overcommit heuristic, not handed out for the OOM killer.
TEST(MallocApi, ARequestLargerThanMemoryAndSwapIsRefusedAsGlibcRefusesIt) {
  auto r = run_probe({}, {"too-large"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (r.num("overcommit_mode") != 0)
    GTEST_SKIP() << "vm.overcommit_memory is " << r.num("overcommit_mode")
                 << ", not the heuristic this is about";
  EXPECT_EQ(r.num("malloc_refused"), 1);
  EXPECT_EQ(r.num("malloc_enomem"), 1);
  EXPECT_EQ(r.num("calloc_refused"), 1);
  EXPECT_EQ(r.num("realloc_refused"), 1);
  EXPECT_EQ(r.num("kept"), 1) << "a refused realloc leaves the block";
  EXPECT_EQ(r.err, "");
}
