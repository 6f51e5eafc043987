// Receiving on the dpdk backend through libnicmalloc.so (nic_endpoint_receive on a
// nic_dpdk_endpoint_create endpoint), as an application does. Two runs (tests/plugins.cmake):
// net_ring0, which loops back to itself and hands the receiver the sender's very mbufs, and
// net_af_packet0 on veth-a of a veth pair in a namespace this process makes, whose frames land
// in nicmalloc's receive pool of dataplane memory. Each run is a process of its own (EAL starts
// once per process).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netpacket/packet.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include "dpdk_ring_ports.h"
#include "nicmalloc.h"

namespace {

using Clock = std::chrono::steady_clock;

nic_stats Stats() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

bool UsingDpdk() {
  nic_sga sga;
  nic_sga_init(&sga, 0); // the backend opens on first need
  return std::string(Stats().backend) == "dpdk";
}
#define REQUIRE_DPDK()                                                                             \
  if (!UsingDpdk()) GTEST_SKIP() << "the dpdk backend did not open (see the warning above)"

// What the receive function saw. Every buffer is held when hold is set.
struct Rx {
  std::vector<std::string> msgs;
  std::vector<void *> data, held;
  int dataplane = 0, ends = 0;
  bool hold = false, hold_odd = false;
  uint16_t only_type = 0; // af_packet: count only our ethertype (the kernel sends its own)
  static void Fn(void *arg, void *data, size_t len) {
    auto *r = static_cast<Rx *>(arg);
    if (!data) {
      r->ends++;
      return;
    }
    const bool odd = r->msgs.size() % 2 == 1;
    if (r->hold || (r->hold_odd && odd)) {
      EXPECT_EQ(nic_hold(data), 0);
      r->held.push_back(data);
    }
    const auto *b = static_cast<const unsigned char *>(data);
    if (r->only_type && (len < 14 || ((b[12] << 8) | b[13]) != r->only_type)) return;
    r->msgs.emplace_back(static_cast<char *>(data), len);
    r->data.push_back(data);
    r->dataplane += nic_is_dataplane(data) == 1;
  }
  void ReleaseAll() {
    for (void *p : held)
      EXPECT_EQ(nic_release(p), 0);
    held.clear();
  }
};

// Polls until pred() holds; false after 10 s.
template <class P> bool PollUntil(P pred) {
  for (auto end = Clock::now() + std::chrono::seconds(10); !pred(); nic_poll(0))
    if (Clock::now() > end) return false;
  return true;
}

struct Done {
  int calls = 0, status = 1;
  static void Fn(void *arg, int status) {
    auto *d = static_cast<Done *>(arg);
    d->status = status;
    d->calls++;
  }
};

int Post(nic_endpoint *ep, const std::vector<std::pair<const void *, size_t>> &parts, Done *d) {
  nic_sga sga;
  int rc = nic_sga_init(&sga, 0);
  for (auto &p : parts)
    if (!rc) rc = nic_sga_add(&sga, p.first, p.second);
  return rc ? rc : nic_sga_post(&sga, ep, Done::Fn, d);
}

// The default endpoint, receiving into rx; NULL when it cannot be had or cannot receive.
nic_endpoint *DefaultReceiving(Rx &rx) {
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  if (ep && nic_endpoint_receive(ep, Rx::Fn, &rx)) {
    nic_dpdk_endpoint_destroy(ep);
    return nullptr;
  }
  return ep;
}

std::string Pattern(size_t len, int seed) {
  std::string s(len, '\0');
  for (size_t i = 0; i < len; i++)
    s[i] = static_cast<char>(i * 7 + seed * 13 + 1);
  return s;
}

// net_ring0: every packet arrives, in order, in the very memory the sender posted; a held one
// keeps its mbuf (so the sender's post does not complete) until nic_release.
TEST(DpdkReceiveRing, EveryPacketArrivesHoldsKeepMbufsAndReleaseRecycles) {
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  Rx rx;
  rx.hold_odd = true;
  ASSERT_EQ(nic_endpoint_receive(ep, Rx::Fn, &rx), 0);
  const nic_stats before = Stats();
  constexpr int kPackets = 100;
  std::vector<char *> blocks;
  std::vector<std::string> want;
  std::vector<Done> done(kPackets);
  for (int i = 0; i < kPackets; i++) {
    want.push_back(Pattern(600 + i, i)); // over NICMALLOC_COPY_THRESHOLD: not copied
    // A page each: holds count per page, and a hold must not keep the neighbour's packet.
    blocks.push_back(static_cast<char *>(nic_aligned_alloc(4096, 4096)));
    memcpy(blocks[i], want[i].data(), want[i].size());
    ASSERT_EQ(Post(ep, {{blocks[i], want[i].size()}}, &done[i]), 0);
  }
  ASSERT_TRUE(PollUntil([&] { return rx.msgs.size() == kPackets; })) << rx.msgs.size();
  auto completed = [&] {
    int n = 0;
    for (auto &d : done)
      n += d.calls;
    return n;
  };
  ASSERT_TRUE(PollUntil([&] { return completed() == kPackets / 2; }));
  for (int i = 0; i < kPackets; i++) {
    EXPECT_EQ(rx.msgs[i], want[i]) << "packet " << i;
    EXPECT_EQ(rx.data[i], blocks[i]) << "packet " << i << " is not the sender's memory";
    EXPECT_EQ(done[i].calls, i % 2 ? 0 : 1) << "packet " << i;
  }
  nic_stats s = Stats();
  EXPECT_EQ(s.recv_messages - before.recv_messages, uint64_t{kPackets});
  EXPECT_EQ(s.recv_held_buffers, uint64_t{kPackets / 2});
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), -EBUSY) << "closed with held mbufs out";
  rx.ReleaseAll();
  ASSERT_TRUE(PollUntil([&] { return completed() == kPackets; })) << completed();
  for (auto &d : done)
    EXPECT_EQ(d.status, 0);
  EXPECT_EQ(Stats().recv_held_buffers, 0u);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
  for (char *b : blocks)
    free(b);
}

