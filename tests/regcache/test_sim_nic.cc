// The sim NIC backend: registrations enforced at DMA time, bytes read at DMA time (not at post),
// rkeys, post validation, concurrency, delay tables, close, and the translation-cache model.
// No assertion depends on wall time: ordering is forced with the engine's pause hook and judged
// from the bytes the receiver got. Waits only have a generous hang guard.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "sim_backend_receiver.h"

extern "C" {
#include "settings.h"
#include "sim_delays.h"
#include "sim_nic.h"
}

namespace {

// Fails the test instead of hanging forever; not a timing assertion.
template <class Pred> bool eventually(Pred pred, struct nic_backend *b, bool poll = true) {
  auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > limit) return false;
    if (poll) b->poll(b, 0);
    usleep(20);
  }
  return true;
}

std::string temp_file(const std::string &text) {
  char path[] = "/tmp/nic-sim-delays-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), (ssize_t)text.size());
  close(fd);
  return path;
}

class SimNic : public ::testing::Test {
protected:
  struct nic_backend *b = nullptr;
  nic_endpoint *ep = nullptr;
  Received rx;

  static nic_sim_config config(bool paused = false) {
    nic_sim_config c;
    nic_sim_config_defaults(&c);
    c.fixed_delay_ns = 0;
    c.tcache = nic_tcache_preset_find("tiny")->params;
    c.start_paused = paused;
    return c;
  }
  void open(const nic_sim_config &c, unsigned ep_flags = 0) {
    b = nic_sim_open(&c);
    ASSERT_NE(b, nullptr);
    ep = nic_sim_endpoint_open_ex(b, receive, &rx, ep_flags);
    ASSERT_NE(ep, nullptr);
  }
  void TearDown() override {
    if (b) b->close(b);
  }
  nic_registration reg(void *p, size_t len, unsigned access = NIC_ACCESS_LOCAL) {
    nic_registration r{};
    EXPECT_EQ(b->reg(b, p, len, access, &r), 0);
    return r;
  }
  static nic_sge sge(const void *p, uint32_t len, const nic_registration &r) {
    return nic_sge{p, len, r.lkey, r.handle};
  }
  int post(const nic_sge *s, unsigned n, Done &d) { return b->post(b, ep, s, n, on_done, &d); }
  void wait(Done &d, int calls = 1) {
    ASSERT_TRUE(eventually([&] { return d.calls >= calls; }, b)) << "completion never came";
  }
  nic_sim_stats stats() {
    nic_sim_stats s;
    nic_sim_get_stats(b, &s);
    return s;
  }
};

} // namespace

TEST_F(SimNic, CoveredEntriesDeliverExactBytes) {
  open(config());
  std::vector<char> buf(4096);
  for (size_t i = 0; i < buf.size(); i++)
    buf[i] = (char)('a' + i % 26);
  nic_registration r = reg(buf.data(), buf.size());
  nic_sge s[2] = {sge(&buf[10], 10, r), sge(&buf[4000], 96, r)}; // the second ends at the end
  Done d;
  ASSERT_EQ(post(s, 2, d), 0);
  wait(d);
  EXPECT_EQ(d.status, 0);
  ASSERT_EQ(rx.count(), 1u);
  EXPECT_EQ(rx.msgs[0], std::string(&buf[10], 10) + std::string(&buf[4000], 96));
  EXPECT_EQ(stats().bytes, 106u);
  EXPECT_EQ(stats().delivered, 1u);
}

// A receiver that cannot take a message says so (-errno): the message is not delivered, and its
// post completes with that error, as with one the NIC could not read.
TEST_F(SimNic, AMessageItsReceiverRefusesCompletesWithTheReceiversError) {
  const nic_sim_config c = config();
  b = nic_sim_open(&c);
  ASSERT_NE(b, nullptr);
  ep = nic_sim_endpoint_open(
      b, [](void *, const void *, size_t) { return -ENOBUFS; }, nullptr);
  ASSERT_NE(ep, nullptr);
  std::vector<char> buf(100, 'r');
  nic_registration r = reg(buf.data(), buf.size());
  nic_sge s = sge(buf.data(), 100, r);
  Done d;
  ASSERT_EQ(post(&s, 1, d), 0);
  wait(d);
  EXPECT_EQ(d.status, -ENOBUFS);
  EXPECT_EQ(stats().refused, 1u);
  EXPECT_EQ(stats().delivered, 0u);
  EXPECT_EQ(stats().bytes, 0u);
}

