// The scatter-gather array on the sim backend: how each entry is resolved (arena, cache, copy),
// coalescing, the entry limit, bad input, and that the receiver gets exactly the bytes added.
#include <gtest/gtest.h>

#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <mimalloc.h> // before chunks.h: its C++ parts cannot sit in extern "C"

#include "nicmalloc.h"
extern "C" {
#include "backend.h"
#include "block.h"
#include "chunks.h"
#include "commit_map.h"
#include "safety.h"
#include "sim_nic.h"
#include "thread.h"
}

#include "probe_runner.h"
#include "sim_endpoint_fixture.h"

namespace {

constexpr uint32_t kBounce = 3; // struct nic_sga_entry.kind of a copied entry

std::atomic<int> completions{0}, failures{0};
void OnDone(void *, int status) {
  if (status) failures++;
  completions++;
}
void WaitFor(int n) {
  while (completions.load() < n) {
    nic_poll(0);
    std::this_thread::yield();
  }
}
class Sga : public SimEndpointTest {
protected:
  void SetUp() override {
    SimEndpointTest::SetUp();
    ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  }
  void TearDown() override {
    nic_sga_reset(&sga);
    SimEndpointTest::TearDown();
    free(steps_block);
  }
  static size_t StepBytes() { return size_t{1} << nic_dp.step_shift; }
  // A step end inside a block of three steps (freed at TearDown), with a whole step after it;
  // the block's bytes differ from page to page.
  char *StepEndInABlock() {
    steps_block = static_cast<char *>(nic_malloc(3 * StepBytes()));
    if (!steps_block) return nullptr;
    for (size_t i = 0; i < 3 * StepBytes(); i += 4096)
      memset(steps_block + i, 'a' + (i >> 12) % 26, 4096);
    const uintptr_t at = reinterpret_cast<uintptr_t>(steps_block);
    return steps_block + (StepBytes() - (at & (StepBytes() - 1)));
  }
  char *steps_block = nullptr;
  // Posts sga and returns what the receiver got.
  std::string PostAndReceive() {
    const int target = completions.load() + 1;
    const size_t before = inbox.msgs.size();
    EXPECT_EQ(nic_sga_post(&sga, ep, OnDone, nullptr), 0);
    WaitFor(target);
    std::lock_guard<std::mutex> g(inbox.mu);
    return inbox.msgs.size() > before ? inbox.msgs.back() : std::string("<nothing>");
  }
  nic_sga sga;
};

// Each step of a chunk is its own registration: a range across a step end goes as one entry per
// step, each inside its step with that step's key, and the receiver gets every byte in order.
TEST_F(Sga, ARangeAcrossAStepEndGoesAsOneEntryPerStepAndArrivesWhole) {
  const size_t big = 40u << 20, half = 64u << 10;
  char *p = static_cast<char *>(nic_malloc(big)); // more than a 32 MiB step
  ASSERT_NE(p, nullptr);
  nic_region_ref ref;
  ASSERT_EQ(nic_translate(p, 1, &ref), 0);
  char *step_end = static_cast<char *>(ref.region_base) + ref.region_len;
  ASSERT_TRUE(step_end - half >= p && step_end + half <= p + big) << "the block crosses a step end";
  char *from = step_end - half;
  for (size_t i = 0; i < 2 * half; i++)
    from[i] = static_cast<char>(i * 7 + (i >> 12));
  ASSERT_EQ(nic_sga_add(&sga, from, 2 * half), 0);
  ASSERT_EQ(sga.count, 2u);
  nic_region_ref first, second;
  ASSERT_EQ(nic_register(from, half, NIC_REG_LOCAL, &first), 0);
  ASSERT_EQ(nic_register(step_end, half, NIC_REG_LOCAL, &second), 0);
  EXPECT_EQ(sga.entry[0].addr, from);
  EXPECT_EQ(sga.entry[0].len, half);
  EXPECT_EQ(sga.entry[0].lkey, first.lkey);
  EXPECT_EQ(sga.entry[1].addr, step_end);
  EXPECT_EQ(sga.entry[1].len, half);
  EXPECT_EQ(sga.entry[1].lkey, second.lkey);
  EXPECT_NE(first.lkey, second.lkey) << "two steps, two registrations";
  const int failed = failures.load();
  EXPECT_EQ(PostAndReceive(), std::string(from, 2 * half));
  EXPECT_EQ(failures.load(), failed);
  free(p);
}

// A short range across a step end is copied whole, as one entry, like any short range: as one
// copy per step it took two entries, and an array with room for one refused it (-E2BIG).
// A range across step ends is never one entry of a registration of its own (which no step's
// give-back would tell about): its entries are its steps', and a post after the block was freed
// and a step of it given back is refused, as for any arena entry, then too once a new block
// there has the steps registered again.
TEST_F(Sga, APostOfARangeAcrossStepsWhoseBlockWasFreedIsRefused) {
  void *keep = nic_malloc(64); // the chunk stays
  const size_t len = 3 * StepBytes();
  char *b = static_cast<char *>(nic_malloc(len));
  ASSERT_NE(b, nullptr);
  memset(b, 1, len);
  ASSERT_EQ(nic_sga_add(&sga, b, len), 0);
  const uint32_t count = sga.count;
  for (uint32_t i = 0; i < count; i++) {
    EXPECT_EQ(sga.entry[i].kind, NIC_REGION_ARENA) << "entry " << i;
    EXPECT_EQ(nic_sga_entry_slot(&sga.entry[i]), 0u) << "entry " << i << " holds a region";
  }
  // A step wholly inside the block: given back once the block is freed.
  char *inside = b + (StepBytes() - (reinterpret_cast<uintptr_t>(b) & (StepBytes() - 1)));
  free(b);
  nic_region_ref ref{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((nic_translate(inside, 1, &ref) == 0 && ref.lkey) &&
         std::chrono::steady_clock::now() < deadline) {
    nic_collect();
    usleep(20000);
  }
  ASSERT_FALSE(nic_translate(inside, 1, &ref) == 0 && ref.lkey) << "the step was not given back";
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sga_post(&sga, ep, OnDone, nullptr), -NIC_EFREED);
  EXPECT_EQ(sga.count, count);
  char *again = static_cast<char *>(nic_malloc(len));
  ASSERT_NE(again, nullptr);
  memset(again, 2, len);
  for (size_t at = 0; at < len; at += StepBytes())
    ASSERT_EQ(nic_register(again + at, 1, NIC_REG_LOCAL, &ref), 0);
  EXPECT_EQ(nic_sga_post(&sga, ep, OnDone, nullptr), -NIC_EFREED) << "the new block was sent";
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(sga.count, count);
  nic_sga_reset(&sga);
  free(again);
  free(keep);
}

TEST_F(Sga, AShortRangeAcrossAStepEndIsCopiedAsOneEntry) {
  const size_t big = 40u << 20, half = 100;
  char *p = static_cast<char *>(nic_malloc(big));
  ASSERT_NE(p, nullptr);
  nic_region_ref ref;
  ASSERT_EQ(nic_translate(p, 1, &ref), 0);
  char *from = static_cast<char *>(ref.region_base) + ref.region_len - half;
  for (size_t i = 0; i < 2 * half; i++)
    from[i] = static_cast<char>('a' + i % 26);
  ASSERT_EQ(nic_sga_init(&sga, 1), 0);
  const uint64_t copied = Stats().bounce_bytes;
  ASSERT_EQ(nic_sga_add(&sga, from, 2 * half), 0);
  ASSERT_EQ(sga.count, 1u);
  EXPECT_EQ(sga.entry[0].len, 2 * half);
  EXPECT_EQ(Stats().bounce_bytes, copied + 2 * half) << "copied once";
  EXPECT_EQ(PostAndReceive(), std::string(from, 2 * half));
  free(p);
}

// A range across a step end whose piece in one step is shorter than the copy threshold: both
// pieces go direct, end to end, so a receiver may take the message in place (the copy saved no
// entry and put the short piece elsewhere: dpdk's receiver dropped such a packet).
TEST_F(Sga, AShortPieceOfARangeAcrossAStepEndGoesDirect) {
  char *step_end = StepEndInABlock();
  ASSERT_NE(step_end, nullptr);
  const uint64_t copied = Stats().bounce_bytes;
  const size_t len = 8100;
  for (const size_t head : {len - 100, size_t{100}}) { // the short piece last, then first
    char *from = step_end - head;
    ASSERT_EQ(nic_sga_add(&sga, from, len), 0);
    ASSERT_EQ(sga.count, 2u);
    for (uint32_t i = 0; i < 2; i++)
      EXPECT_EQ(sga.entry[i].kind, NIC_REGION_ARENA) << "piece " << i;
    EXPECT_EQ(sga.entry[0].addr, from);
    EXPECT_EQ(sga.entry[1].addr, step_end);
    EXPECT_EQ(sga.entry[0].len + sga.entry[1].len, len);
    EXPECT_EQ(PostAndReceive(), std::string(from, len));
  }
  EXPECT_EQ(Stats().bounce_bytes, copied) << "a piece was copied";
}

// A range across a step end takes an entry per step. Where the array has no room for them all,
// the smallest neighbours are copied together, as for a one-entry add past the limit: the short
// first piece joins the copy before it. They were refused (-E2BIG) with a message that said no
// neighbours were small enough, with one of two entries in use.
TEST_F(Sga, ARangeAcrossAStepEndMakesRoomByCopyingSmallNeighbours) {
  char *step_end = StepEndInABlock();
  ASSERT_NE(step_end, nullptr);
  char small[100];
  memset(small, 's', sizeof small);

  ASSERT_EQ(nic_sga_init(&sga, 2), 0);
  ASSERT_EQ(nic_sga_add(&sga, small, sizeof small), 0);
  ASSERT_EQ(nic_sga_add(&sga, step_end - 4096, 8192), 0);
  ASSERT_EQ(sga.count, 2u);
  EXPECT_EQ(sga.entry[0].kind, kBounce);
  EXPECT_EQ(sga.entry[0].len, 100u + 4096) << "the copy and the first piece, the smallest pair";
  EXPECT_NE(sga.entry[1].kind, kBounce);
  EXPECT_EQ(sga.entry[1].addr, step_end);
  EXPECT_EQ(PostAndReceive(),
            std::string(small, sizeof small) + std::string(step_end - 4096, 8192));

  // Over a whole step: the step between the two ends cannot be copied, the first piece can.
  ASSERT_EQ(nic_sga_init(&sga, 3), 0);
  ASSERT_EQ(nic_sga_add(&sga, small, sizeof small), 0);
  const size_t across = StepBytes() + 8192;
  ASSERT_EQ(nic_sga_add(&sga, step_end - 4096, across), 0);
  ASSERT_EQ(sga.count, 3u);
  EXPECT_EQ(sga.entry[0].len, 100u + 4096);
  EXPECT_EQ(sga.entry[1].len, StepBytes());
  EXPECT_EQ(sga.entry[2].len, 4096u);
  EXPECT_EQ(PostAndReceive(),
            std::string(small, sizeof small) + std::string(step_end - 4096, across));
}

// Where copying neighbours cannot make room either, the message says so for a range across a
// step end, and the array is left as it was.
TEST_F(Sga, ARangeAcrossAStepEndWithNoRoomToMakeIsRefusedWithWhy) {
  char *step_end = StepEndInABlock();
  ASSERT_NE(step_end, nullptr);
  ASSERT_EQ(nic_sga_init(&sga, 2), 0);
  ASSERT_EQ(nic_sga_add(&sga, step_end - 400000, 100000), 0);
  ASSERT_EQ(nic_sga_add(&sga, step_end - 200000, 100000), 0);
  const nic_sga before = sga;
  testing::internal::CaptureStderr();
  // Its two pieces are copied into one, and 100000 bytes beside it are too many to copy.
  EXPECT_EQ(nic_sga_add(&sga, step_end - 4096, 8192), -E2BIG);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("spans pin steps"), std::string::npos) << err;
  EXPECT_NE(err.find("2 of the 2 entries in use"), std::string::npos) << err;
  EXPECT_EQ(memcmp(&before, &sga, sizeof sga), 0) << "bounce " << sga.bounce;
}

