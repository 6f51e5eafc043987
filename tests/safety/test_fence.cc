// Write fencing (NICMALLOC_FENCE=wait): nic_fence_write and realloc wait for the DMA of posted
// memory. The sim engine is paused so that an unfenced write would reach the receiver; the test
// decides from the bytes received, never from elapsed time.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nicmalloc.h"
extern "C" {
#include "backend.h"
#include "safety.h"
#include "settings.h"
#include "sim_nic.h"
}

#include "fence_integrity.h"
#include "sim_endpoint_fixture.h"

namespace {

class Fence : public SimEndpointTest {
protected:
  void SetUp() override {
    saved = *nic_safety_config();
    SimEndpointTest::SetUp();
  }
  void TearDown() override {
    SimEndpointTest::TearDown();
    nic_safety_config_set(&saved);
  }
  void Set(void (*change)(struct nic_safety_config *)) {
    struct nic_safety_config c = *nic_safety_config();
    change(&c);
    nic_safety_config_set(&c);
  }
  struct nic_safety_config saved;
};

TEST_F(Fence, WriteAfterPostWaitsForTheDma) {
  char *p = static_cast<char *>(nic_malloc(8192));
  memset(p, 'A', 8192);
  const uint64_t waits = Stats().fence_waits;
  const int target = done_count.load() + 1;
  PostPaused(p, 8192);
  std::atomic<bool> wrote{false};
  std::thread writer([&] {
    EXPECT_EQ(nic_fence_write(p + 100, 10), 0); // any byte of the posted range
    memset(p, 'B', 8192);
    wrote = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20)); // room for a broken fence to fail
  EXPECT_FALSE(wrote.load()) << "the fence returned while the DMA was still pending";
  Drain(target);
  writer.join();
  ASSERT_EQ(inbox.msgs.size(), 1u);
  EXPECT_EQ(inbox.msgs[0], std::string(8192, 'A')) << "the write reached the wire";
  EXPECT_EQ(Stats().fence_waits, waits + 1);
  free(p);
}

TEST_F(Fence, NothingInFlightReturnsAtOnce) {
  char *p = static_cast<char *>(nic_malloc(1000));
  const uint64_t waits = Stats().fence_waits;
  EXPECT_EQ(nic_fence_write(p, 1000), 0);
  int local = 0;
  EXPECT_EQ(nic_fence_write(&local, sizeof local), 0);
  EXPECT_EQ(Stats().fence_waits, waits);
  free(p);
}

// The caller has -ETIMEDOUT: a program that keeps trying gets the line once, not on every call,
// and every timeout is counted all the same.
TEST_F(Fence, GivesUpAfterTheTimeoutWithAMessageSaidOnce) {
  Set([](struct nic_safety_config *c) { c->fence_timeout_ms = 5; });
  char *p = static_cast<char *>(malloc(4096));
  memset(p, 'T', 4096);
  const int target = done_count.load() + 1;
  PostPaused(p, 4096);
  const uint64_t timeouts = Stats().fence_timeouts;
  testing::internal::CaptureStderr();
  for (int i = 0; i < 20; i++)
    EXPECT_EQ(nic_fence_write(p, 4096), -ETIMEDOUT);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("NICMALLOC_FENCE_TIMEOUT_MS"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(Stats().fence_timeouts, timeouts + 20);
  Drain(target);
  EXPECT_EQ(inbox.msgs.at(0), std::string(4096, 'T'));
  EXPECT_EQ(nic_fence_write(p, 4096), 0) << "done now";
  free(p);
}

TEST_F(Fence, OffDoesNotWait) {
  Set([](struct nic_safety_config *c) { c->fence = NIC_FENCE_OFF; });
  char *p = static_cast<char *>(nic_malloc(4096));
  const int target = done_count.load() + 1;
  PostPaused(p, 4096);
  const uint64_t waits = Stats().fence_waits;
  EXPECT_EQ(nic_fence_write(p, 4096), 0);
  EXPECT_EQ(Stats().fence_waits, waits);
  Drain(target);
  free(p);
}

TEST_F(Fence, BadRanges) {
  char c = 0;
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_fence_write(&c, 0), -NIC_ERANGE);
  EXPECT_EQ(nic_fence_write(reinterpret_cast<void *>(UINTPTR_MAX - 8), 100), -NIC_ERANGE);
  EXPECT_EQ(nic_fence_write(reinterpret_cast<void *>(uintptr_t(1) << 47), 16), -NIC_ERANGE);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("empty or overflowing range"), std::string::npos) << err;
}