TEST_F(SimNic, EntryCrossingTheEndOfItsRegistrationFails) {
  open(config());
  std::vector<char> buf(8192, 'x');
  nic_registration r = reg(buf.data(), 4096);
  nic_sge s = sge(&buf[4000], 200, r);
  Done d;
  ASSERT_EQ(post(&s, 1, d), 0);
  wait(d);
  EXPECT_EQ(d.status, -EFAULT);
  EXPECT_EQ(rx.count(), 0u);
  EXPECT_EQ(stats().protection_errors, 1u);
}

TEST_F(SimNic, UnregisteredMemoryFailsAndNothingIsDelivered) {
  open(config());
  std::vector<char> a(4096, 'a'), other(4096, 'o');
  nic_registration r = reg(a.data(), a.size());
  Done wrong_buffer, bogus_key, second_bad;
  nic_sge s1 = sge(other.data(), 64, r); // right key, memory it does not cover
  nic_sge s2 = {a.data(), 64, 0x7777abcd, 0};
  nic_sge s3[2] = {sge(a.data(), 64, r), sge(other.data(), 64, r)};
  ASSERT_EQ(post(&s1, 1, wrong_buffer), 0);
  ASSERT_EQ(post(&s2, 1, bogus_key), 0);
  ASSERT_EQ(post(s3, 2, second_bad), 0);
  wait(second_bad);
  wait(bogus_key);
  wait(wrong_buffer);
  EXPECT_EQ(wrong_buffer.status, -EFAULT);
  EXPECT_EQ(bogus_key.status, -EFAULT);
  EXPECT_EQ(second_bad.status, -EFAULT) << "one bad entry fails the whole post";
  EXPECT_EQ(rx.count(), 0u);
  EXPECT_EQ(stats().protection_errors, 3u);
}

TEST_F(SimNic, DeregIsBusyWhileAPostIsInFlight) {
  open(config(/*paused=*/true));
  std::vector<char> buf(4096, 'b');
  nic_registration r = reg(buf.data(), buf.size());
  nic_sge s = sge(buf.data(), 100, r);
  Done d;
  ASSERT_EQ(post(&s, 1, d), 0);
  EXPECT_EQ(b->dereg(b, &r), -EBUSY);
  usleep(20000); // only a broken pause could deliver meanwhile: no timing claim on the sim
  EXPECT_EQ(stats().delivered, 0u) << "a paused engine performs no DMA";
  nic_sim_pause(b, false);
  wait(d);
  EXPECT_EQ(d.status, 0);
  EXPECT_EQ(b->dereg(b, &r), 0);
  EXPECT_EQ(b->dereg(b, &r), -EINVAL) << "already gone";
}

TEST_F(SimNic, OldLkeyFailsAfterDeregEvenWhenTheSlotIsReused) {
  open(config());
  std::vector<char> buf(4096, 'k');
  nic_registration old = reg(buf.data(), buf.size());
  ASSERT_EQ(b->dereg(b, &old), 0);
  nic_registration fresh = reg(buf.data(), buf.size());
  EXPECT_NE(fresh.lkey, old.lkey);
  nic_sge stale = sge(buf.data(), 64, old), good = sge(buf.data(), 64, fresh);
  Done d1, d2;
  ASSERT_EQ(post(&stale, 1, d1), 0);
  ASSERT_EQ(post(&good, 1, d2), 0);
  wait(d2);
  wait(d1);
  EXPECT_EQ(d1.status, -EFAULT);
  EXPECT_EQ(d2.status, 0);
  EXPECT_EQ(rx.count(), 1u);
}

TEST_F(SimNic, BytesAreReadAtDmaTimeNotAtPostTime) {
  open(config(/*paused=*/true));
  std::vector<char> buf(256, 'A');
  nic_registration r = reg(buf.data(), buf.size());
  nic_sge s = sge(buf.data(), 256, r);
  Done first;
  ASSERT_EQ(post(&s, 1, first), 0);
  memset(buf.data(), 'B', buf.size()); // the lifetime bug: changed while the NIC holds it
  nic_sim_pause(b, false);
  wait(first);
  ASSERT_EQ(rx.count(), 1u);
  EXPECT_EQ(rx.msgs[0], std::string(256, 'B')) << "the receiver must see the modified bytes";
  Done second; // and a change after the completion does not reach the receiver
  ASSERT_EQ(post(&s, 1, second), 0);
  wait(second);
  memset(buf.data(), 'C', buf.size());
  ASSERT_EQ(rx.count(), 2u);
  EXPECT_EQ(rx.msgs[1], std::string(256, 'B'));
}