// More posts in a row than net_ring0's ring holds, nothing received meanwhile: those past the
// ring wait in the endpoint's backlog and arrive in post order, each completing with 0; past
// NIC_DPDK_BACKLOG of them nic_sga_post refuses the message with -EAGAIN, nothing posted, the
// array as it was and no error counted, and the same array is taken once polls made room. Posts
// past the ring completed with -EAGAIN, unsent, while those after them arrived once it drained:
// the receiver got a hole, and every post had returned 0.
TEST(DpdkReceiveRing, PostsPastTheTxRingArriveInOrderAndAFullBacklogRefusesAtOnce) {
  Rx rx;
  nic_endpoint *ep = DefaultReceiving(rx);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  const nic_stats before = Stats();
  constexpr size_t kMost = 3 * NIC_DPDK_BACKLOG; // more than the ring and the backlog together
  std::vector<std::string> want;
  std::vector<Done> done(kMost + 1);
  nic_sga sga;
  int rc = 0;
  for (size_t i = 0; i < kMost && !rc; i++) {
    std::string bytes = std::to_string(i) + ":" + Pattern(100, static_cast<int>(i));
    ASSERT_EQ(nic_sga_init(&sga, 0), 0);
    ASSERT_EQ(nic_sga_add(&sga, bytes.data(), bytes.size()), 0); // copied: its own bytes
    if (!(rc = nic_sga_post(&sga, ep, Done::Fn, &done[i]))) want.push_back(bytes);
  }
  EXPECT_EQ(rc, -EAGAIN) << "never refused";
  EXPECT_GT(want.size(), size_t{NIC_DPDK_BACKLOG});
  EXPECT_EQ(Stats().sga_errors, before.sga_errors) << "a full queue counted as an error";
  if (rc == -EAGAIN) {
    EXPECT_EQ(sga.count, 1u) << "the refused array was changed";
    const size_t refused = want.size();
    EXPECT_EQ(done[refused].calls, 0) << "a refused post completed";
    ASSERT_TRUE(PollUntil([&] { return rx.msgs.size() == refused; })) << rx.msgs.size();
    ASSERT_EQ(nic_sga_post(&sga, ep, Done::Fn, &done[refused]), 0) << "room again";
    want.push_back(std::to_string(refused) + ":" + Pattern(100, static_cast<int>(refused)));
  }
  auto completed = [&] {
    size_t n = 0;
    for (auto &d : done)
      n += d.calls;
    return n;
  };
  EXPECT_TRUE(PollUntil([&] {
    return rx.msgs.size() >= want.size() && completed() >= want.size();
  })) << rx.msgs.size()
      << " received, " << completed() << " completed of " << want.size();
  size_t failed = 0, wrong = 0;
  for (size_t i = 0; i < want.size(); i++) {
    failed += done[i].status != 0;
    wrong += i >= rx.msgs.size() || rx.msgs[i] != want[i];
  }
  EXPECT_EQ(failed, 0u) << "posts completed with an error";
  EXPECT_EQ(wrong, 0u) << "packets out of order or missing";
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
}

// A chain whose segments lie end to end (one block over 64 KiB, two extbuf segments) is handed
// over whole, in place; one whose segments are scattered (a dataplane block and a control one)
// is gathered into one receive buffer of dataplane memory.
TEST(DpdkReceiveRing, ChainsArriveWhole) {
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  Rx rx;
  ASSERT_EQ(nic_endpoint_receive(ep, Rx::Fn, &rx), 0);
  const std::string big = Pattern(70000, 1), a = Pattern(1000, 2), c = Pattern(1000, 3);
  char *bigp = static_cast<char *>(nic_malloc(big.size()));
  char *ap = static_cast<char *>(nic_malloc(a.size()));
  char *cp = static_cast<char *>(malloc(c.size()));
  memcpy(bigp, big.data(), big.size());
  memcpy(ap, a.data(), a.size());
  memcpy(cp, c.data(), c.size());
  Done d1, d2;
  ASSERT_EQ(Post(ep, {{bigp, big.size()}}, &d1), 0);
  ASSERT_EQ(Post(ep, {{ap, a.size()}, {cp, c.size()}}, &d2), 0);
  ASSERT_TRUE(PollUntil([&] { return rx.msgs.size() == 2 && d1.calls && d2.calls; }));
  EXPECT_EQ(rx.msgs[0], big);
  EXPECT_EQ(rx.data[0], bigp) << "a contiguous chain was not handed over in place";
  EXPECT_EQ(rx.msgs[1], a + c);
  EXPECT_EQ(nic_is_dataplane(rx.data[1]), 1) << "a gathered chain is not in dataplane memory";
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
  free(bigp);
  free(ap);
  free(cp);
}