// Making room may take several copies: when a later one fails (an entry added before was
// unmapped since), the copies made before it are given back and the array is as it was.
TEST_F(Sga, ARangeAcrossAStepEndWhoseRoomCannotBeMadeLeavesTheArrayAsItWas) {
  char *step_end = StepEndInABlock();
  ASSERT_NE(step_end, nullptr);
  char *gone = static_cast<char *>(
      mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(gone, MAP_FAILED);
  memset(gone, 'g', 3 * 4096);
  char small[100];
  memset(small, 's', sizeof small);
  ASSERT_EQ(nic_sga_init(&sga, 2), 0);
  ASSERT_EQ(nic_sga_add(&sga, gone + 100, 3000), 0); // cached: longer than the copy threshold
  ASSERT_EQ(nic_sga_add(&sga, small, sizeof small), 0);
  ASSERT_EQ(munmap(gone, 3 * 4096), 0);
  const nic_sga before = sga;
  testing::internal::CaptureStderr();
  // Pieces of 1000 and 40000 bytes: 100 + 1000 are copied first, then 3000 with those.
  EXPECT_EQ(nic_sga_add(&sga, step_end - 1000, 41000), -EFAULT);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("added before"), std::string::npos) << err;
  EXPECT_EQ(memcmp(&before, &sga, sizeof sga), 0) << "bounce " << sga.bounce;
}