TEST_F(SimNic, RkeyOnlyWhenRemoteAccessIsAsked) {
  open(config());
  static char buf[8][64];
  std::set<uint32_t> lkeys;
  unsigned access[] = {NIC_ACCESS_LOCAL, NIC_ACCESS_LOCAL_WRITE, NIC_ACCESS_REMOTE_READ,
                       NIC_ACCESS_REMOTE_WRITE, NIC_ACCESS_LOCAL_WRITE | NIC_ACCESS_REMOTE_READ};
  for (int i = 0; i < 5; i++) {
    nic_registration r = reg(buf[i], sizeof buf[i], access[i]);
    EXPECT_NE(r.lkey, 0u);
    lkeys.insert(r.lkey);
    if (access[i] & (NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE))
      EXPECT_NE(r.rkey, 0u) << "access " << access[i];
    else
      EXPECT_EQ(r.rkey, 0u) << "access " << access[i];
  }
  EXPECT_EQ(lkeys.size(), 5u);
}

TEST_F(SimNic, RegistrationArgumentsAndTableLimit) {
  nic_sim_config c = config();
  c.max_regions = 2;
  open(c);
  static char buf[3][64];
  nic_registration r{};
  EXPECT_EQ(b->reg(b, nullptr, 64, 0, &r), -EINVAL);
  EXPECT_EQ(b->reg(b, buf[0], 0, 0, &r), -EINVAL);
  EXPECT_EQ(b->reg(b, buf[0], b->caps.max_region_bytes + 1, 0, &r), -EINVAL);
  EXPECT_EQ(b->reg(b, buf[0], 64, 1u << 9, &r), -EINVAL);
  reg(buf[0], 64);
  reg(buf[1], 64);
  EXPECT_EQ(b->reg(b, buf[2], 64, 0, &r), -ENOMEM) << "max_regions reached";
  EXPECT_EQ(stats().regions, 2u);
}

TEST_F(SimNic, RejectsBadPostsWithoutCallingDone) {
  open(config());
  std::vector<char> buf(4096);
  nic_registration r = reg(buf.data(), buf.size());
  std::vector<nic_sge> many(b->caps.max_sge + 1, sge(buf.data(), 8, r));
  nic_sge empty = sge(buf.data(), 0, r);
  Done d;
  EXPECT_EQ(post(many.data(), b->caps.max_sge + 1, d), -E2BIG);
  EXPECT_EQ(post(many.data(), 0, d), -EINVAL);
  EXPECT_EQ(post(&empty, 1, d), -EINVAL);
  EXPECT_EQ(b->post(b, nullptr, many.data(), 1, on_done, &d), -EINVAL);
  EXPECT_EQ(post(many.data(), b->caps.max_sge, d), 0) << "exactly max_sge is fine";
  wait(d);
  EXPECT_EQ(b->poll(b, 0), 0);
  EXPECT_EQ(d.calls, 1) << "only the accepted post completes";
  EXPECT_EQ(stats().rejected, 4u);
  EXPECT_EQ(stats().posts, 1u);
}

TEST(SimNicSettings, CapsAndMaxSgeFromEnvironment) {
  nic_sim_config c;
  nic_sim_config_defaults(&c);
  EXPECT_EQ(c.max_sge, 32u);
  setenv("NICMALLOC_SIM_MAX_SGE", "4", 1);
  setenv("NICMALLOC_SIM_DELAYS", "fixed:0", 1);
  nic_settings_reload(false); // settings are copied at start-up
  struct nic_backend *b = nic_backend_sim_open();
  ASSERT_NE(b, nullptr);
  EXPECT_STREQ(b->name, "sim");
  EXPECT_EQ(b->caps.max_sge, 4u);
  EXPECT_EQ(b->caps.max_region_bytes, (size_t)1 << 30);
  EXPECT_EQ(b->caps.max_regions, 65536u);
  EXPECT_TRUE(b->caps.zero_copy);
  b->close(b);
  setenv("NICMALLOC_SIM_MAX_SGE", "0", 1);
  setenv("NICMALLOC_SIM_SEED", "many", 1);
  nic_settings_reload(false); // settings are copied at start-up
  testing::internal::CaptureStderr();
  nic_sim_config_from_env(&c);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(c.max_sge, 32u);
  EXPECT_EQ(c.fixed_delay_ns, 0);
  EXPECT_NE(err.find("NICMALLOC_SIM_MAX_SGE=0"), std::string::npos) << err;
  EXPECT_NE(err.find("NICMALLOC_SIM_SEED=many"), std::string::npos) << err;
  unsetenv("NICMALLOC_SIM_MAX_SGE");
  unsetenv("NICMALLOC_SIM_SEED");
  unsetenv("NICMALLOC_SIM_DELAYS");
}