// A scattered chain longer than a receive buffer (two entries: a dataplane block and a control
// one) is gathered into a dataplane block of its length, past a pin step's length too, and a
// hold keeps that block as it keeps any receive buffer. Such packets were dropped (said once)
// while their posts completed with 0.
TEST(DpdkReceiveRing, AScatteredPacketLongerThanAReceiveBufferArrivesWhole) {
  Rx rx;
  rx.hold = true;
  nic_endpoint *ep = DefaultReceiving(rx);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  const size_t sizes[][2] = {{6000, 3000}, {1536 << 10, 1 << 20}};
  std::vector<std::string> want;
  std::vector<char *> blocks;
  Done done[2];
  for (int i = 0; i < 2; i++) {
    const std::string a = Pattern(sizes[i][0], 2 * i), c = Pattern(sizes[i][1], 2 * i + 1);
    blocks.push_back(static_cast<char *>(nic_malloc(a.size())));
    blocks.push_back(static_cast<char *>(malloc(c.size())));
    memcpy(blocks[2 * i], a.data(), a.size());
    memcpy(blocks[2 * i + 1], c.data(), c.size());
    want.push_back(a + c);
    EXPECT_EQ(Post(ep, {{blocks[2 * i], a.size()}, {blocks[2 * i + 1], c.size()}}, &done[i]), 0);
  }
  EXPECT_TRUE(PollUntil([&] { return rx.msgs.size() == 2 && done[0].calls && done[1].calls; }))
      << rx.msgs.size() << " received";
  for (size_t i = 0; i < rx.msgs.size(); i++) {
    EXPECT_EQ(rx.msgs[i].size(), want[i].size()) << "packet " << i;
    EXPECT_TRUE(rx.msgs[i] == want[i]) << "packet " << i;
    EXPECT_EQ(nic_is_dataplane(rx.data[i]), 1) << "packet " << i;
  }
  for (const Done &d : done)
    EXPECT_EQ(d.status, 0);
  EXPECT_EQ(Stats().recv_held_buffers, rx.msgs.size());
  const int busy = nic_dpdk_endpoint_destroy(ep);
  EXPECT_EQ(busy, -EBUSY) << "closed with a held block out";
  rx.ReleaseAll();
  EXPECT_EQ(Stats().recv_held_buffers, 0u);
  if (busy) {
    EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
  }
  for (char *p : blocks)
    free(p);
}

// A scattered packet longer than a chunk (64 MiB here: two control blocks of 40 MiB) cannot be
// gathered into one dataplane block: dropped, counted in dpdk_recv_dropped, and its post
// completes with -ENOMEM. It completed with 0, and nothing counted it.
TEST(DpdkReceiveRing, AScatteredPacketLongerThanAChunkIsDroppedCountedAndItsPostFails) {
  Rx rx;
  nic_endpoint *ep = DefaultReceiving(rx);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  ASSERT_LT(Stats().chunk_size, size_t{80} << 20);
  const size_t half = size_t{40} << 20;
  std::vector<char> a(half, 'a'), c(half, 'c');
  const uint64_t dropped = Stats().dpdk_recv_dropped;
  testing::internal::CaptureStderr();
  Done d;
  EXPECT_EQ(Post(ep, {{c.data(), half}, {a.data(), half}}, &d), 0);
  EXPECT_TRUE(PollUntil([&] { return d.calls == 1; }));
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(d.status, -ENOMEM) << "the sender was not told";
  EXPECT_TRUE(rx.msgs.empty());
  EXPECT_EQ(Stats().dpdk_recv_dropped, dropped + 1);
  EXPECT_NE(said.find("counted in dpdk_recv_dropped"), std::string::npos) << said;
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
}

// One block posted as one entry, a step end near its end: an entry per step, both direct, so the
// packet's segments lie end to end and it is handed over in place. Its last 100 bytes, shorter
// than NICMALLOC_COPY_THRESHOLD, were copied into a bounce slab: the receiver got a scattered
// chain too long for one receive buffer and dropped it, while the post completed with 0.
TEST(DpdkReceiveRing, AOneEntryBlockAcrossAStepEndArrivesInPlace) {
  Rx rx;
  nic_endpoint *ep = DefaultReceiving(rx);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  const size_t step = Stats().pin_step, head = 8000, tail = 100;
  ASSERT_GT(step, 0u);
  char *block = static_cast<char *>(nic_malloc(3 * step));
  ASSERT_NE(block, nullptr);
  char *step_end = block + (step - (reinterpret_cast<uintptr_t>(block) & (step - 1)));
  char *from = step_end - head;
  const std::string want = Pattern(head + tail, 5);
  memcpy(from, want.data(), want.size());
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_EQ(nic_sga_add(&sga, from, want.size()), 0);
  ASSERT_EQ(sga.count, 2u) << "an entry per step";
  EXPECT_EQ(static_cast<const char *>(sga.entry[1].addr), step_end) << "the short piece was copied";
  Done d;
  EXPECT_EQ(nic_sga_post(&sga, ep, Done::Fn, &d), 0);
  EXPECT_TRUE(PollUntil([&] { return d.calls == 1; }));
  EXPECT_EQ(d.status, 0);
  EXPECT_EQ(rx.msgs.size(), 1u) << "the packet did not arrive, and its post said " << d.status;
  if (!rx.msgs.empty()) {
    EXPECT_EQ(rx.msgs[0], want);
    EXPECT_EQ(rx.data[0], from) << "not handed over in place";
  }
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
  free(block);
}