// A block over 16 MiB has only the steps of its segment backed, not its whole 32 MiB arena
// claim (alloc/heap/dp_huge.h): its first and last bytes are registered and posted like any.
TEST_F(Sga, TheEndsOfABlockOver16MiBArePostedWhole) {
  const size_t size = (17u << 20) + 12345, part = 100u << 10;
  char *p = static_cast<char *>(nic_malloc(size));
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(nic_is_dataplane(p));
  const size_t usable = malloc_usable_size(p);
  for (size_t i = 0; i < part; i++) {
    p[i] = static_cast<char>(i * 13 + 1);
    p[usable - part + i] = static_cast<char>(i * 5 + 3);
  }
  ASSERT_EQ(nic_sga_add(&sga, p + usable - part, part), 0);
  ASSERT_EQ(nic_sga_add(&sga, p, part), 0);
  for (uint32_t i = 0; i < sga.count; i++)
    EXPECT_NE(sga.entry[i].kind, kBounce) << "entry " << i << " was copied, not registered";
  const int failed = failures.load();
  EXPECT_EQ(PostAndReceive(), std::string(p + usable - part, part) + std::string(p, part));
  EXPECT_EQ(failures.load(), failed);
  free(p);
}

// A received buffer may hold the free key where a freed block keeps it: it is still live, and
// can be posted and held.
TEST_F(Sga, ALiveBufferHoldingTheFreeKeyIsNoFreedBlock) {
  for (bool dataplane : {false, true}) {
    auto *buf = static_cast<uintptr_t *>(dataplane ? nic_malloc(2048) : malloc(2048));
    ASSERT_NE(buf, nullptr);
    memset(buf, 'x', 2048);
    buf[1] = nic_free_key();
    testing::internal::CaptureStderr();
    EXPECT_EQ(nic_sga_add(&sga, buf, 2048), 0) << dataplane;
    EXPECT_EQ(nic_hold(buf), 0) << dataplane;
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(err, "") << dataplane;
    EXPECT_EQ(nic_release(buf), 0);
    nic_sga_reset(&sga);
    free(buf);
  }
}

// The program's madvise(MADV_DONTNEED) of a live dataplane block was taken for mimalloc's
// decommit: it returned 0 but left the bytes, and the block then looked freed (nic_sga_add and
// nic_hold refused it, free called it a double free and leaked it). Linux gives zeros.
TEST_F(Sga, AProgramsDontneedOfALiveDataplaneBlockZeroesItAndKeepsItLive) {
  auto *buf = static_cast<char *>(nic_aligned_alloc(4096, 3 * 4096));
  ASSERT_NE(buf, nullptr);
  memset(buf, 'd', 3 * 4096);
  const nic_stats before = Stats();
  ASSERT_EQ(madvise(buf + 4096, 4096, MADV_DONTNEED), 0) << strerror(errno);
  EXPECT_EQ(std::count(buf + 4096, buf + 8192, '\0'), 4096) << "the range was not zeroed";
  EXPECT_EQ(std::count(buf, buf + 4096, 'd'), 4096);
  EXPECT_EQ(std::count(buf + 8192, buf + 3 * 4096, 'd'), 4096);
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sga_add(&sga, buf, 3 * 4096), 0);
  EXPECT_EQ(nic_hold(buf), 0);
  EXPECT_EQ(nic_release(buf), 0);
  std::string got = PostAndReceive();
  nic_sga_reset(&sga);
  free(buf);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_TRUE(got == std::string(4096, 'd') + std::string(4096, '\0') + std::string(4096, 'd'))
      << "the receiver got other bytes";
  EXPECT_EQ(Stats().double_frees, before.double_frees);
}

// The program's mprotect that gives write access back to dataplane pages it made read-only is
// the program's: the pages are writable again. It was taken for mimalloc's commit (no system
// call), and the pages stayed read-only.
TEST_F(Sga, AProgramsMprotectGivesWriteAccessBackToDataplanePages) {
  auto *buf = static_cast<char *>(nic_aligned_alloc(4096, 2 * 4096));
  ASSERT_NE(buf, nullptr);
  ASSERT_TRUE(nic_is_dataplane(buf));
  memset(buf, 'p', 2 * 4096);
  ASSERT_EQ(mprotect(buf, 4096, PROT_READ), 0) << strerror(errno);
  ASSERT_EQ(mprotect(buf, 4096, PROT_READ | PROT_WRITE), 0) << strerror(errno);
  EXPECT_EXIT(
      {
        buf[0] = 'w';
        _exit(buf[0] == 'w' ? 0 : 1);
      },
      testing::ExitedWithCode(0), "")
      << "the page stayed read-only";
  free(buf);
}

TEST_F(Sga, DefaultLimitIsTheBackendsMaxSge) {
  EXPECT_EQ(sga.max, nic_backend_active()->caps.max_sge); // 32 for the sim
  EXPECT_EQ(nic_sga_init(&sga, 8), 0);
  EXPECT_EQ(sga.max, 8u);
}