TEST_F(SimNic, ConcurrentPostersGetEveryCompletionExactlyOnce) {
  nic_sim_config c = config();
  c.fixed_delay_ns = -1; // the built-in table: waits of 2..200 us exercise the timed path
  open(c);
  constexpr int kThreads = 4, kPosts = 1000;
  std::vector<char> buf(1 << 16, 'z');
  nic_registration r = reg(buf.data(), buf.size());
  std::vector<std::atomic<int>> calls(kThreads * kPosts);
  std::atomic<uint64_t> expected_bytes{0};
  auto done = [](void *arg, int status) {
    if (status == 0) static_cast<std::atomic<int> *>(arg)->fetch_add(1);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPosts; i++) {
        uint32_t len = 1 + (uint32_t)(t * 131 + i * 17) % 512;
        nic_sge s[2] = {sge(&buf[(size_t)i * 7], len, r), sge(&buf[1000], 3, r)};
        ASSERT_EQ(b->post(b, ep, s, 2, done, &calls[(size_t)(t * kPosts + i)]), 0);
        expected_bytes += len + 3;
        if (i % 16 == 0) b->poll(b, 8); // pollers race with each other and the engine
      }
    });
  for (auto &t : threads)
    t.join();
  ASSERT_TRUE(eventually([&] { return stats().completions == kThreads * kPosts; }, b));
  for (size_t i = 0; i < calls.size(); i++)
    ASSERT_EQ(calls[i].load(), 1) << "post " << i;
  nic_sim_stats s = stats();
  EXPECT_EQ(s.posts, (uint64_t)kThreads * kPosts);
  EXPECT_EQ(s.bytes, expected_bytes.load());
  EXPECT_EQ(s.in_flight, 0u);
  uint64_t received = 0;
  for (auto &m : rx.msgs)
    received += m.size();
  EXPECT_EQ(received, expected_bytes.load());
  EXPECT_EQ(b->dereg(b, &r), 0) << "every hold was released";
}

TEST_F(SimNic, CloseCompletesEachPostOnceAndCancelsQueuedOnes) {
  open(config());
  std::vector<char> buf(4096, 'c');
  nic_registration r = reg(buf.data(), buf.size());
  nic_sge s = sge(buf.data(), 64, r);
  Done delivered, queued[3];
  ASSERT_EQ(post(&s, 1, delivered), 0);
  // Delivered but not polled: its completion must still run once, with its real status.
  ASSERT_TRUE(eventually([&] { return stats().delivered == 1; }, b, /*poll=*/false));
  nic_sim_pause(b, true);
  for (Done &d : queued)
    ASSERT_EQ(post(&s, 1, d), 0);
  b->close(b);
  b = nullptr;
  EXPECT_EQ(delivered.calls, 1);
  EXPECT_EQ(delivered.status, 0);
  for (Done &d : queued) {
    EXPECT_EQ(d.calls, 1);
    EXPECT_EQ(d.status, -ECANCELED);
  }
}

TEST_F(SimNic, EngineCompletionEndpointNeedsNoPoll) {
  open(config(), NIC_SIM_EP_ENGINE_COMPLETIONS);
  std::vector<char> buf(128, 'e');
  nic_registration r = reg(buf.data(), buf.size());
  nic_sge s = sge(buf.data(), 128, r);
  Done d;
  ASSERT_EQ(post(&s, 1, d), 0);
  ASSERT_TRUE(eventually([&] { return d.calls == 1; }, b, /*poll=*/false));
  EXPECT_EQ(d.status, 0);
  EXPECT_EQ(b->poll(b, 0), 0);
  EXPECT_EQ(d.calls, 1);
}