// A receive function that posts and polls from inside: what it sends arrives after the rest of
// the burst it was handed from, not before.
TEST(DpdkReceiveRing, AReceiveFunctionThatPollsKeepsTheOrder) {
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  struct State {
    nic_endpoint *ep;
    std::vector<std::string> got;
    char *more;
    Done more_done;
  } st{ep, {}, static_cast<char *>(nic_aligned_alloc(4096, 4096)), {}};
  memcpy(st.more, Pattern(700, 9).data(), 700);
  auto fn = [](void *arg, void *data, size_t len) {
    auto *s = static_cast<State *>(arg);
    s->got.emplace_back(static_cast<char *>(data), len);
    if (s->got.size() == 1) {
      EXPECT_EQ(Post(s->ep, {{s->more, 700}}, &s->more_done), 0);
      for (int i = 0; i < 100; i++)
        nic_poll(0);
    }
  };
  ASSERT_EQ(nic_endpoint_receive(ep, fn, &st), 0);
  char *first[2];
  Done done[2];
  for (int i = 0; i < 2; i++) {
    first[i] = static_cast<char *>(nic_aligned_alloc(4096, 4096));
    memcpy(first[i], Pattern(700, i).data(), 700);
    ASSERT_EQ(Post(ep, {{first[i], 700}}, &done[i]), 0);
  }
  ASSERT_TRUE(PollUntil([&] { return st.got.size() == 3; })) << st.got.size();
  std::vector<int> order; // which message each one was: 0 and 1 first, then 9
  for (auto &g : st.got)
    order.push_back(g == Pattern(700, 0)   ? 0
                    : g == Pattern(700, 1) ? 1
                    : g == Pattern(700, 9) ? 9
                                           : -1);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 9}))
      << "a packet posted later overtook one already received";
  ASSERT_TRUE(PollUntil([&] { return done[0].calls && done[1].calls && st.more_done.calls; }));
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
  for (char *p : {first[0], first[1], st.more})
    free(p);
}

// Two threads polling at once: each packet is handed over exactly once.
TEST(DpdkReceiveRing, TwoPollingThreadsGetEveryPacketOnce) {
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  struct Seen {
    std::mutex m;
    std::vector<int> count = std::vector<int>(300);
    std::atomic<int> total{0};
  } seen;
  auto fn = [](void *arg, void *data, size_t len) {
    auto *s = static_cast<Seen *>(arg);
    uint32_t i = 0;
    ASSERT_GE(len, sizeof i);
    memcpy(&i, data, sizeof i);
    std::lock_guard<std::mutex> g(s->m);
    if (i < s->count.size()) s->count[i]++;
    s->total++;
  };
  ASSERT_EQ(nic_endpoint_receive(ep, fn, &seen), 0);
  std::atomic<bool> stop{false};
  std::thread other([&] {
    while (!stop)
      nic_poll(0);
  });
  std::vector<char *> blocks;
  std::vector<Done> done(seen.count.size());
  for (uint32_t i = 0; i < seen.count.size(); i++) {
    blocks.push_back(static_cast<char *>(nic_aligned_alloc(4096, 4096)));
    memset(blocks[i], 0, 600);
    memcpy(blocks[i], &i, sizeof i);
    ASSERT_EQ(Post(ep, {{blocks[i], 600}}, &done[i]), 0);
    nic_poll(0);
  }
  const bool all = PollUntil([&] { return seen.total == static_cast<int>(seen.count.size()); });
  stop = true;
  other.join();
  ASSERT_TRUE(all) << seen.total;
  for (size_t i = 0; i < seen.count.size(); i++)
    EXPECT_EQ(seen.count[i], 1) << "packet " << i;
  EXPECT_TRUE(PollUntil([&] { return nic_dpdk_endpoint_destroy(ep) != -EBUSY; }));
  for (char *p : blocks)
    free(p);
}