TEST_F(Sga, ArenaMemoryIsDirect) {
  char *p = static_cast<char *>(nic_malloc(4096));
  memset(p, 'a', 4096);
  ASSERT_EQ(nic_sga_add(&sga, p, 4096), 0);
  ASSERT_EQ(sga.count, 1u);
  EXPECT_EQ(sga.entry[0].addr, p) << "zero copy";
  EXPECT_EQ(sga.entry[0].kind, static_cast<uint32_t>(NIC_REGION_ARENA));
  EXPECT_NE(sga.entry[0].lkey, 0u);
  EXPECT_EQ(PostAndReceive(), std::string(4096, 'a'));
  free(p);
}

TEST_F(Sga, OtherMemoryGoesThroughTheCacheAndHitsTheSecondTime) {
  char *p = static_cast<char *>(malloc(10000));
  memset(p, 'c', 10000);
  ASSERT_EQ(nic_sga_add(&sga, p, 10000), 0);
  EXPECT_EQ(sga.entry[0].kind, static_cast<uint32_t>(NIC_REGION_CACHED));
  EXPECT_EQ(sga.entry[0].addr, p);
  // The same range again (not contiguous with itself, so a second entry) is a cache hit. Posts
  // in between would not always hit: a free of a neighbour on the region's pages drops it.
  const uint64_t hits = Stats().rcache_hits;
  ASSERT_EQ(nic_sga_add(&sga, p, 10000), 0);
  EXPECT_EQ(Stats().rcache_hits, hits + 1);
  EXPECT_EQ(sga.count, 2u);
  EXPECT_EQ(PostAndReceive(), std::string(10000, 'c') + std::string(10000, 'c'));
  free(p);
}

TEST_F(Sga, ShortEntriesAreCopiedIntoPinnedBounceMemoryAtAdd) {
  char small[100];
  memset(small, 's', sizeof small);
  const uint64_t copied = Stats().bounce_bytes;
  ASSERT_EQ(nic_sga_add(&sga, small, sizeof small), 0);
  EXPECT_EQ(sga.entry[0].kind, kBounce);
  EXPECT_NE(sga.entry[0].addr, small);
  EXPECT_TRUE(nic_is_dataplane(sga.entry[0].addr));
  EXPECT_EQ(Stats().bounce_bytes, copied + sizeof small);
  memset(small, 'X', sizeof small); // the copy was taken at add
  EXPECT_EQ(PostAndReceive(), std::string(100, 's'));
}

TEST_F(Sga, CopyThresholdIsASetting) {
  struct nic_safety_config saved = *nic_safety_config(), c = saved;
  c.copy_threshold = 0;
  nic_safety_config_set(&c);
  std::vector<char> v(100, 'z');
  ASSERT_EQ(nic_sga_add(&sga, v.data(), v.size()), 0);
  EXPECT_EQ(sga.entry[0].kind, static_cast<uint32_t>(NIC_REGION_CACHED));
  EXPECT_EQ(PostAndReceive(), std::string(100, 'z'));
  nic_safety_config_set(&saved);
}

TEST_F(Sga, AdjacentEntriesCoalesce) {
  char *p = static_cast<char *>(nic_malloc(4096));
  memset(p, 'p', 4096);
  ASSERT_EQ(nic_sga_add(&sga, p, 1000), 0);
  ASSERT_EQ(nic_sga_add(&sga, p + 1000, 2000), 0);
  EXPECT_EQ(sga.count, 1u);
  EXPECT_EQ(sga.entry[0].len, 3000u);
  ASSERT_EQ(nic_sga_add(&sga, "hello ", 6), 0); // two copies, one after the other
  ASSERT_EQ(nic_sga_add(&sga, "world", 5), 0);
  EXPECT_EQ(sga.count, 2u);
  EXPECT_EQ(PostAndReceive(), std::string(3000, 'p') + "hello world");
  free(p);
}

TEST_F(Sga, PastTheLimitTheSmallestNeighboursAreCopiedTogether) {
  ASSERT_EQ(nic_sga_init(&sga, 4), 0);
  char *big = static_cast<char *>(nic_malloc(65536));
  for (int i = 0; i < 65536; i++)
    big[i] = static_cast<char>('A' + i % 23);
  // Pieces with gaps between them, so that none coalesce: sizes 4000, 600, 700, 5000, 800.
  const size_t off[] = {0, 8192, 16384, 24576, 40960}, len[] = {4000, 600, 700, 5000, 800};
  std::string expect;
  for (int i = 0; i < 5; i++) {
    ASSERT_EQ(nic_sga_add(&sga, big + off[i], len[i]), 0) << i;
    expect.append(big + off[i], len[i]);
  }
  ASSERT_EQ(sga.count, 4u);
  EXPECT_EQ(sga.entry[1].kind, kBounce);
  EXPECT_EQ(sga.entry[1].len, 1300u) << "600 + 700, the smallest adjacent pair";
  EXPECT_EQ(PostAndReceive(), expect);
  free(big);
}

// Past the limit two entries already added are copied together: the program may have unmapped
// one's memory since (its own use after free), which the copy read and the process died of
// SIGSEGV inside nic_sga_add. It is refused instead, the array left as it was.
TEST_F(Sga, AMergeOfAnEntryWhoseMemoryWasUnmappedSinceItsAddIsRefused) {
  ASSERT_EQ(nic_sga_init(&sga, 2), 0);
  char *gone = static_cast<char *>(
      mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(gone, MAP_FAILED);
  memset(gone, 'g', 3 * 4096);
  char *arena = static_cast<char *>(nic_malloc(65536));
  ASSERT_NE(arena, nullptr);
  memset(arena, 'a', 65536);
  ASSERT_EQ(nic_sga_add(&sga, gone + 100, 2000), 0); // cached: longer than the copy threshold
  ASSERT_EQ(nic_sga_add(&sga, arena, 9000), 0);
  ASSERT_EQ(sga.count, 2u);
  ASSERT_EQ(munmap(gone, 3 * 4096), 0);
  const nic_sga before = sga;
  testing::internal::CaptureStderr();
  // Not contiguous, so a third entry: 2000 + 9000 is the smallest pair to copy.
  EXPECT_EQ(nic_sga_add(&sga, arena + 20000, 8000), -EFAULT);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("added before"), std::string::npos) << err;
  EXPECT_EQ(memcmp(&before, &sga, sizeof sga), 0);
  nic_sga_reset(&sga);
  free(arena);
}