TEST_F(Fence, ReallocWaitsWhenAsked) {
  Set([](struct nic_safety_config *c) { c->realloc_inflight = NIC_REALLOC_WAIT; });
  char *p = static_cast<char *>(malloc(4096));
  memset(p, 'W', 4096);
  const int target = done_count.load() + 1;
  PostPaused(p, 4096);
  char *q = nullptr;
  std::thread writer([&] {
    q = static_cast<char *>(realloc(p, 4096));
    if (q) memset(q, 'X', 4096);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Drain(target);
  writer.join();
  EXPECT_EQ(q, p) << "waited, then kept in place";
  EXPECT_EQ(inbox.msgs.at(0), std::string(4096, 'W'));
  free(q);
}

// A realloc that waited in vain moves the block and succeeds: its one line must say so, not
// claim the ETIMEDOUT that nic_fence_write returns.
TEST_F(Fence, ReallocWaitTimeoutSaysItMovedTheBlock) {
  Set([](struct nic_safety_config *c) {
    c->realloc_inflight = NIC_REALLOC_WAIT;
    c->fence_timeout_ms = 50;
  });
  char *p = static_cast<char *>(nic_malloc(4096));
  memset(p, 'R', 4096);
  const int target = done_count.load() + 1;
  PostPaused(p, 4096);
  testing::internal::CaptureStderr();
  char *q = static_cast<char *>(realloc(p, 4096));
  std::string err = testing::internal::GetCapturedStderr();
  ASSERT_NE(q, nullptr);
  EXPECT_NE(q, p) << "the block the NIC still reads was kept in place";
  EXPECT_NE(err.find("moving the block instead"), std::string::npos) << err;
  EXPECT_EQ(err.find("giving up with ETIMEDOUT"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  memset(q, 'S', 4096);
  Drain(target);
  EXPECT_EQ(inbox.msgs.at(0), std::string(4096, 'R'));
  free(q);
}

TEST_F(Fence, ReallocMovesByDefault) {
  char *p = static_cast<char *>(nic_malloc(4096));
  memset(p, 'M', 4096);
  const int target = done_count.load() + 1;
  PostPaused(p, 4096);
  char *q = static_cast<char *>(realloc(p, 4000));
  ASSERT_NE(q, nullptr);
  EXPECT_NE(q, p);
  EXPECT_EQ(std::string(q, 4000), std::string(4000, 'M')) << "contents moved";
  memset(q, 'N', 4000);
  Drain(target);
  EXPECT_EQ(inbox.msgs.at(0), std::string(4096, 'M'));
  free(q);
}

// Each word of NICMALLOC_FENCE is its mode (safety maps the table's words by position).
TEST(FenceSetting, EveryModeParsesAndABadOneWarnsAndWaits) {
  const std::pair<const char *, nic_fence_mode> modes[] = {{"off", NIC_FENCE_OFF},
                                                           {"wait", NIC_FENCE_WAIT},
                                                           {"protect", NIC_FENCE_PROTECT},
                                                           {"detect", NIC_FENCE_DETECT}};
  for (const auto &m : modes) {
    setenv("NICMALLOC_FENCE", m.first, 1);
    nic_settings_reload(false); // settings are copied at start-up
    testing::internal::CaptureStderr();
    EXPECT_EQ(nic_safety_fence_setting(), m.second) << m.first;
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  }
  setenv("NICMALLOC_FENCE", "sometimes", 1);
  nic_settings_reload(false);
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_safety_fence_setting(), NIC_FENCE_WAIT);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(
      err.find("NICMALLOC_FENCE=sometimes: expected off, wait, protect or detect; using wait"),
      std::string::npos)
      << err;
  unsetenv("NICMALLOC_FENCE");
  nic_settings_reload(false);
}

// wait: the same traffic as protect's integrity test, each rewrite after nic_fence_write: every
// message arrives byte for byte as posted.
TEST_F(Fence, EveryMessageArrivesAsPostedWhileBlocksAreFreedAndRewritten) {
  fence_integrity::Checker checker;
  nic_endpoint *own = nic_sim_endpoint_create(fence_integrity::Receive, &checker, 0);
  ASSERT_NE(own, nullptr);
  fence_integrity::Options opt;
  opt.fence_before_rewrite = true;
  EXPECT_EQ(fence_integrity::Run(own, &checker, opt), 0);
  while (nic_sim_endpoint_destroy(own) == -EBUSY)
    nic_poll(0);
  EXPECT_EQ(checker.checked.load(), opt.total());
  EXPECT_EQ(checker.mismatched.load(), 0u) << "messages arrived modified";
}

// A range that starts in posted memory and ends past the 47-bit user space (without wrapping)
// was looked up nowhere and taken as clear: the fence returned 0 at once with the DMA pending.
// Every public entry taking (p, len) refuses such a range.
TEST_F(Fence, ARangeEndingPastTheUserSpaceIsRefusedNotTakenAsClear) {
  char *p = static_cast<char *>(nic_malloc(8192));
  memset(p, 'U', 8192);
  const int target = done_count.load() + 1;
  PostPaused(p, 8192);
  const size_t past = (uintptr_t(1) << 47) - reinterpret_cast<uintptr_t>(p) + 4096;
  EXPECT_EQ(nic_fence_write(p, past), -NIC_ERANGE);
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  EXPECT_EQ(nic_sga_add(&sga, reinterpret_cast<void *>((uintptr_t(1) << 47) - 512), 4096),
            -NIC_ERANGE);
  EXPECT_EQ(sga.count, 0u);
  Drain(target);
  free(p);
}

} // namespace