// Three threads polling at once, with a receive function slow enough for their polls to overlap:
// one endpoint's packets still reach it one call at a time, in the order they were sent.
TEST(DpdkReceiveRing, PollingThreadsHandOneEndpointsPacketsOverOneAtATimeInOrder) {
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  constexpr uint32_t kPackets = 256;
  struct Seen {
    std::atomic<int> inside{0}, most_inside{0}, inversions{0}, total{0};
    std::atomic<int64_t> last{-1};
  } seen;
  auto fn = [](void *arg, void *data, size_t len) {
    auto *s = static_cast<Seen *>(arg);
    if (!data || len < sizeof(uint32_t)) return;
    const int now = s->inside.fetch_add(1) + 1;
    for (int most = s->most_inside.load();
         now > most && !s->most_inside.compare_exchange_weak(most, now);) {
    }
    uint32_t i = 0;
    memcpy(&i, data, sizeof i);
    if (s->last.exchange(i) > int64_t{i}) s->inversions++;
    std::this_thread::sleep_for(std::chrono::microseconds(200)); // room for the others' polls
    s->inside--;
    s->total++;
  };
  ASSERT_EQ(nic_endpoint_receive(ep, fn, &seen), 0);
  std::atomic<bool> stop{false};
  auto poll = [&] {
    while (!stop)
      nic_poll(0);
  };
  std::thread others[2] = {std::thread(poll), std::thread(poll)};
  std::vector<char *> blocks;
  std::vector<Done> done(kPackets);
  for (uint32_t i = 0; i < kPackets; i++) {
    blocks.push_back(static_cast<char *>(nic_aligned_alloc(4096, 4096)));
    memset(blocks[i], 0, 600);
    memcpy(blocks[i], &i, sizeof i);
    ASSERT_EQ(Post(ep, {{blocks[i], 600}}, &done[i]), 0);
  }
  const bool all = PollUntil([&] { return seen.total == static_cast<int>(kPackets); });
  stop = true;
  for (auto &t : others)
    t.join();
  ASSERT_TRUE(all) << seen.total;
  EXPECT_EQ(seen.most_inside, 1) << "the receive function ran on several threads at once";
  EXPECT_EQ(seen.inversions, 0) << "packets reached the receive function out of order";
  EXPECT_TRUE(PollUntil([&] { return nic_dpdk_endpoint_destroy(ep) != -EBUSY; }));
  for (char *p : blocks)
    free(p);
}

// A thread that polls inside a dataplane scope: the backends' work keeps out of dataplane memory
// (DPDK's thread-local blocks, which the C library allocates on the thread's first touch of them,
// here its first poll, were pinned dataplane blocks until the thread's stack was reused), while
// its receive and done functions allocate in its scope as anywhere else in it.
TEST(DpdkReceiveRing, APollInsideADataplaneScopeKeepsTheBackendsMemoryOutOfIt) {
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  struct Seen {
    int received = 0, received_dataplane = 0, done = 0, done_dataplane = 0;
  } seen;
  auto fn = [](void *arg, void *, size_t) {
    auto *s = static_cast<Seen *>(arg);
    void *p = malloc(100);
    s->received_dataplane += nic_is_dataplane(p) == 1;
    free(p);
    s->received++;
  };
  ASSERT_EQ(nic_endpoint_receive(ep, fn, &seen), 0);
  // Frees the tests before left deferred behind their posts would change the count meanwhile.
  ASSERT_TRUE(PollUntil([] {
    const nic_stats s = Stats();
    return s.deferred_pending == 0 && s.inflight_posts == 0;
  }));
  char *block = static_cast<char *>(nic_aligned_alloc(4096, 4096));
  memset(block, 7, 600);
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_EQ(nic_sga_add(&sga, block, 600), 0);
  auto done = [](void *arg, int) {
    auto *s = static_cast<Seen *>(arg);
    void *p = malloc(100);
    s->done_dataplane += nic_is_dataplane(p) == 1;
    free(p);
    s->done++;
  };
  ASSERT_EQ(nic_sga_post(&sga, ep, done, &seen), 0);
  size_t live_before = 0, live_after = 0;
  bool all = false;
  std::thread poller([&] { // a thread that never touched DPDK's thread-local variables
    nic_dataplane_begin();
    live_before = Stats().dataplane_live;
    all = PollUntil([&] { return seen.received == 1 && seen.done == 1; });
    live_after = Stats().dataplane_live;
    nic_dataplane_end();
  });
  poller.join();
  ASSERT_TRUE(all) << seen.received << " received, " << seen.done << " done";
  EXPECT_EQ(live_after, live_before) << "the poll left dataplane blocks of its own";
  EXPECT_EQ(seen.received_dataplane, 1) << "the receive function left the thread's scope";
  EXPECT_EQ(seen.done_dataplane, 1) << "the done function left the thread's scope";
  EXPECT_TRUE(PollUntil([&] { return nic_dpdk_endpoint_destroy(ep) != -EBUSY; }));
  free(block);
}