// The program unmapped an entry's memory between nic_sga_add and the post (its use after free):
// the entry's cached registration still held the old pages, and the post handed that stale
// registration to the NIC. The post is refused instead, the array left as it was.
TEST_F(Sga, APostOfAnEntryWhoseMemoryWasUnmappedSinceItsAddIsRefused) {
  char *gone = static_cast<char *>(
      mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(gone, MAP_FAILED);
  memset(gone, 'g', 3 * 4096);
  ASSERT_EQ(nic_sga_add(&sga, gone + 100, 5000), 0);
  ASSERT_EQ(sga.entry[0].kind, static_cast<uint32_t>(NIC_REGION_CACHED));
  ASSERT_EQ(munmap(gone, 3 * 4096), 0);
  const nic_sga before = sga;
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sga_post(&sga, ep, OnDone, nullptr), -EFAULT);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("unmapped"), std::string::npos) << err;
  EXPECT_EQ(memcmp(&before, &sga, sizeof sga), 0);
}

// A cached region larger than the entry, shared with an earlier registration, goes stale when
// other pages of it are unmapped: the entry's own memory is still there, so it is registered
// anew at the post and its bytes arrive.
TEST_F(Sga, AnEntryWhoseSharedRegionWentStaleElsewhereIsRegisteredAnewAtThePost) {
  const size_t page = 4096;
  char *m = static_cast<char *>(
      mmap(nullptr, 10 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  memset(m, 'r', 10 * page);
  nic_region_ref whole;
  ASSERT_EQ(nic_register(m, 10 * page, NIC_REG_LOCAL, &whole), 0);
  nic_unregister(&whole); // let go; the region stays cached
  const uint64_t hits = Stats().rcache_hits;
  ASSERT_EQ(nic_sga_add(&sga, m + 100, 2000), 0);
  ASSERT_EQ(Stats().rcache_hits, hits + 1) << "the entry shares the 10-page region";
  ASSERT_EQ(munmap(m + 8 * page, 2 * page), 0); // the region goes stale, the entry's page stays
  EXPECT_EQ(PostAndReceive(), std::string(2000, 'r'));
  EXPECT_EQ(munmap(m, 8 * page), 0);
}

// Random mixes of arena, cache, stack and short pieces arrive as one concatenation.
TEST_F(Sga, RandomMixesArriveIntact) {
  std::mt19937 rng(11);
  char *arena = static_cast<char *>(nic_malloc(1 << 20));
  char *control = static_cast<char *>(malloc(1 << 20));
  static char stat[1 << 16];
  for (int i = 0; i < (1 << 20); i++)
    arena[i] = static_cast<char>(i * 7), control[i] = static_cast<char>(i * 13);
  for (int i = 0; i < (1 << 16); i++)
    stat[i] = static_cast<char>(i * 3);
  for (int m = 0; m < 150; m++) {
    ASSERT_EQ(nic_sga_init(&sga, 1 + rng() % 16), 0);
    std::string expect;
    for (int e = 0, n = 1 + rng() % 40; e < n; e++) {
      size_t len = rng() % 3 == 0 ? 1 + rng() % 511 : 1 + rng() % 9000;
      char *src = rng() % 3 == 0 ? arena : rng() % 2 ? control : stat;
      size_t span = src == stat ? sizeof stat : 1 << 20;
      src += rng() % (span - len);
      int rc = nic_sga_add(&sga, src, len);
      ASSERT_TRUE(rc == 0 || rc == -E2BIG) << rc;
      if (rc == 0) expect.append(src, len);
    }
    EXPECT_EQ(PostAndReceive(), expect) << "message " << m;
  }
  EXPECT_EQ(failures.load(), 0);
  free(arena);
  free(control);
}

// Inside a dataplane scope, the post's own bookkeeping stays out of the dataplane heap (it would
// pin a chunk for nothing), while the program's completion callback is routed by its scope.
void *callback_block;
void OnDoneAllocating(void *, int status) {
  if (status) failures++;
  callback_block = malloc(64);
  completions++;
}
TEST_F(Sga, APostInADataplaneScopeKeepsItsBookkeepingOutOfTheDataplane) {
  char *p = static_cast<char *>(nic_malloc(8192));
  memset(p, 'x', 8192);
  ASSERT_EQ(nic_sga_add(&sga, p, 8192), 0);
  nic_dataplane_begin();
  struct nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  const int target = completions.load() + 1;
  // The NIC waits until the figure is read: the sim receives each message into a fresh
  // dataplane buffer, which is live (and counted) while its receive function runs.
  nic_sim_pause(nic_backend_active(), true);
  ASSERT_EQ(nic_sga_post(&sga, ep, OnDoneAllocating, nullptr), 0);
  nic_get_stats(&after); // before any completion: the message is live
  nic_sim_pause(nic_backend_active(), false);
  EXPECT_EQ(after.dataplane_live, before.dataplane_live);
  WaitFor(target);
  nic_dataplane_end();
  EXPECT_TRUE(nic_is_dataplane(callback_block));
  free(callback_block);
  free(p);
}

// nicmalloc's own blocks (a post's bookkeeping, say) come from a heap of their own, so none
// shares an OS page with a program's buffer, which the fence may write-protect while in flight.
TEST(InternalHeap, NicmallocsOwnBlocksNeverShareAPageWithTheProgramsBlocks) {
  std::vector<char *> mine, theirs;
  for (int i = 0; i < 2000; i++) {
    const size_t size = 16 + i % 700;
    nic_internal_enter();
    mine.push_back(static_cast<char *>(malloc(size)));
    nic_internal_leave();
    theirs.push_back(static_cast<char *>(malloc(size)));
  }
  const uintptr_t page = 4096;
  std::set<uintptr_t> their_pages;
  for (size_t i = 0; i < theirs.size(); i++)
    for (uintptr_t a = (uintptr_t)theirs[i] / page;
         a <= ((uintptr_t)theirs[i] + 16 + i % 700 - 1) / page; a++)
      their_pages.insert(a);
  int shared = 0;
  for (size_t i = 0; i < mine.size(); i++)
    for (uintptr_t a = (uintptr_t)mine[i] / page;
         a <= ((uintptr_t)mine[i] + 16 + i % 700 - 1) / page; a++)
      shared += their_pages.count(a) != 0;
  EXPECT_EQ(shared, 0);
  for (char *p : mine)
    free(p);
  for (char *p : theirs)
    free(p);
}

// An entry that runs from the last mapped chunk into one that is not mapped: short ones (copied)
// are refused as unmapped, long ones as crossing the chunk end; neither may read past it. The
// chunk's end must hold a live block: memory mimalloc holds no block in is refused sooner, as
// freed.
TEST_F(Sga, AnEntryOverTheEndOfTheLastChunkIsRefused) {
  void *keep = nic_malloc(64); // at least one chunk mapped
  // 1 MiB blocks until one lies in the last chunk's last slice (a block over 16 MiB would not:
  // its segment never fills its arena claim, and the claim's tail is never committed).
  std::vector<void *> blocks;
  unsigned last = 0;
  char *end = nullptr;
  for (int i = 0; i < 256; i++) {
    blocks.push_back(nic_malloc(1 << 20));
    ASSERT_NE(blocks.back(), nullptr);
    last = nic_chunk_slots_used() - 1;
    end = static_cast<char *>(nic_chunk_base(last + 1));
    if (nic_dp_slice_held((uintptr_t)(end - 4096) - nic_dp.base)) break;
  }
  ASSERT_TRUE(nic_chunk_readable(last));
  ASSERT_FALSE(nic_chunk_readable(last + 1));
  ASSERT_TRUE(nic_dp_slice_held((uintptr_t)(end - 4096) - nic_dp.base))
      << "the chunk's last slice holds no block: the test needs another layout";
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sga_add(&sga, end - 100, 200), -EFAULT);
  EXPECT_EQ(nic_sga_add(&sga, end - 4096, 1 << 20), -NIC_ECROSS);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("crosses the end of its chunk"), std::string::npos) << err;
  EXPECT_EQ(sga.count, 0u);
  for (void *b : blocks)
    free(b);
  free(keep);
}