TEST_F(SimNic, EndpointCloseIsBusyWhileItsPostsAreInFlight) {
  open(config(/*paused=*/true));
  std::vector<char> buf(64, 'q');
  nic_registration r = reg(buf.data(), buf.size());
  nic_sge s = sge(buf.data(), 64, r);
  Done d;
  ASSERT_EQ(post(&s, 1, d), 0);
  EXPECT_EQ(nic_sim_endpoint_close(b, ep), -EBUSY);
  nic_sim_pause(b, false);
  wait(d);
  EXPECT_EQ(nic_sim_endpoint_close(b, ep), 0);
  ep = nullptr;
}

TEST_F(SimNic, TranslationCacheModelSeesEveryEntryAtDmaTime) {
  open(config()); // tiny: 8 entries, 4 KiB pages, 1 us per miss
  void *mem = aligned_alloc(4096, 3 * 4096);
  nic_registration r = reg(mem, 3 * 4096);
  EXPECT_EQ(stats().entries_needed, 4u) << "1 MPT + 3 MTT";
  nic_sge s = sge(static_cast<char *>(mem) + 4000, 200, r); // pages 0 and 1
  Done d1, d2;
  ASSERT_EQ(post(&s, 1, d1), 0);
  wait(d1);
  ASSERT_EQ(post(&s, 1, d2), 0);
  wait(d2);
  nic_sim_stats st = stats();
  EXPECT_EQ(st.modeled_misses, 3u);
  EXPECT_EQ(st.modeled_ns, 3000u);
  EXPECT_EQ(st.tcache.hits, 3u);
  EXPECT_EQ(st.tcache.ws_pages, 2u);
  EXPECT_EQ(b->dereg(b, &r), 0);
  EXPECT_EQ(stats().entries_needed, 0u);
  EXPECT_EQ(stats().tcache.resident, 0u) << "dereg invalidates the cached entries";
  free(mem);
}

TEST_F(SimNic, DelayTableFileAndSeedAreUsed) {
  std::string path = temp_file("# sampled delays, us\n3\n7.5   # a comment\n\n11\n");
  constexpr int kPosts = 50;
  nic_sim_delays ref;
  unsigned line;
  ASSERT_EQ(nic_sim_delays_load(&ref, path.c_str(), 42, &line), 0);
  uint64_t expected = 0;
  for (int i = 0; i < kPosts; i++) {
    uint64_t v = nic_sim_delays_next(&ref);
    EXPECT_TRUE(v == 3000 || v == 7500 || v == 11000) << v;
    expected += v;
  }
  nic_sim_delays_release(&ref);
  std::vector<uint64_t> seq[2];
  for (uint64_t seed : {42, 43}) {
    ASSERT_EQ(nic_sim_delays_load(&ref, path.c_str(), seed, &line), 0);
    for (int i = 0; i < kPosts; i++)
      seq[seed - 42].push_back(nic_sim_delays_next(&ref));
    nic_sim_delays_release(&ref);
  }
  EXPECT_NE(seq[0], seq[1]) << "the seed picks the sequence";
  nic_sim_config c = config();
  c.fixed_delay_ns = -1;
  c.delays_path = path.c_str();
  c.seed = 42;
  open(c);
  std::vector<char> buf(64, 'd');
  nic_registration r = reg(buf.data(), buf.size());
  nic_sge s = sge(buf.data(), 64, r);
  Done d;
  for (int i = 0; i < kPosts; i++)
    ASSERT_EQ(post(&s, 1, d), 0);
  wait(d, kPosts);
  nic_sim_stats st = stats();
  EXPECT_EQ(st.delay_table_len, 3u);
  EXPECT_FALSE(st.delay_table_builtin);
  EXPECT_EQ(st.delay_ns, expected) << "the engine draws the same sequence from the same seed";
  unlink(path.c_str());
}