// An application's port pair (its own pool, which net_ring never takes from): b receives what a
// sends. With every packet held, b stops at its cap (512: net_ring tells no descriptor count),
// says so once, and gets the rest after the release.
TEST(DpdkReceiveRing, ApplicationPortStallsAtItsCapAndResumes) {
  nic_endpoint *probe = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_EQ(nic_dpdk_endpoint_destroy(probe), 0);
  int ports[2];
  ASSERT_EQ(StartRingPortPair("rx", 1024, ports), "");
  nic_endpoint *a = nic_dpdk_endpoint_create(ports[0], 0),
               *b = nic_dpdk_endpoint_create(ports[1], 0);
  ASSERT_TRUE(a && b);
  Rx rx;
  rx.hold = true;
  ASSERT_EQ(nic_endpoint_receive(b, Rx::Fn, &rx), 0);
  constexpr int kCap = 512, kMore = 8;
  std::vector<char *> blocks;
  std::vector<Done> done(kCap + kMore);
  for (int i = 0; i < kCap + kMore; i++) {
    blocks.push_back(static_cast<char *>(nic_aligned_alloc(4096, 4096)));
    memcpy(blocks[i], Pattern(600, i).data(), 600);
    ASSERT_EQ(Post(a, {{blocks[i], 600}}, &done[i]), 0);
  }
  const uint64_t stalls = Stats().recv_stalls;
  ASSERT_TRUE(PollUntil([&] { return Stats().recv_stalls != stalls; })) << rx.msgs.size();
  for (int i = 0; i < 1000; i++)
    nic_poll(0);
  EXPECT_EQ(rx.msgs.size(), size_t{kCap}) << "received past the cap";
  EXPECT_EQ(Stats().recv_stalls, stalls + 1) << "one stall said more than once";
  rx.hold = false;
  rx.ReleaseAll();
  ASSERT_TRUE(PollUntil([&] { return rx.msgs.size() == kCap + kMore; })) << rx.msgs.size();
  for (int i = 0; i < kCap + kMore; i++)
    EXPECT_EQ(rx.msgs[i], Pattern(600, i)) << "packet " << i;
  ASSERT_TRUE(PollUntil([&] {
    for (auto &d : done)
      if (!d.calls) return false;
    return true;
  }));
  EXPECT_EQ(nic_dpdk_endpoint_destroy(b), 0);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(a), 0);
  for (char *p : blocks)
    free(p);
}

// A receive function's state: what arrived, and up to hold_up_to of the buffers held.
struct Holder {
  long got = 0;
  size_t hold_up_to = 0;
  std::vector<void *> held;
  static void Fn(void *arg, void *data, size_t) {
    auto *h = static_cast<Holder *>(arg);
    if (!data) return;
    h->got++;
    if (h->held.size() < h->hold_up_to && nic_hold(data) == 0) h->held.push_back(data);
  }
};

// net_null0 and net_null1, the two ports nicmalloc started, share its one receive pool, and
// net_null takes a burst's mbufs from it all at once. Port 0's receiver, alone, holds all but 11
// buffers; then port 1 receives too. It got nothing, for good, with fewer than a burst (32) free,
// and no stall was counted. Now it receives; holding what it gets, it empties the pool and the
// stall is counted; after the release both ports receive again.
TEST(DpdkReceiveNull, PortsSharingThePoolEachReceiveAndStallsAreCounted) {
  Holder port[2];
  nic_endpoint *ep[2] = {nic_dpdk_endpoint_create(0, 0), nic_dpdk_endpoint_create(1, 0)};
  REQUIRE_DPDK();
  ASSERT_TRUE(ep[0] && ep[1]) << "net_null0 and net_null1 are not ports 0 and 1";
  constexpr size_t kPool = 511; // NIC_DPDK_RX_MBUFS
  port[0].hold_up_to = kPool - 11;
  ASSERT_EQ(nic_endpoint_receive(ep[0], Holder::Fn, &port[0]), 0);
  ASSERT_TRUE(PollUntil([&] { return port[0].held.size() == port[0].hold_up_to; }));
  ASSERT_EQ(nic_endpoint_receive(ep[1], Holder::Fn, &port[1]), 0);
  EXPECT_TRUE(PollUntil([&] { return port[1].got > 100; }))
      << "port 1 got " << port[1].got << " packets with 11 buffers free";
  const uint64_t stalls = Stats().recv_stalls;
  port[1].hold_up_to = kPool;
  EXPECT_TRUE(PollUntil([&] { return Stats().recv_stalls > stalls; }))
      << "no stall counted with " << port[0].held.size() + port[1].held.size() << " of " << kPool
      << " buffers held";
  for (Holder &p : port) {
    p.hold_up_to = 0;
    for (void *d : p.held)
      EXPECT_EQ(nic_release(d), 0);
    p.held.clear();
  }
  const long got[2] = {port[0].got, port[1].got};
  EXPECT_TRUE(PollUntil([&] { return port[0].got > got[0] && port[1].got > got[1]; }))
      << "not both received after the release";
  for (nic_endpoint *e : ep)
    EXPECT_TRUE(PollUntil([&] { return nic_dpdk_endpoint_destroy(e) != -EBUSY; }));
}

// Posts n one-entry messages of 600 bytes, each in a page of its own, to ep; the blocks go to
// blocks (the caller frees them), the completions to done (sized n at least).
void PostPages(nic_endpoint *ep, int n, int seed, std::vector<char *> &blocks,
               std::vector<Done> &done) {
  for (int i = 0; i < n; i++) {
    char *p = static_cast<char *>(nic_aligned_alloc(4096, 4096));
    ASSERT_NE(p, nullptr);
    blocks.push_back(p);
    memcpy(p, Pattern(600, seed + i).data(), 600);
    ASSERT_EQ(Post(ep, {{p, 600}}, &done[i]), 0) << "message " << i;
  }
}