// Address space that is reserved but cannot be read (mincore calls it mapped): nicmalloc's
// dataplane range past the mapped chunks, its control arena past what mimalloc committed, and a
// program's PROT_NONE mapping. Copying it would fault in the program, registering it would
// fault in the sim NIC.
TEST_F(Sga, ReservedMemoryThatCannotBeReadIsRefused) {
  void *keep = nic_malloc(64); // at least one chunk mapped
  const unsigned last = nic_chunk_slots_used() - 1;
  ASSERT_FALSE(nic_chunk_readable(last + 1));
  char *past_chunks = static_cast<char *>(nic_chunk_base(last + 1)) + 4096;
  ASSERT_NE(nic_commit_map.base, 0u);
  char *arena_end = reinterpret_cast<char *>(nic_commit_map.base + nic_commit_map.size) - 8192;
  ASSERT_FALSE(nic_commit_map_readable(nic_commit_map.size - 8192));
  const long page = sysconf(_SC_PAGESIZE);
  char *none =
      static_cast<char *>(mmap(nullptr, 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(none, MAP_FAILED);
  nic_stats before = NIC_STATS_INIT;
  nic_get_stats(&before);
  for (char *p : {past_chunks, arena_end, none}) {
    unsigned char vec[2];
    ASSERT_EQ(
        mincore(reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(p) & ~4095ul), 4096, vec), 0)
        << "reserved, so mincore alone calls it mapped";
    testing::internal::CaptureStderr();
    EXPECT_EQ(nic_sga_add(&sga, p + 16, 100), -EFAULT) << static_cast<void *>(p);
    EXPECT_EQ(nic_sga_add(&sga, p, 2 * page), -EFAULT) << static_cast<void *>(p);
    const std::string err = testing::internal::GetCapturedStderr();
    // Said once (the first time round), counted every time.
    EXPECT_EQ(err.find("not (entirely) mapped") != std::string::npos, p == past_chunks) << err;
    nic_region_ref ref;
    EXPECT_EQ(nic_register(p, 2 * page, NIC_REG_LOCAL, &ref), -EFAULT) << static_cast<void *>(p);
  }
  EXPECT_EQ(sga.count, 0u);
  nic_stats after = NIC_STATS_INIT;
  nic_get_stats(&after);
  EXPECT_EQ(after.sga_errors - before.sga_errors, 6u);
  munmap(none, 2 * page);
  free(keep);
}

// A short entry on the caller's own stack is proven readable without asking the kernel (its stack
// from the stack pointer up is mapped), but nothing past the top of that stack is vouched for: a
// thread on a stack of the program's own, with an unreadable page right above it.
struct OwnStackRun {
  nic_sga *sga;
  char *top;
  int on_stack = 1, past_top = 1;
  std::string copied;
};
void *AddOnOwnStack(void *arg) {
  auto *run = static_cast<OwnStackRun *>(arg);
  char local[64];
  memset(local, 'k', sizeof local);
  __asm__ volatile("" : : "r"(local) : "memory");
  run->on_stack = nic_sga_add(run->sga, local, sizeof local);
  if (run->on_stack == 0 && run->sga->count == 1)
    run->copied.assign(static_cast<const char *>(run->sga->entry[0].addr), sizeof local);
  run->past_top = nic_sga_add(run->sga, run->top - 40, 100);
  return nullptr;
}
TEST_F(Sga, AShortEntryOnTheCallersStackIsCopiedAndNothingPastItsTop) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), stack_size = 64 * page;
  char *m = static_cast<char *>(
      mmap(nullptr, stack_size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  ASSERT_EQ(mprotect(m + stack_size, page, PROT_NONE), 0);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  ASSERT_EQ(pthread_attr_setstack(&attr, m, stack_size), 0);
  OwnStackRun run;
  run.sga = &sga;
  run.top = m + stack_size;
  pthread_t thread;
  testing::internal::CaptureStderr();
  ASSERT_EQ(pthread_create(&thread, &attr, AddOnOwnStack, &run), 0);
  pthread_join(thread, nullptr);
  testing::internal::GetCapturedStderr();
  pthread_attr_destroy(&attr);
  EXPECT_EQ(run.on_stack, 0);
  EXPECT_EQ(run.copied, std::string(64, 'k'));
  EXPECT_EQ(run.past_top, -EFAULT) << "an entry running past the stack's top was taken";
  nic_sga_reset(&sga);
  munmap(m, stack_size + page);
}

// On an alternate signal stack the thread's own stack bounds say nothing: an entry there that runs
// into an unreadable page is refused, after the thread has learnt its stack.
struct AltStackRun {
  nic_sga *sga;
  char *end;
  int rc = 1;
} alt_run;
void AddOnAltStack(int) {
  char local[16];
  __asm__ volatile("" : : "r"(local) : "memory");
  alt_run.rc = nic_sga_add(alt_run.sga, alt_run.end - 40, 100);
}
TEST_F(Sga, AnEntryOnAnAlternateSignalStackIsCheckedByTheKernel) {
  char first[32] = "learn this thread's stack";
  ASSERT_EQ(nic_sga_add(&sga, first, sizeof first), 0);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), size = 16 * page;
  char *m = static_cast<char *>(
      mmap(nullptr, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  ASSERT_EQ(mprotect(m + size, page, PROT_NONE), 0);
  stack_t alt{}, old{};
  alt.ss_sp = m;
  alt.ss_size = size;
  ASSERT_EQ(sigaltstack(&alt, &old), 0);
  struct sigaction sa {
  }, old_sa{};
  sa.sa_handler = AddOnAltStack;
  sa.sa_flags = SA_ONSTACK;
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old_sa), 0);
  alt_run = AltStackRun{&sga, m + size};
  testing::internal::CaptureStderr();
  raise(SIGUSR2);
  testing::internal::GetCapturedStderr();
  sigaction(SIGUSR2, &old_sa, nullptr);
  sigaltstack(&old, nullptr);
  EXPECT_EQ(alt_run.rc, -EFAULT);
  nic_sga_reset(&sga);
  munmap(m, size + page);
}