TEST_F(SimNic, BadDelayFilesWarnAndFallBackToTheBuiltInTable) {
  struct Case {
    std::string text, says;
  } cases[] = {{"5\nabc\n", "line 2"}, {"5\n-3\n", "line 2"}, {"# nothing\n\n", "no delays"}};
  for (const Case &k : cases) {
    std::string path = temp_file(k.text);
    nic_sim_config c = config();
    c.fixed_delay_ns = -1;
    c.delays_path = path.c_str();
    testing::internal::CaptureStderr();
    struct nic_backend *sim = nic_sim_open(&c);
    std::string err = testing::internal::GetCapturedStderr();
    ASSERT_NE(sim, nullptr);
    EXPECT_NE(err.find("warning"), std::string::npos) << err;
    EXPECT_NE(err.find(k.says), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one warning: " << err;
    nic_sim_stats st;
    nic_sim_get_stats(sim, &st);
    EXPECT_TRUE(st.delay_table_builtin);
    EXPECT_EQ(st.delay_table_len, 64u);
    sim->close(sim);
    unlink(path.c_str());
  }
  nic_sim_config c = config();
  c.fixed_delay_ns = -1;
  c.delays_path = "/nonexistent/delays";
  testing::internal::CaptureStderr();
  open(c);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot be read"), std::string::npos) << err;
  EXPECT_TRUE(stats().delay_table_builtin);
}

// Neither a FIFO (it would hold the backend's start until someone wrote to it) nor a device
// that never ends a line is read.
TEST(SimDelays, OnlyARegularFileIsRead) {
  const std::string fifo = "/tmp/nic-delays-fifo-" + std::to_string(getpid());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  nic_sim_delays d{};
  unsigned line = 1;
  EXPECT_EQ(nic_sim_delays_load(&d, fifo.c_str(), 1, &line), -ESPIPE);
  unlink(fifo.c_str());
  EXPECT_EQ(nic_sim_delays_load(&d, "/dev/zero", 1, &line), -ESPIPE);
  EXPECT_EQ(line, 0u);
  EXPECT_EQ(d.ns, nullptr) << "untouched";
}

TEST(SimDelays, SeedReplaysTheSequenceAndFixedIsFixed) {
  nic_sim_delays a, b, other, fixed;
  nic_sim_delays_builtin(&a, 7);
  nic_sim_delays_builtin(&b, 7);
  nic_sim_delays_builtin(&other, 8);
  std::vector<uint64_t> sa, sb, so;
  for (int i = 0; i < 200; i++) {
    sa.push_back(nic_sim_delays_next(&a));
    sb.push_back(nic_sim_delays_next(&b));
    so.push_back(nic_sim_delays_next(&other));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, so);
  std::vector<uint64_t> sorted = sa;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_GE(sorted.front(), 2000u);
  EXPECT_LE(sorted.back(), 200000u);
  EXPECT_GE(sorted[100], 4000u) << "median near 5 us";
  EXPECT_LE(sorted[100], 6000u);
  nic_sim_delays_fixed(&fixed, 1234);
  for (int i = 0; i < 10; i++)
    EXPECT_EQ(nic_sim_delays_next(&fixed), 1234u);
}

// Endpoints are made and unmade through the ops table (backend.h), as the public constructors
// do for every backend: the sim reads its receiver from the parameters and delivers to it.
TEST_F(SimNic, EndpointsComeFromTheOpsTable) {
  const nic_sim_config c = config();
  b = nic_sim_open(&c);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(b->endpoint_create, nullptr);
  ASSERT_NE(b->endpoint_destroy, nullptr);
  nic_endpoint_params params{};
  params.receive = receive;
  params.arg = &rx;
  ep = b->endpoint_create(b, &params);
  ASSERT_NE(ep, nullptr);
  std::string text = "through the ops table";
  nic_registration r = reg(text.data(), text.size());
  nic_sge s = sge(text.data(), (uint32_t)text.size(), r);
  Done d;
  ASSERT_EQ(post(&s, 1, d), 0);
  wait(d);
  EXPECT_EQ(d.status, 0);
  ASSERT_EQ(rx.count(), 1u);
  EXPECT_EQ(rx.msgs[0], text);
  EXPECT_EQ(b->endpoint_destroy(b, ep), 0);
}

// The event fd polls readable once a completion waits for poll(), and poll() clears it.
TEST_F(SimNic, EventFdIsReadableWhileCompletionsWaitForPoll) {
  open(config(/*paused=*/true));
  const int efd = b->event_fd(b);
  ASSERT_GE(efd, 0);
  std::vector<char> buf(256, 'v');
  nic_registration r = reg(buf.data(), buf.size());
  nic_sge s = sge(buf.data(), 256, r);
  Done d[2];
  ASSERT_EQ(post(&s, 1, d[0]), 0);
  ASSERT_EQ(post(&s, 1, d[1]), 0);
  pollfd p{efd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0) << "nothing has completed: the engine is paused";
  nic_sim_pause(b, false);
  ASSERT_TRUE(eventually([&] { return stats().delivered == 2; }, b, /*poll=*/false));
  ASSERT_EQ(poll(&p, 1, 60000), 1) << "two completions wait for poll()";
  EXPECT_EQ(b->poll(b, 0), 2);
  EXPECT_EQ(poll(&p, 1, 0), 0) << "poll() ran them all: cleared";
}