// net_ring0 and net_ring1, nicmalloc's own ports, each looping back to itself: net_ring hands
// the receiver its sender's mbufs and takes none from nicmalloc's receive pool. Each endpoint
// holds more than half the pool's size, and neither stalls. Each stalled at 255, half the pool,
// its share of a pool it never took from.
TEST(DpdkReceiveRings, RingEndpointsHoldPastAShareOfThePoolTheyTakeNothingFrom) {
  nic_endpoint *ep[2] = {nic_dpdk_endpoint_create(0, 0), nic_dpdk_endpoint_create(1, 0)};
  REQUIRE_DPDK();
  ASSERT_TRUE(ep[0] && ep[1]) << "net_ring0 and net_ring1 are not ports 0 and 1";
  Rx rx[2];
  rx[0].hold = rx[1].hold = true;
  for (int i = 0; i < 2; i++)
    ASSERT_EQ(nic_endpoint_receive(ep[i], Rx::Fn, &rx[i]), 0);
  constexpr int kHeld = 400; // NIC_DPDK_RX_MBUFS is 511: over half of it each
  std::vector<char *> blocks;
  std::vector<Done> done[2] = {std::vector<Done>(kHeld), std::vector<Done>(kHeld)};
  const uint64_t stalls = Stats().recv_stalls;
  for (int i = 0; i < 2; i++)
    PostPages(ep[i], kHeld, 1000 * i, blocks, done[i]);
  EXPECT_TRUE(PollUntil([&] { return rx[0].msgs.size() == kHeld && rx[1].msgs.size() == kHeld; }))
      << "held " << rx[0].msgs.size() << " and " << rx[1].msgs.size() << " of " << kHeld;
  EXPECT_EQ(Stats().recv_stalls, stalls) << "a ring endpoint stalled";
  for (int i = 0; i < 2; i++)
    for (size_t m = 0; m < rx[i].msgs.size(); m++)
      EXPECT_EQ(rx[i].msgs[m], Pattern(600, 1000 * i + static_cast<int>(m))) << i << ":" << m;
  for (Rx &r : rx) {
    r.hold = false;
    r.ReleaseAll();
  }
  for (int i = 0; i < 2; i++) {
    EXPECT_TRUE(PollUntil([&] {
      for (const Done &d : done[i])
        if (!d.calls) return false;
      return true;
    })) << "posts of endpoint "
        << i << " still in flight after the release";
    EXPECT_EQ(nic_dpdk_endpoint_destroy(ep[i]), 0);
  }
  for (char *p : blocks)
    free(p);
}

// net_null0 fills its receive queue from nicmalloc's pool; net_ring1 takes nothing from it (its
// receiver gets the sender's mbufs). Both receive; the ring endpoint gets and holds scattered
// packets, gathered into one buffer each; then the null endpoint holds what it gets. It reaches
// the whole pool: the ring endpoint is no sharer of it, and gathered its packets into lent memory,
// not the pool, while the null one received. The null endpoint stalled at 255, half the pool.
TEST(DpdkReceiveNullAndRing, ARingEndpointLeavesThePoolToTheEndpointsThatFillFromIt) {
  Holder null;
  nic_endpoint *np = nic_dpdk_endpoint_create(0, 0), *rp = nic_dpdk_endpoint_create(1, 0);
  REQUIRE_DPDK();
  ASSERT_TRUE(np && rp) << "net_null0 and net_ring1 are not ports 0 and 1";
  Rx ring;
  ring.hold = true;
  ASSERT_EQ(nic_endpoint_receive(rp, Rx::Fn, &ring), 0);
  ASSERT_EQ(nic_endpoint_receive(np, Holder::Fn, &null), 0);
  ASSERT_TRUE(PollUntil([&] { return null.got > 100; }));
  constexpr int kScattered = 20;
  std::vector<std::string> want;
  std::vector<char *> blocks;
  std::vector<Done> done(kScattered);
  for (int i = 0; i < kScattered; i++) {
    const std::string a = Pattern(700, 2 * i), c = Pattern(500, 2 * i + 1);
    blocks.push_back(static_cast<char *>(nic_aligned_alloc(4096, 4096)));
    blocks.push_back(static_cast<char *>(malloc(c.size()))); // never end to end with the first
    memcpy(blocks[2 * i], a.data(), a.size());
    memcpy(blocks[2 * i + 1], c.data(), c.size());
    want.push_back(a + c);
    ASSERT_EQ(Post(rp, {{blocks[2 * i], a.size()}, {blocks[2 * i + 1], c.size()}}, &done[i]), 0);
  }
  EXPECT_TRUE(PollUntil([&] { return ring.msgs.size() == kScattered; })) << ring.msgs.size();
  EXPECT_EQ(ring.msgs, want);
  EXPECT_EQ(Stats().dpdk_recv_dropped, 0u);
  constexpr size_t kPool = 511; // NIC_DPDK_RX_MBUFS
  null.hold_up_to = kPool;
  EXPECT_TRUE(PollUntil([&] { return null.held.size() == kPool; }))
      << "the null endpoint held " << null.held.size() << " of the pool's " << kPool
      << ", the ring endpoint " << ring.held.size();
  null.hold_up_to = 0;
  for (void *d : null.held)
    EXPECT_EQ(nic_release(d), 0);
  null.held.clear();
  ring.hold = false;
  ring.ReleaseAll();
  EXPECT_TRUE(PollUntil([&] { return nic_dpdk_endpoint_destroy(np) != -EBUSY; }));
  EXPECT_TRUE(PollUntil([&] { return nic_dpdk_endpoint_destroy(rp) != -EBUSY; }));
  for (const Done &d : done)
    EXPECT_EQ(d.status, 0);
  for (char *p : blocks)
    free(p);
}