TEST_F(Sga, AnEntryRefusedAfterItsCopyLeavesTheArrayAsItWas) {
  ASSERT_EQ(nic_sga_init(&sga, 1), 0);
  char *big = static_cast<char *>(nic_malloc(100000));
  char small[100] = "short";
  ASSERT_EQ(nic_sga_add(&sga, big, 100000), 0);
  const nic_sga before = sga;
  testing::internal::CaptureStderr();
  for (int i = 0; i < 1000; i++) // copied at add, then too big to merge with the entry before
    ASSERT_EQ(nic_sga_add(&sga, small, sizeof small), -E2BIG);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(memcmp(&before, &sga, sizeof sga), 0) << "bounce " << sga.bounce;
  nic_sga_reset(&sga);
  free(big);
}

TEST_F(Sga, BadInputGetsAnErrorAndAMessage) {
  char *p = static_cast<char *>(nic_malloc(4096));
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sga_add(&sga, p, 0), -NIC_ERANGE);
  EXPECT_EQ(nic_sga_add(&sga, reinterpret_cast<void *>(UINTPTR_MAX - 16), 100), -NIC_ERANGE);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("length is 0, overflows"), std::string::npos) << err;

  // A range that runs into an unmapped page, short (copied) and long (registered).
  const long page = sysconf(_SC_PAGESIZE);
  char *m = static_cast<char *>(
      mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  munmap(m + page, page);
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sga_add(&sga, m + page - 100, 200), -EFAULT);
  EXPECT_EQ(nic_sga_add(&sga, m, 2 * page), -EFAULT);
  err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("not (entirely) mapped"), std::string::npos) << err;
  munmap(m, page);

  // Pointers already freed (dataplane and control).
  char *gone = static_cast<char *>(nic_malloc(2048)), *gone2 = static_cast<char *>(malloc(2048));
  free(gone);
  free(gone2);
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sga_add(&sga, gone, 2048), -NIC_EFREED);
  EXPECT_EQ(nic_sga_add(&sga, gone2, 100), -NIC_EFREED);
  err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("no live block starts here"), std::string::npos) << err;
  EXPECT_EQ(sga.count, 0u) << "errors leave the array unchanged";

  // More entries than allowed, none small enough to copy together.
  ASSERT_EQ(nic_sga_init(&sga, 2), 0);
  char *big = static_cast<char *>(nic_malloc(1 << 20));
  ASSERT_EQ(nic_sga_add(&sga, big, 100000), 0);
  ASSERT_EQ(nic_sga_add(&sga, big + 200000, 100000), 0);
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sga_add(&sga, big + 400000, 100000), -E2BIG);
  err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("more than 2 entries"), std::string::npos) << err;
  EXPECT_EQ(sga.count, 2u);
  nic_sga_reset(&sga);

  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sga_init(&sga, NIC_SGA_CAPACITY + 1), -E2BIG);
  nic_sga raw{};
  EXPECT_EQ(nic_sga_add(&raw, p, 10), -EINVAL) << "not initialised";
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  EXPECT_EQ(nic_sga_post(&sga, ep, OnDone, nullptr), -EINVAL) << "empty";
  ASSERT_EQ(nic_sga_add(&sga, p, 4096), 0);
  EXPECT_EQ(nic_sga_post(&sga, nullptr, OnDone, nullptr), -EINVAL) << "no endpoint";
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(sga.count, 1u) << "a refused post leaves the array as it was";
  nic_sga_reset(&sga);
  EXPECT_EQ(Stats().inflight_entries, 0u);
  free(big);
  free(p);
}

// An array whose nic_sga_init failed holds what the caller's stack held: nic_sga_reset read its
// count and cache slots and crashed in the registration cache (SIGSEGV). The init now leaves an
// empty array that no call takes for one.
TEST_F(Sga, AnArrayWhoseInitFailedIsResetAndRefusedWithoutReadingIt) {
  nic_sga sga;
  memset(&sga, 0x5a, sizeof sga);
  testing::internal::CaptureStderr();
  ASSERT_EQ(nic_sga_init(&sga, NIC_SGA_CAPACITY + 1), -E2BIG);
  nic_sga_reset(&sga);
  char buf[64] = {};
  EXPECT_EQ(nic_sga_add(&sga, buf, sizeof buf), -EINVAL);
  EXPECT_EQ(nic_sga_post(&sga, ep, OnDone, nullptr), -EINVAL);
  // Never set up: a limit that looks right over a count that cannot be is not read either.
  memset(&sga, 0x5a, sizeof sga);
  sga.max = 8;
  nic_sga_reset(&sga);
  nic_sga_reset(&sga);
  EXPECT_EQ(nic_sga_post(&sga, ep, OnDone, nullptr), -EINVAL);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(err, "nic_sga_reset"), 1) << "said once: " << err;
  EXPECT_EQ(Stats().inflight_entries, 0u);
}

// The audit's way there: no backend can open (nic_sga_init: -ENODEV), in a process of its own.
TEST(SgaNoBackend, AnArrayWhoseInitFoundNoBackendIsResetAndRefused) {
  const ProbeResult r = run_probe({"NICMALLOC_BACKEND=auto"}, {"sga-no-backend"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("init"), -ENODEV) << r.out << r.err;
  EXPECT_EQ(r.num("reset_failed_init"), 1) << r.out << r.err;
  EXPECT_EQ(r.num("add"), -EINVAL) << r.out;
  EXPECT_EQ(r.num("post"), -EINVAL) << r.out;
  EXPECT_EQ(r.num("reset_never_set_up"), 1) << r.out << r.err;
  EXPECT_EQ(r.num("post_never_set_up"), -EINVAL) << r.out;
  EXPECT_EQ(count_lines(r.err, "nic_sga_reset"), 1) << r.err;
}

// A post or destroy on an endpoint destroyed already is the program's error, and is refused
// (-EINVAL, the array kept): the endpoint's memory was unmapped at its destroy, and the post
// faulted reading it.
TEST_F(Sga, APostOnADestroyedEndpointIsRefused) {
  char *p = static_cast<char *>(nic_malloc(4096));
  ASSERT_EQ(nic_sga_add(&sga, p, 4096), 0);
  for (int round = 0; round < 3; round++) {
    nic_endpoint *closed = nic_sim_endpoint_create([](void *, void *, size_t) {}, nullptr, 0);
    ASSERT_NE(closed, nullptr);
    ASSERT_EQ(nic_sim_endpoint_destroy(closed), 0);
    testing::internal::CaptureStderr();
    EXPECT_EQ(nic_sga_post(&sga, closed, OnDone, nullptr), -EINVAL) << "a destroyed endpoint";
    EXPECT_EQ(nic_sim_endpoint_destroy(closed), -EINVAL) << "destroyed twice";
    testing::internal::GetCapturedStderr();
    EXPECT_EQ(sga.count, 1u) << "a refused post leaves the array as it was";
  }
  nic_sga_reset(&sga);
  free(p);
}

int RefusePost(nic_backend *, nic_endpoint *, const nic_sge *, unsigned, nic_completion_fn,
               void *) {
  return -ENOMEM;
}

// A post the backend refuses never reaches the NIC: it adds nothing to the translation-cache
// model. It used to be recorded before the backend's post, so a refused post counted its
// modeled misses and took room in the working set all the same.
TEST_F(Sga, APostTheBackendRefusesIsNotInTheTranslationCacheModel) {
  char *p = static_cast<char *>(malloc(4096));
  memset(p, 'r', 4096);
  ASSERT_EQ(nic_sga_add(&sga, p, 4096), 0);
  const nic_stats before = Stats();
  nic_backend *b = nic_backend_active();
  const auto post = b->post;
  b->post = RefusePost;
  testing::internal::CaptureStderr();
  const int rc = nic_sga_post(&sga, ep, OnDone, nullptr);
  testing::internal::GetCapturedStderr();
  b->post = post;
  EXPECT_EQ(rc, -ENOMEM);
  nic_stats after = Stats();
  EXPECT_EQ(after.nic_modeled_misses, before.nic_modeled_misses);
  EXPECT_EQ(after.nic_working_set, before.nic_working_set);
  EXPECT_EQ(PostAndReceive(), std::string(4096, 'r')) << "the array, kept, posts";
  after = Stats();
  EXPECT_EQ(after.nic_modeled_misses, before.nic_modeled_misses + 2) << "its MPT and MTT entry";
  EXPECT_EQ(after.nic_working_set, before.nic_working_set + 2);
  free(p);
}

} // namespace

// On the sim, nic_wait blocks on the engine's event fd until the completion is ready, and
// nic_event_fd is readable exactly while nic_poll has work.
TEST_F(Sga, WaitAndEventFdOnTheSim) {
  const int efd = nic_event_fd();
  ASSERT_GE(efd, 0) << strerror(-efd);
  EXPECT_EQ(nic_wait(0), 0) << "nothing posted";
  char *p = static_cast<char *>(nic_malloc(4096));
  memset(p, 'w', 4096);
  PostPaused(p, 4096);
  pollfd pf{efd, POLLIN, 0};
  EXPECT_EQ(poll(&pf, 1, 0), 0) << "the NIC is paused: nothing for nic_poll";
  // The NIC goes on only once this thread is blocked in nic_wait's poll (system call 7 or ppoll
  // 271 in /proc): then only the completion's event can wake it before the deadline.
  const pid_t waiter = gettid();
  std::thread nic([waiter] {
    const std::string path = "/proc/self/task/" + std::to_string(waiter) + "/syscall";
    for (int i = 0; i < 200000; i++) { // bounded: a broken wait still ends the test
      long nr = -1;
      if (FILE *f = fopen(path.c_str(), "r")) {
        if (fscanf(f, "%ld", &nr) != 1) nr = -1;
        fclose(f);
      }
      if (nr == SYS_poll || nr == SYS_ppoll) break;
      usleep(100);
    }
    nic_sim_pause(nic_backend_active(), false);
  });
  // Woken by the completion, not by the deadline (after which it polls once more, and would
  // find the completion then too).
  const auto start = std::chrono::steady_clock::now();
  int ran = nic_wait(20000);
  while (ran == -EINTR)
    ran = nic_wait(20000);
  const auto waited = std::chrono::steady_clock::now() - start;
  nic.join();
  EXPECT_LT(waited, std::chrono::milliseconds(20000)) << "nic_wait woke only at its deadline";
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(done_count.load(), 1);
  EXPECT_EQ(poll(&pf, 1, 0), 0) << "nic_wait ran it: the fd is clear";
  free(p);
}