int Run(const std::string &cmd) {
  return system(("timeout 10 " + cmd + " >/dev/null 2>&1").c_str());
}

// A veth pair (veth-a, veth-b) in a namespace of our own, entered by this thread before the
// backend opens (EAL's af_packet port binds veth-a then). The name goes at once: the namespace
// and the pair vanish with the process.
std::string VethPair() {
  std::string ns = "nicmalloc-rx-" + std::to_string(getpid()), in = "ip -n " + ns + " ";
  if (geteuid() != 0) return "not root: cannot create a namespace and veth pair";
  if (Run("ip netns add " + ns)) return "`ip netns add` failed (iproute2?)";
  bool ok = !Run(in + "link add veth-a type veth peer name veth-b") &&
            !Run(in + "link set veth-a up") && !Run(in + "link set veth-b up");
  int fd = ok ? open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC) : -1;
  ok = fd >= 0 && setns(fd, CLONE_NEWNET) == 0;
  if (fd >= 0) close(fd);
  Run("ip netns del " + ns);
  return ok ? "" : "could not create a veth pair in namespace " + ns;
}

constexpr uint16_t kType = 0x88B5;

std::string Frame(uint32_t seq) {
  std::string f("\xff\xff\xff\xff\xff\xff\x02\x00\x00\x00\x00\x01\x88\xb5", 14);
  f.append(reinterpret_cast<const char *>(&seq), sizeof seq);
  f += Pattern(100 + seq % 300, static_cast<int>(seq));
  return f;
}

// net_af_packet0 on veth-a: frames sent on veth-b land in dataplane memory, bytes equal. Holding
// every buffer empties the pool: the endpoint stalls once (counted), the frames after wait in
// the kernel, and every one arrives after the release.
TEST(DpdkReceiveAfPacket, FramesLandInDataplaneAndHoldsPastThePoolStallUntilRelease) {
  const std::string why = VethPair();
  if (!why.empty()) GTEST_SKIP() << "net_af_packet receive test skipped: " << why;
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr) << "net_af_packet0 on veth-a is not the default port";
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(kType));
  ASSERT_GE(fd, 0) << strerror(errno);
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(kType);
  sll.sll_ifindex = static_cast<int>(if_nametoindex("veth-b"));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr *>(&sll), sizeof sll), 0) << strerror(errno);
  uint32_t sent = 0;
  auto send_frames = [&](uint32_t n) {
    for (uint32_t i = 0; i < n; i++, sent++) {
      const std::string f = Frame(sent);
      ASSERT_EQ(send(fd, f.data(), f.size(), 0), static_cast<ssize_t>(f.size())) << strerror(errno);
    }
  };

  Rx rx;
  rx.hold = true;
  rx.only_type = kType;
  ASSERT_EQ(nic_endpoint_receive(ep, Rx::Fn, &rx), 0);
  const uint64_t stalls = Stats().recv_stalls;
  // Batches smaller than the kernel's ring for the port, each received before the next goes,
  // until every receive buffer is held.
  while (Stats().recv_stalls == stalls && sent < 2000) {
    send_frames(32);
    ASSERT_TRUE(PollUntil([&] { return rx.msgs.size() == sent || Stats().recv_stalls != stalls; }))
        << rx.msgs.size() << " of " << sent;
  }
  ASSERT_EQ(Stats().recv_stalls, stalls + 1) << "holding every buffer never stalled";
  const size_t at_stall = rx.msgs.size();
  EXPECT_GT(at_stall, 0u);
  EXPECT_LT(at_stall, size_t{sent} + 1);
  send_frames(8);
  for (int i = 0; i < 1000; i++)
    nic_poll(0);
  EXPECT_EQ(Stats().recv_stalls, stalls + 1) << "one stall said more than once";
  EXPECT_EQ(rx.msgs.size(), at_stall) << "received while every buffer was held";
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), -EBUSY) << "closed with held mbufs out";

  rx.hold = false;
  rx.ReleaseAll();
  ASSERT_TRUE(PollUntil([&] { return rx.msgs.size() == sent; }))
      << rx.msgs.size() << " of " << sent << ": frames were lost in the stall";
  for (uint32_t i = 0; i < sent; i++) {
    EXPECT_EQ(rx.msgs[i], Frame(i)) << "frame " << i;
    if (HasFailure()) break;
  }
  EXPECT_EQ(rx.dataplane, static_cast<int>(sent)) << "frames outside dataplane memory";
  EXPECT_EQ(Stats().recv_held_buffers, 0u);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
  close(fd);
}

} // namespace
