// nic_endpoint_receive on io_uring endpoints over loopback (regcache/uring/uring_recv.c through
// safety/receive.c): a TCP stream arrives whole and in order, UDP datagrams whole, in dataplane
// buffers; holds keep a buffer out of the ring until nic_release; a program that never releases
// stalls the endpoint and the TCP sender, and both resume after release; many threads; fork;
// the peer's close and reset; destroy while a buffer is held. UringReceiveSmall.* run with
// 4 buffers of 4 KiB (tests/uring.cmake): a datagram longer than a buffer is reported, not cut.
// UringReceiveCapped.* run with NICMALLOC_RECV_HELD_MAX=256K: the cap on held bytes over all
// endpoints, its back-pressure, the wake of nic_wait at a release, destroy with messages waiting,
// a sim endpoint's held messages counted but not capped.
#include "uring_loopback.h"

#include <algorithm>
#include <random>
#include <set>

#include <sys/syscall.h>

#include <sys/wait.h>

using namespace uring_test;

namespace {

// What a receive function got: the bytes in order, each buffer's address, the end calls.
struct Sink {
  static void Fn(void *arg, void *data, size_t len) {
    auto *s = static_cast<Sink *>(arg);
    std::lock_guard<std::mutex> g(s->mu);
    if (!data) {
      s->ends++;
      s->end_len = len;
      return;
    }
    if (s->ends) s->after_end++;
    s->data.append(static_cast<char *>(data), len);
    s->msgs.emplace_back(static_cast<char *>(data), len);
    s->bufs.push_back(data);
    if (!nic_is_dataplane(data)) s->not_dataplane++;
    if (reinterpret_cast<uintptr_t>(data) % 4096) s->unaligned++;
    if (s->hold && nic_hold(data) == 0) s->held.push_back(data);
  }
  size_t Size() {
    std::lock_guard<std::mutex> g(mu);
    return data.size();
  }
  size_t Calls() {
    std::lock_guard<std::mutex> g(mu);
    return bufs.size();
  }
  int Ends() {
    std::lock_guard<std::mutex> g(mu);
    return ends;
  }
  // Releases every hold taken so far.
  void ReleaseAll() {
    std::vector<void *> h;
    {
      std::lock_guard<std::mutex> g(mu);
      h.swap(held);
    }
    for (void *p : h)
      EXPECT_EQ(nic_release(p), 0);
  }
  std::mutex mu;
  std::string data;
  std::vector<std::string> msgs;
  std::vector<void *> bufs, held;
  bool hold = false;
  int ends = 0, after_end = 0, not_dataplane = 0, unaligned = 0;
  size_t end_len = 1;
};

// Sends all of [p, p + n) on a blocking socket in pieces of random sizes.
void SendSplit(int fd, const char *p, size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  for (size_t off = 0; off < n;) {
    size_t want = std::min<size_t>(n - off, 1 + rng() % 200000);
    ssize_t r = send(fd, p + off, want, MSG_NOSIGNAL);
    if (r <= 0) {
      ADD_FAILURE() << "send: " << strerror(errno);
      return;
    }
    off += static_cast<size_t>(r);
  }
}

class UringReceive : public UringSgaTest {
protected:
  nic_endpoint *Receiving(int fd, Sink *s) {
    nic_endpoint *ep = Endpoint(fd);
    if (ep) {
      EXPECT_EQ(nic_endpoint_receive(ep, Sink::Fn, s), 0);
    }
    return ep;
  }
};

TEST_F(UringReceive, TcpStreamArrivesWholeInOrderInDataplaneBuffers) {
  LoopbackPair pair;
  Sink sink;
  ASSERT_NE(Receiving(pair.rx, &sink), nullptr);
  Region data(6 << 20, 3);
  std::thread sender(SendSplit, pair.tx, data.base, data.len, 11u);
  EXPECT_TRUE(NicPollUntil([&] { return sink.Size() >= data.len; }));
  sender.join();
  ASSERT_EQ(sink.Size(), data.len);
  EXPECT_TRUE(sink.data == data.Bytes(0, data.len)) << "the stream arrived out of order";
  EXPECT_EQ(sink.not_dataplane, 0) << "every receive buffer is dataplane memory";
  EXPECT_EQ(sink.unaligned, 0) << "buffers start on a page";
  EXPECT_EQ(sink.Ends(), 0);
  EXPECT_EQ(nic_endpoint_status(eps[0]), 0);
  EXPECT_GE(NicStats().recv_bytes, data.len);
  EXPECT_EQ(NicStats().recv_stalls, 0u) << "nothing was held: no stall";
}

// The polls nicmalloc makes for itself (a fence waiting for completions, the protect poller
// thread) run completions only: a message waits, ready, for the program's own nic_poll, so that
// receive functions never run on nicmalloc's threads beside the program's.
TEST_F(UringReceive, ACompletionsOnlyPollLeavesMessagesForTheProgramsPoll) {
  LoopbackPair pair;
  Sink sink;
  ASSERT_NE(Receiving(pair.rx, &sink), nullptr);
  const int efd = nic_event_fd();
  ASSERT_GE(efd, 0);
  ASSERT_EQ(send(pair.tx, "ready", 5, MSG_NOSIGNAL), 5);
  struct pollfd p = {efd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1) << "the message never became ready";
  struct nic_backend *b = nic_backend_active();
  b->poll(b, NIC_POLL_COMPLETIONS_ONLY);
  EXPECT_EQ(sink.Calls(), 0u) << "a completions-only poll ran the receive function";
  p.revents = 0;
  EXPECT_EQ(poll(&p, 1, 0), 1) << "the event fd was cleared with the message still waiting";
  EXPECT_TRUE(NicPollUntil([&] { return sink.Size() >= 5; }));
  EXPECT_EQ(sink.data, "ready");
}

TEST_F(UringReceive, UdpDatagramsOfOneByteTo64KiBArriveWhole) {
  UdpPair pair;
  Sink sink;
  ASSERT_NE(Receiving(pair.rx, &sink), nullptr);
  std::vector<size_t> sizes = {1, 2, 100, 1472, 4095, 4096, 4097, 9000, 32768, 65507};
  std::mt19937 rng(5);
  for (int i = 0; i < 150; i++)
    sizes.push_back(1 + rng() % 65507);
  Region data(65507 * 2, 9);
  std::vector<std::string> sent;
  for (size_t i = 0; i < sizes.size(); i++) {
    sent.push_back(data.Bytes(i * 397 % 65507, sizes[i]));
    ASSERT_EQ(send(pair.tx, sent.back().data(), sizes[i], 0), static_cast<ssize_t>(sizes[i]))
        << strerror(errno);
    // A burst at a time, so that the kernel fills buffers faster than they are handed over.
    if (i % 40 == 39) {
      EXPECT_TRUE(NicPollUntil([&] { return sink.Calls() == i + 1; }));
    }
  }
  EXPECT_TRUE(NicPollUntil([&] { return sink.Calls() >= sent.size(); }));
  ASSERT_EQ(sink.msgs.size(), sent.size());
  for (size_t i = 0; i < sent.size(); i++)
    EXPECT_TRUE(sink.msgs[i] == sent[i]) << "datagram " << i << " of " << sizes[i] << " bytes";
  EXPECT_EQ(sink.not_dataplane, 0);
  EXPECT_EQ(NicStats().recv_stalls, 0u) << "buffers waiting to be handed over are no stall";
}

// A UDP datagram of 0 bytes takes no receive buffer (the kernel names none): it is still handed
// over, in its place among the others, as 0 bytes; one held is nothing to give back. Sent in a
// burst before any poll, as many as twice the buffers wait; the rest are dropped and counted.
TEST_F(UringReceive, EmptyDatagramsAreHandedOverInOrder) {
  UdpPair pair;
  Sink sink;
  nic_endpoint *ep = Receiving(pair.rx, &sink);
  ASSERT_NE(ep, nullptr);
  const std::vector<std::string> sent = {"a", "", "bb", "", "", "ccc"};
  for (const std::string &d : sent) {
    ASSERT_EQ(send(pair.tx, d.data(), d.size(), 0), static_cast<ssize_t>(d.size()));
    ASSERT_TRUE(NicPollUntil([&] {
      return sink.Calls() == static_cast<size_t>(&d - &sent[0] + 1);
    })) << "datagram "
        << &d - &sent[0] << " (" << d.size() << " bytes) was not handed over";
  }
  ASSERT_EQ(sink.msgs.size(), sent.size());
  for (size_t i = 0; i < sent.size(); i++)
    EXPECT_EQ(sink.msgs[i], sent[i]) << i;
  EXPECT_EQ(sink.not_dataplane, 0);
  void *empty = sink.bufs[1];
  EXPECT_EQ(nic_hold(empty), 0);
  EXPECT_EQ(nic_release(empty), 0) << "a hold on an empty datagram's pointer";

  nic_uring_stats before{}, after{};
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_active(), &before));
  const unsigned buffers = static_cast<unsigned>(atoi(getenv("NICMALLOC_RECV_BUFFERS") ?: "32"));
  const size_t burst = 3 * buffers, calls = sink.Calls();
  testing::internal::CaptureStderr();
  for (size_t i = 0; i < burst; i++)
    ASSERT_EQ(send(pair.tx, "", 0, 0), 0);
  usleep(100000); // into the socket, and the kernel's completions, before any poll
  ASSERT_TRUE(NicPollUntil([&] {
    return nic_uring_get_stats(nic_backend_active(), &after) &&
           sink.Calls() - calls + (after.recv_empty_dropped - before.recv_empty_dropped) >= burst;
  }));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_GE(sink.Calls() - calls, 2u * buffers) << "as many as twice the buffers wait";
  EXPECT_EQ(sink.Calls() - calls + (after.recv_empty_dropped - before.recv_empty_dropped), burst);
  EXPECT_GT(after.recv_empty_dropped, before.recv_empty_dropped) << "the burst overflowed nothing";
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(nic_endpoint_status(ep), 0);
}

TEST_F(UringReceive, AHeldBufferIsReusedOnlyAfterItsRelease) {
  UdpPair pair;
  Sink sink;
  ASSERT_NE(Receiving(pair.rx, &sink), nullptr);
  auto one = [&](int i) {
    std::string m = "message " + std::to_string(i);
    ASSERT_EQ(send(pair.tx, m.data(), m.size(), 0), static_cast<ssize_t>(m.size()));
    size_t want = sink.Calls() + 1;
    ASSERT_TRUE(NicPollUntil([&] { return sink.Calls() == want; }));
    ASSERT_EQ(sink.msgs.back(), m);
  };
  sink.hold = true;
  one(0);
  sink.hold = false;
  ASSERT_EQ(sink.held.size(), 1u);
  void *held = sink.held[0];
  EXPECT_EQ(NicStats().recv_held_buffers, 1u);
  // Every other buffer goes round twice and more (32 by default) while the held one stays out.
  for (int i = 1; i <= 100; i++)
    one(i);
  EXPECT_EQ(std::count(sink.bufs.begin(), sink.bufs.end(), held), 1)
      << "the held buffer was handed out again";
  EXPECT_EQ(std::string(static_cast<char *>(held), 9), "message 0") << "overwritten while held";
  sink.ReleaseAll();
  EXPECT_EQ(NicStats().recv_held_buffers, 0u);
  for (int i = 101; i <= 200; i++)
    one(i);
  EXPECT_GE(std::count(sink.bufs.begin(), sink.bufs.end(), held), 2)
      << "the released buffer never came back";
}

TEST_F(UringReceive, NeverReleasingStallsOnceAndTheTcpSenderWaitsThenNothingIsLost) {
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  Sink sink;
  sink.hold = true;
  ASSERT_NE(Receiving(pair.rx, &sink), nullptr);
  Region data(16 << 20, 4);
  ASSERT_EQ(fcntl(pair.tx, F_SETFL, fcntl(pair.tx, F_GETFL) | O_NONBLOCK), 0);
  const uint64_t stalls0 = NicStats().recv_stalls;
  size_t off = 0;
  // Send without waiting until the socket refuses more once the endpoint has stalled: every
  // buffer is held, so nothing more is read and TCP closes its window.
  testing::internal::CaptureStderr();
  bool refused_after_stall = false;
  for (auto end = Clock::now() + kLimit; !refused_after_stall && Clock::now() < end;) {
    ssize_t r =
        send(pair.tx, data.base + off, std::min<size_t>(data.len - off, 1 << 16), MSG_NOSIGNAL);
    if (r > 0) off += static_cast<size_t>(r);
    ASSERT_TRUE(r > 0 || errno == EAGAIN) << strerror(errno);
    ASSERT_LT(off, data.len) << "the sender never had to wait";
    if (r < 0) refused_after_stall = NicStats().recv_stalls > stalls0;
    nic_poll(0);
  }
  ASSERT_TRUE(refused_after_stall);
  // Stalled: nothing can be handed over until a release, however often one polls.
  const size_t calls = sink.Calls();
  for (int i = 0; i < 200; i++)
    nic_poll(0);
  EXPECT_EQ(sink.Calls(), calls);
  EXPECT_EQ(send(pair.tx, data.base + off, 4096, MSG_NOSIGNAL), -1);
  const std::string err = testing::internal::GetCapturedStderr();
  size_t said = 0;
  for (size_t at = 0; (at = err.find("every receive buffer", at)) != std::string::npos; at++)
    said++;
  EXPECT_EQ(said, 1u) << err;
  EXPECT_GE(NicStats().recv_held_buffers, 1u);
  // Released, it goes on: the rest is sent and all of it arrives in order.
  sink.hold = false;
  sink.ReleaseAll();
  for (auto end = Clock::now() + kLimit; off < data.len && Clock::now() < end;) {
    ssize_t r =
        send(pair.tx, data.base + off, std::min<size_t>(data.len - off, 1 << 16), MSG_NOSIGNAL);
    if (r > 0) off += static_cast<size_t>(r);
    sink.ReleaseAll(); /* buffers received while the last ones were being held */
    nic_poll(0);
  }
  ASSERT_EQ(off, data.len);
  EXPECT_TRUE(NicPollUntil([&] {
    sink.ReleaseAll();
    return sink.Size() >= data.len;
  }));
  EXPECT_TRUE(sink.data == data.Bytes(0, data.len)) << "bytes lost or reordered";
  EXPECT_EQ(NicStats().recv_held_buffers, 0u);
}

TEST_F(UringReceive, ManyThreadsSendAndPollAndEachStreamStaysInOrder) {
  constexpr int kPairs = 4, kPollers = 3;
  constexpr size_t kBytes = 2 << 20;
  std::vector<std::unique_ptr<LoopbackPair>> pairs;
  std::vector<std::unique_ptr<Sink>> sinks;
  std::vector<std::unique_ptr<Region>> data;
  std::vector<nic_endpoint *> senders;
  for (int i = 0; i < kPairs; i++) {
    pairs.push_back(std::make_unique<LoopbackPair>());
    sinks.push_back(std::make_unique<Sink>());
    data.push_back(std::make_unique<Region>(kBytes, 20 + i));
    ASSERT_NE(Receiving(pairs[i]->rx, sinks[i].get()), nullptr);
    // Half the streams are sent through io_uring too: send and receive CQEs on one ring.
    senders.push_back(i % 2 ? Endpoint(pairs[i]->tx) : nullptr);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kPollers; t++)
    threads.emplace_back([&] {
      while (!stop)
        if (nic_poll(0) == 0) usleep(50);
    });
  std::vector<Done> dones(kPairs);
  std::atomic<int> posted[kPairs] = {};
  for (int i = 0; i < kPairs; i++)
    threads.emplace_back([&, i] {
      if (!senders[i]) return SendSplit(pairs[i]->tx, data[i]->base, kBytes, 40 + i);
      std::mt19937 rng(60 + i);
      for (size_t off = 0; off < kBytes;) {
        size_t n = std::min<size_t>(kBytes - off, 1 + rng() % 100000);
        while (posted[i] - dones[i].calls >= 32) // a bounded number in flight
          usleep(50);
        ASSERT_EQ(PostParts(senders[i], {{data[i]->base + off, n}}, &dones[i]), 0);
        posted[i]++;
        off += n;
      }
    });
  for (int i = 0; i < kPairs; i++)
    EXPECT_TRUE(NicPollUntil([&] { return sinks[i]->Size() >= kBytes; })) << "stream " << i;
  for (int i = 0; i < kPairs; i++)
    EXPECT_TRUE(NicPollUntil([&] { return dones[i].calls == posted[i]; }));
  stop = true;
  for (auto &t : threads)
    t.join();
  for (int i = 0; i < kPairs; i++) {
    EXPECT_TRUE(sinks[i]->data == data[i]->Bytes(0, kBytes)) << "stream " << i;
    EXPECT_EQ(sinks[i]->not_dataplane, 0);
    EXPECT_EQ(dones[i].failed, 0);
  }
}

// io_uring cancels a request when the thread that submitted it exits: the receive goes on.
TEST_F(UringReceive, ReceivingStartedByAThreadThatExitedGoesOn) {
  LoopbackPair pair;
  Sink sink;
  nic_endpoint *ep = Endpoint(pair.rx);
  ASSERT_NE(ep, nullptr);
  std::thread([&] { EXPECT_EQ(nic_endpoint_receive(ep, Sink::Fn, &sink), 0); }).join();
  ASSERT_EQ(send(pair.tx, "still here", 10, 0), 10);
  EXPECT_TRUE(NicPollUntil([&] { return sink.Size() == 10; }));
  EXPECT_EQ(sink.data, "still here");
  EXPECT_EQ(sink.Ends(), 0);
  EXPECT_EQ(nic_endpoint_status(ep), 0);
}

// A child of fork receives on an endpoint of its own, through an io_uring instance of its own and
// into dataplane buffers, and waits for its messages on nic_event_fd, while the parent's endpoint
// goes on receiving the parent's (README, fork).
TEST_F(UringReceive, AChildOfForkReceivesOnAnEndpointOfItsOwn) {
  UdpPair parents, childs;
  Sink sink;
  ASSERT_NE(Receiving(parents.rx, &sink), nullptr);
  fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(30);
    Sink child;
    nic_endpoint *own = nic_uring_endpoint_create(childs.rx);
    if (!own) _exit(2);
    if (nic_endpoint_receive(own, Sink::Fn, &child)) _exit(3);
    for (int i = 0; i < 10; i++) {
      const std::string m = "child " + std::to_string(i);
      if (send(childs.tx, m.data(), m.size(), 0) != static_cast<ssize_t>(m.size())) _exit(4);
    }
    const int fd = nic_event_fd();
    if (fd < 0) _exit(5);
    for (auto end = Clock::now() + kLimit; child.Calls() < 10 && Clock::now() < end;) {
      pollfd p = {fd, POLLIN, 0};
      poll(&p, 1, 100);
      nic_poll(0);
    }
    _exit(child.Calls() != 10 || child.not_dataplane || child.msgs[9] != "child 9" ? 6
          : sink.Calls()                                                           ? 7
                                                                                   : 0);
  }
  for (int i = 0; i < 5; i++)
    ASSERT_EQ(send(parents.tx, "parent", 6, 0), 6);
  EXPECT_TRUE(NicPollUntil([&] { return sink.Calls() == 5; }));
  ExpectChildExitsZero(pid, "2-5: the child's own endpoint did not start or receive; 6: its "
                            "messages did not come whole into dataplane buffers; 7: it received "
                            "the parent's");
  EXPECT_EQ(sink.not_dataplane, 0);
}

TEST_F(UringReceive, AChildOfForkReceivesNoneOfTheParentsMessages) {
  UdpPair pair;
  Sink sink;
  nic_endpoint *ep = Receiving(pair.rx, &sink);
  ASSERT_NE(ep, nullptr);
  auto send_n = [&](int from, int n) {
    for (int i = from; i < from + n; i++) {
      std::string m = "datagram " + std::to_string(i);
      ASSERT_EQ(send(pair.tx, m.data(), m.size(), 0), static_cast<ssize_t>(m.size()));
    }
  };
  send_n(0, 10);
  ASSERT_TRUE(NicPollUntil([&] { return sink.Calls() == 10; }));
  send_n(10, 5); // in flight at the fork: reaped or not, the parent's
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child polls until the parent has all its messages, and must get none of them.
    close(go[1]);
    Sink child;
    int code = nic_endpoint_receive(ep, Sink::Fn, &child) == 0 ? 2 : 0;
    char c;
    fcntl(go[0], F_SETFL, O_NONBLOCK);
    for (;;) {
      nic_poll(0);
      if (read(go[0], &c, 1) == 0) break; // the parent closed its end
      usleep(100);
    }
    nic_poll(0);
    _exit(code | (sink.Calls() != 10 || child.Calls() ? 1 : 0));
  }
  close(go[0]);
  send_n(15, 40);
  EXPECT_TRUE(NicPollUntil([&] { return sink.Calls() == 55; }));
  close(go[1]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the child received messages; 2: it could receive";
  ASSERT_EQ(sink.msgs.size(), 55u);
  for (int i = 0; i < 55; i++)
    EXPECT_EQ(sink.msgs[i], "datagram " + std::to_string(i));
}

TEST_F(UringReceive, PeerCloseEndsWithOneLastCallAndStatusOne) {
  LoopbackPair pair;
  Sink sink;
  nic_endpoint *ep = Receiving(pair.rx, &sink);
  ASSERT_NE(ep, nullptr);
  ASSERT_EQ(send(pair.tx, "last words", 10, 0), 10);
  close(pair.tx);
  pair.tx = -1;
  ASSERT_TRUE(NicPollUntil([&] { return sink.Ends() > 0; }));
  for (int i = 0; i < 50; i++)
    nic_poll(0);
  EXPECT_EQ(sink.data, "last words");
  EXPECT_EQ(sink.Ends(), 1);
  EXPECT_EQ(sink.end_len, 0u);
  EXPECT_EQ(sink.after_end, 0);
  EXPECT_EQ(nic_endpoint_status(ep), 1);
}

TEST_F(UringReceive, PeerResetEndsWithEconnreset) {
  LoopbackPair pair;
  Sink sink;
  nic_endpoint *ep = Receiving(pair.rx, &sink);
  ASSERT_NE(ep, nullptr);
  linger l{1, 0};
  ASSERT_EQ(setsockopt(pair.tx, SOL_SOCKET, SO_LINGER, &l, sizeof l), 0);
  close(pair.tx);
  pair.tx = -1;
  ASSERT_TRUE(NicPollUntil([&] { return sink.Ends() > 0; }));
  EXPECT_EQ(sink.Ends(), 1);
  EXPECT_EQ(nic_endpoint_status(ep), -ECONNRESET);
}

// A UDP peer that is not listening answers a send with an ICMP error, which the socket's next
// receive reports once (ECONNREFUSED): receiving goes on, said once, and the peer's datagrams
// arrive once it listens. Before, the error ended receiving for good.
TEST_F(UringReceive, AnIcmpErrorOnUdpIsSaidOnceAndReceivingGoesOn) {
  UdpPair pair;
  Sink sink;
  nic_endpoint *ep = Receiving(pair.rx, &sink);
  ASSERT_NE(ep, nullptr);
  sockaddr_in peer{}, self{};
  socklen_t len = sizeof peer;
  ASSERT_EQ(getpeername(pair.rx, (sockaddr *)&peer, &len), 0);
  len = sizeof self;
  ASSERT_EQ(getsockname(pair.rx, (sockaddr *)&self, &len), 0);
  close(pair.tx);
  pair.tx = -1;
  nic_uring_stats before{}, now{};
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_active(), &before));
  testing::internal::CaptureStderr();
  ASSERT_EQ(send(pair.rx, "ping", 4, 0), 4); // nobody there: ICMP port unreachable
  const bool reported = NicPollUntil([&] {
    return nic_uring_get_stats(nic_backend_active(), &now) && now.recv_rearms > before.recv_rearms;
  });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(reported) << "the error was not seen: " << err;
  EXPECT_EQ(sink.Ends(), 0) << "receiving ended";
  EXPECT_EQ(nic_endpoint_status(ep), 0);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("Connection refused"), std::string::npos) << err;
  pair.tx = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_EQ(bind(pair.tx, (sockaddr *)&peer, sizeof peer), 0) << strerror(errno);
  ASSERT_EQ(connect(pair.tx, (sockaddr *)&self, sizeof self), 0);
  ASSERT_EQ(send(pair.tx, "back", 4, 0), 4);
  ASSERT_TRUE(NicPollUntil([&] { return sink.Calls() >= 1; })) << "nothing came after the error";
  EXPECT_EQ(sink.data, "back");
}

TEST_F(UringReceive, DestroyWhileABufferIsHeldIsBusyAndSucceedsAfterRelease) {
  LoopbackPair pair;
  Sink sink;
  sink.hold = true;
  nic_endpoint *ep = nic_uring_endpoint_create(pair.rx);
  ASSERT_NE(ep, nullptr);
  ASSERT_EQ(nic_endpoint_receive(ep, Sink::Fn, &sink), 0);
  ASSERT_EQ(send(pair.tx, "kept", 4, 0), 4);
  ASSERT_TRUE(NicPollUntil([&] { return sink.Calls() == 1; }));
  EXPECT_EQ(nic_uring_endpoint_destroy(ep), -EBUSY);
  EXPECT_EQ(std::string(static_cast<char *>(sink.bufs[0]), 4), "kept");
  sink.ReleaseAll();
  EXPECT_EQ(nic_uring_endpoint_destroy(ep), 0);
  EXPECT_EQ(NicStats().recv_held_buffers, 0u);
  // Messages after the destroy are the socket's again.
  ASSERT_EQ(send(pair.tx, "after", 5, 0), 5);
  pollfd p{pair.rx, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, static_cast<int>(kLimit.count())), 1);
  char buf[8];
  EXPECT_EQ(recv(pair.rx, buf, sizeof buf, MSG_DONTWAIT), 5);
}

// ---- With NICMALLOC_RECV_BUFFERS=4 and NICMALLOC_RECV_BUFFER_SIZE=4K (tests/uring.cmake) ----

class UringReceiveSmall : public UringReceive {
protected:
  void SetUp() override {
    const char *n = getenv("NICMALLOC_RECV_BUFFERS"), *size = getenv("NICMALLOC_RECV_BUFFER_SIZE");
    if (!n || strcmp(n, "4") || !size || strcmp(size, "4K"))
      GTEST_SKIP() << "run with NICMALLOC_RECV_BUFFERS=4 NICMALLOC_RECV_BUFFER_SIZE=4K";
    UringReceive::SetUp();
  }
};

TEST_F(UringReceiveSmall, ADatagramLongerThanABufferIsReportedNotCut) {
  UdpPair pair;
  Sink sink;
  ASSERT_NE(Receiving(pair.rx, &sink), nullptr);
  nic_uring_stats before{};
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_active(), &before));
  Region data(10000, 2);
  testing::internal::CaptureStderr();
  for (size_t n : {100, 5000, 4096, 4097, 200}) {
    ASSERT_EQ(send(pair.tx, data.base, n, 0), static_cast<ssize_t>(n));
  }
  EXPECT_TRUE(NicPollUntil([&] { return sink.Calls() >= 3; }));
  for (int i = 0; i < 50; i++)
    nic_poll(0);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_EQ(sink.msgs.size(), 3u);
  EXPECT_EQ(sink.msgs[0], data.Bytes(0, 100));
  EXPECT_EQ(sink.msgs[1], data.Bytes(0, 4096));
  EXPECT_EQ(sink.msgs[2], data.Bytes(0, 200));
  nic_uring_stats after{};
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_active(), &after));
  EXPECT_EQ(after.recv_truncated - before.recv_truncated, 2u);
  size_t said = 0;
  for (size_t at = 0; (at = err.find("longer than a receive buffer", at)) != std::string::npos;
       at++)
    said++;
  EXPECT_EQ(said, 1u) << err;
}

// What nic_endpoint_limits says one post to a UDP endpoint carries is what a nicmalloc receiver
// takes whole: a receive buffer here. It said 0x7ffff000 (the most one send takes), and a
// message cut into posts of that size went as datagrams the receiver dropped.
TEST_F(UringReceiveSmall, ADatagramEndpointsLongestMessageIsOneReceiveBuffer) {
  UdpPair pair;
  Sink sink;
  ASSERT_NE(Receiving(pair.rx, &sink), nullptr);
  nic_endpoint *ep = Endpoint(pair.tx);
  ASSERT_NE(ep, nullptr);
  size_t bytes = 0;
  ASSERT_EQ(nic_endpoint_limits(ep, nullptr, &bytes), 0);
  EXPECT_EQ(bytes, 4096u);
  Region data(bytes + 1, 5);
  for (size_t n : {bytes, bytes + 1, size_t{7}})
    ASSERT_EQ(send(pair.tx, data.base, n, 0), static_cast<ssize_t>(n));
  EXPECT_TRUE(NicPollUntil([&] { return sink.Calls() >= 2; }));
  ASSERT_EQ(sink.msgs.size(), 2u);
  EXPECT_EQ(sink.msgs[0], data.Bytes(0, bytes)) << "one of the limit's length arrives whole";
  EXPECT_EQ(sink.msgs[1], data.Bytes(0, 7)) << "one byte more is dropped";
}

TEST_F(UringReceiveSmall, EveryBufferHeldStallsUdpAndAReleaseResumes) {
  UdpPair pair;
  Sink sink;
  sink.hold = true;
  ASSERT_NE(Receiving(pair.rx, &sink), nullptr);
  const uint64_t stalls0 = NicStats().recv_stalls;
  for (int i = 0; i < 6; i++) {
    std::string m = "d" + std::to_string(i);
    ASSERT_EQ(send(pair.tx, m.data(), m.size(), 0), static_cast<ssize_t>(m.size()));
  }
  EXPECT_TRUE(NicPollUntil([&] { return NicStats().recv_stalls > stalls0; }));
  EXPECT_EQ(sink.Calls(), 4u) << "4 buffers: the rest waits in the socket";
  sink.hold = false;
  sink.ReleaseAll();
  EXPECT_TRUE(NicPollUntil([&] { return sink.Calls() == 6; }));
  ASSERT_EQ(sink.msgs.size(), 6u);
  for (int i = 0; i < 6; i++)
    EXPECT_EQ(sink.msgs[i], "d" + std::to_string(i));
}

// ---- With NICMALLOC_RECV_HELD_MAX=256K (tests/uring.cmake) ----

constexpr size_t kCap = 256 << 10, kBuf = 64 << 10; // the cap; the default receive buffer

class UringReceiveCapped : public UringReceive {
protected:
  void SetUp() override {
    const char *cap = getenv("NICMALLOC_RECV_HELD_MAX");
    if (!cap || strcmp(cap, "256K")) GTEST_SKIP() << "run with NICMALLOC_RECV_HELD_MAX=256K";
    UringReceive::SetUp();
  }
  static void SetHold(Sink &s, bool on) {
    std::lock_guard<std::mutex> g(s.mu);
    s.hold = on;
  }
  // 8 datagrams of 60000 bytes to a holding receiver, one at a time: 4 are handed over under
  // the cap, the 5th reaches it, 3 wait.
  void EightDatagramsFiveHeldThreeWaiting(UdpPair &pair, Sink &sink, const Region &data) {
    const uint64_t waiting0 = NicStats().recv_waiting;
    for (size_t i = 0; i < 8; i++) {
      ASSERT_EQ(send(pair.tx, data.base + i, 60000, 0), 60000);
      ASSERT_TRUE(NicPollUntil([&] {
        return sink.Calls() + (NicStats().recv_waiting - waiting0) == i + 1;
      })) << "datagram "
          << i << " was neither handed over nor waiting";
    }
    ASSERT_EQ(sink.Calls(), 5u) << "held bytes " << NicStats().recv_held_bytes;
    ASSERT_EQ(NicStats().recv_waiting - waiting0, 3u);
  }
  // Blocks the calling thread in wait() while another releases every hold of sink once this
  // thread sleeps in a poll syscall: what wait() returns. Should wait() not return within
  // kLimit of the release, poke() ends it another way and *poked says so.
  template <class Wait, class Poke>
  int ReleasedWhileWaiting(Sink &sink, Wait wait, Poke poke, bool *poked) {
    const pid_t me = static_cast<pid_t>(syscall(SYS_gettid));
    std::atomic<bool> released{false}, returned{false};
    std::thread releaser([&] {
      WaitUntilInPoll(me);
      SetHold(sink, false);
      sink.ReleaseAll();
      released = true;
      for (auto end = Clock::now() + kLimit; !returned && Clock::now() < end;)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!returned) {
        *poked = true;
        poke();
      }
    });
    const int rc = wait();
    returned = true;
    releaser.join();
    EXPECT_TRUE(released);
    return rc;
  }
};

// Four TCP streams whose receiver holds every message: over all of them, what is held stops at
// the cap (and at most one buffer more per endpoint), the senders block, one warning; after
// the releases every byte arrives, in order per stream, and the end of each stream last.
TEST_F(UringReceiveCapped, HoldingEverythingStopsAtTheCapAndAllArrivesInOrderAfterRelease) {
  constexpr int kPairs = 4;
  constexpr size_t kLen = 4 << 20; // beyond a stream's buffers and socket buffers together
  std::vector<std::unique_ptr<LoopbackPair>> pairs;
  std::vector<std::unique_ptr<Sink>> sinks;
  std::vector<std::unique_ptr<Region>> data;
  for (int i = 0; i < kPairs; i++) {
    pairs.push_back(std::make_unique<LoopbackPair>(kSmallBuf, kSmallBuf));
    sinks.push_back(std::make_unique<Sink>());
    data.push_back(std::make_unique<Region>(kLen, 20 + i));
    sinks[i]->hold = true;
    ASSERT_NE(Receiving(pairs[i]->rx, sinks[i].get()), nullptr);
  }
  const nic_stats before = NicStats();
  testing::internal::CaptureStderr();
  std::atomic<int> sent{0};
  std::vector<std::thread> senders;
  for (int i = 0; i < kPairs; i++)
    senders.emplace_back([&, i] {
      SendSplit(pairs[i]->tx, data[i]->base, kLen, 30u + i);
      shutdown(pairs[i]->tx, SHUT_WR);
      sent++;
    });
  auto received = [&] {
    size_t n = 0;
    for (auto &s : sinks)
      n += s->Size();
    return n;
  };
  EXPECT_TRUE(NicPollUntil([&] { return NicStats().recv_capped > before.recv_capped; }));
  for (int i = 0; i < 500; i++)
    nic_poll(0);
  const nic_stats capped = NicStats();
  EXPECT_LE(capped.recv_held_bytes, kCap + kPairs * kBuf);
  EXPECT_LE(received(), kCap + kPairs * kBuf) << "handed over past the cap";
  EXPECT_GE(capped.recv_waiting, 1u);
  EXPECT_EQ(sent.load(), 0) << "a sender finished: nothing pushed back";
  const std::string err = testing::internal::GetCapturedStderr();
  size_t said = 0;
  for (size_t at = 0; (at = err.find("NICMALLOC_RECV_HELD_MAX", at)) != std::string::npos; at++)
    said++;
  // Once per process: by this test when it is the first to reach the cap.
  EXPECT_EQ(said, before.recv_capped ? 0u : 1u) << err;
  // Released, everything goes on.
  for (auto &s : sinks)
    SetHold(*s, false);
  EXPECT_TRUE(NicPollUntil([&] {
    for (auto &s : sinks)
      s->ReleaseAll();
    return received() >= kPairs * kLen;
  })) << received();
  for (auto &t : senders)
    t.join();
  EXPECT_TRUE(NicPollUntil([&] {
    for (auto &s : sinks)
      if (s->Ends() != 1) return false;
    return true;
  }));
  for (int i = 0; i < kPairs; i++) {
    ASSERT_EQ(sinks[i]->Size(), kLen);
    EXPECT_TRUE(sinks[i]->data == data[i]->Bytes(0, kLen)) << "stream " << i << " reordered";
    EXPECT_EQ(sinks[i]->after_end, 0) << "the end of stream " << i << " came before its data";
  }
  const nic_stats after = NicStats();
  EXPECT_EQ(after.recv_waiting, 0u);
  EXPECT_EQ(after.recv_held_bytes, 0u);
}

// Several threads poll (and release what their receive functions held) while the cap is
// reached again and again: waiting messages are handed over by one thread at a time, so each
// stream still arrives whole and in order.
TEST_F(UringReceiveCapped, ManyPollersAtTheCapKeepEachStreamInOrder) {
  constexpr int kPairs = 4, kPollers = 3;
  constexpr size_t kLen = 4 << 20;
  std::vector<std::unique_ptr<LoopbackPair>> pairs;
  std::vector<std::unique_ptr<Sink>> sinks;
  std::vector<std::unique_ptr<Region>> data;
  for (int i = 0; i < kPairs; i++) {
    pairs.push_back(std::make_unique<LoopbackPair>());
    sinks.push_back(std::make_unique<Sink>());
    data.push_back(std::make_unique<Region>(kLen, 50 + i));
    sinks[i]->hold = true;
    ASSERT_NE(Receiving(pairs[i]->rx, sinks[i].get()), nullptr);
  }
  const uint64_t capped0 = NicStats().recv_capped;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kPollers; t++)
    threads.emplace_back([&] {
      while (!stop) {
        nic_poll(0);
        for (auto &s : sinks)
          s->ReleaseAll();
      }
    });
  for (int i = 0; i < kPairs; i++)
    threads.emplace_back([&, i] { SendSplit(pairs[i]->tx, data[i]->base, kLen, 70u + i); });
  for (int i = 0; i < kPairs; i++)
    EXPECT_TRUE(NicPollUntil([&] {
      sinks[i]->ReleaseAll();
      return sinks[i]->Size() >= kLen;
    })) << "stream "
        << i;
  stop = true;
  for (auto &t : threads)
    t.join();
  for (auto &s : sinks)
    s->ReleaseAll();
  EXPECT_GT(NicStats().recv_capped, capped0) << "the cap was never reached";
  for (int i = 0; i < kPairs; i++)
    EXPECT_TRUE(sinks[i]->data == data[i]->Bytes(0, kLen)) << "stream " << i << " reordered";
  EXPECT_EQ(NicStats().recv_waiting, 0u);
}

// The end of a stream read while its data waits for the cap waits behind that data.
TEST_F(UringReceiveCapped, TheEndOfAStreamWaitsBehindItsData) {
  LoopbackPair pair;
  Sink sink;
  sink.hold = true;
  ASSERT_NE(Receiving(pair.rx, &sink), nullptr);
  nic_uring_stats u0{};
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_active(), &u0));
  const uint64_t waiting0 = NicStats().recv_waiting;
  constexpr size_t kLen = 320 << 10; // past the cap, well within the endpoint's buffers
  Region data(kLen, 8);
  SendSplit(pair.tx, data.base, kLen, 9u);
  ASSERT_EQ(shutdown(pair.tx, SHUT_WR), 0);
  // Until the backend has read the end too: each buffer it handed over, and the end, is either
  // with the receive function or waiting.
  ASSERT_TRUE(NicPollUntil([&] {
    nic_uring_stats u{};
    nic_uring_get_stats(nic_backend_active(), &u);
    return sink.Calls() + sink.Ends() + (NicStats().recv_waiting - waiting0) ==
           u.recv_messages - u0.recv_messages + 1;
  }));
  EXPECT_GT(NicStats().recv_waiting - waiting0, 1u);
  EXPECT_EQ(sink.Ends(), 0) << "the end of the stream went ahead of its waiting data";
  SetHold(sink, false);
  EXPECT_TRUE(NicPollUntil([&] {
    sink.ReleaseAll();
    return sink.Ends() == 1;
  }));
  EXPECT_EQ(sink.after_end, 0);
  ASSERT_EQ(sink.Size(), kLen);
  EXPECT_TRUE(sink.data == data.Bytes(0, kLen)) << "bytes lost or reordered";
  EXPECT_EQ(nic_endpoint_status(eps[0]), 1);
}

// A receive function may try to close its endpoint at the end of the stream (-EBUSY: it runs;
// closed once it returned), and start receiving on another, when that end had waited for the
// cap: the new receiver starts with nothing waiting.
TEST_F(UringReceiveCapped, AReceiverClosedByItsWaitingEndCallLeavesTheNextOneClear) {
  LoopbackPair a, b;
  struct Closer {
    static void Fn(void *arg, void *data, size_t len) {
      auto *c = static_cast<Closer *>(arg);
      Sink::Fn(&c->sink, data, len);
      if (data) return;
      c->destroyed = nic_uring_endpoint_destroy(c->ep);
      c->next = nic_uring_endpoint_create(c->next_fd);
      if (c->next) c->next_rc = nic_endpoint_receive(c->next, Sink::Fn, &c->next_sink);
    }
    Sink sink, next_sink;
    nic_endpoint *ep = nullptr, *next = nullptr;
    int next_fd = -1, destroyed = 1, next_rc = 1;
  } c;
  c.sink.hold = true;
  c.next_fd = b.rx;
  c.ep = nic_uring_endpoint_create(a.rx);
  ASSERT_NE(c.ep, nullptr);
  ASSERT_EQ(nic_endpoint_receive(c.ep, Closer::Fn, &c), 0);
  nic_uring_stats u0{};
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_active(), &u0));
  const uint64_t waiting0 = NicStats().recv_waiting;
  constexpr size_t kLen = 320 << 10;
  Region data(kLen, 11);
  SendSplit(a.tx, data.base, kLen, 12u);
  ASSERT_EQ(shutdown(a.tx, SHUT_WR), 0);
  ASSERT_TRUE(NicPollUntil([&] {
    nic_uring_stats u{};
    nic_uring_get_stats(nic_backend_active(), &u);
    return c.sink.Calls() + c.sink.Ends() + (NicStats().recv_waiting - waiting0) ==
           u.recv_messages - u0.recv_messages + 1;
  }));
  ASSERT_EQ(c.sink.Ends(), 0);
  SetHold(c.sink, false);
  c.sink.ReleaseAll();
  ASSERT_TRUE(NicPollUntil([&] { return c.sink.Ends() == 1; }));
  EXPECT_EQ(c.destroyed, -EBUSY) << "destroyed from inside its own receive function";
  EXPECT_EQ(nic_uring_endpoint_destroy(c.ep), 0);
  ASSERT_NE(c.next, nullptr);
  ASSERT_EQ(c.next_rc, 0);
  const uint64_t capped = NicStats().recv_capped;
  ASSERT_EQ(send(b.tx, "next", 4, 0), 4);
  EXPECT_TRUE(NicPollUntil([&] { return c.next_sink.Size() == 4; }));
  EXPECT_EQ(NicStats().recv_capped, capped) << "under the cap, the new receiver's message waited";
  EXPECT_EQ(NicStats().recv_waiting, waiting0);
  EXPECT_EQ(nic_uring_endpoint_destroy(c.next), 0);
}

// A sim endpoint beside (its constructor starts the sim): the messages its receiver holds are
// counted in recv_held_*, as io_uring's are, but the cap is io_uring's, verbs' and dpdk's: held
// sim messages past it keep no datagram of io_uring's waiting.
TEST_F(UringReceiveCapped, HeldSimMessagesAreCountedButKeepNoUringMessageWaiting) {
  Sink sim_sink;
  sim_sink.hold = true;
  nic_endpoint *sim = nic_sim_endpoint_create(Sink::Fn, &sim_sink, 0);
  ASSERT_NE(sim, nullptr) << strerror(errno);
  const nic_stats before = NicStats();
  constexpr size_t kSim = 60000, kSims = 5; // past the cap together
  void *msg = nic_malloc(kSim);
  ASSERT_NE(msg, nullptr);
  memset(msg, 's', kSim);
  Done done;
  for (size_t i = 0; i < kSims; i++)
    ASSERT_EQ(PostParts(sim, {{msg, kSim}}, &done), 0);
  ASSERT_TRUE(NicPollUntil([&] { return done.calls.load() == int(kSims); }));
  ASSERT_EQ(sim_sink.Calls(), kSims);
  const nic_stats held = NicStats();
  EXPECT_EQ(held.recv_held_buffers - before.recv_held_buffers, kSims);
  EXPECT_EQ(held.recv_held_bytes - before.recv_held_bytes, kSims * kSim);
  ASSERT_GT(held.recv_held_bytes, kCap);
  UdpPair pair;
  Sink sink;
  ASSERT_NE(Receiving(pair.rx, &sink), nullptr);
  Region data(1000, 11);
  ASSERT_EQ(send(pair.tx, data.base, data.len, 0), ssize_t(data.len));
  EXPECT_TRUE(NicPollUntil(
      [&] { return sink.Calls() == 1 || NicStats().recv_waiting > before.recv_waiting; }));
  EXPECT_EQ(sink.Calls(), 1u) << "the datagram waits for the sim's held bytes";
  EXPECT_EQ(NicStats().recv_capped, before.recv_capped);
  sim_sink.ReleaseAll();
  const nic_stats after = NicStats();
  EXPECT_EQ(after.recv_held_buffers, before.recv_held_buffers);
  EXPECT_EQ(after.recv_held_bytes, before.recv_held_bytes);
  free(msg);
  int rc = -EBUSY;
  EXPECT_TRUE(NicPollUntil([&] { return (rc = nic_sim_endpoint_destroy(sim)) != -EBUSY; }));
  EXPECT_EQ(rc, 0);
}

// A child of fork keeps none of the messages waiting in the parent: its nic_poll hands none
// over (nor gives their buffers back to the parent's ring), and it counts none waiting.
TEST_F(UringReceiveCapped, AChildOfForkKeepsNoneOfTheWaitingMessages) {
  UdpPair pair;
  Sink sink;
  sink.hold = true;
  ASSERT_NE(Receiving(pair.rx, &sink), nullptr);
  Region data(60008, 10);
  EightDatagramsFiveHeldThreeWaiting(pair, sink, data);
  if (HasFatalFailure()) return;
  fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    SetHold(sink, false);
    sink.ReleaseAll(); // under the cap in the child: a waiting message would now go
    int ran = 0;
    for (int i = 0; i < 20; i++)
      ran += nic_poll(0);
    _exit((sink.Calls() != 5 || ran ? 1 : 0) | (NicStats().recv_waiting ? 2 : 0));
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the child handed a message over; 2: it counts some";
  // The parent's go on.
  SetHold(sink, false);
  EXPECT_TRUE(NicPollUntil([&] {
    sink.ReleaseAll();
    return sink.Calls() == 8;
  }));
  for (size_t i = 0; i < sink.msgs.size(); i++)
    EXPECT_TRUE(sink.msgs[i] == data.Bytes(i, 60000)) << "message " << i << " changed or moved";
}

// A release on another thread that brings the held bytes under the cap wakes nic_wait(-1 or a
// timeout) for the messages that waited.
TEST_F(UringReceiveCapped, NicWaitWakesWhenAReleaseLetsWaitingMessagesGo) {
  UdpPair pair;
  Sink sink;
  sink.hold = true;
  ASSERT_NE(Receiving(pair.rx, &sink), nullptr);
  Region data(60008, 5);
  EightDatagramsFiveHeldThreeWaiting(pair, sink, data);
  if (HasFatalFailure()) return;
  while (nic_poll(0) > 0) {
  }
  bool poked = false;
  const int ran = ReleasedWhileWaiting(
      sink, [] { return nic_wait(-1); }, [&] { EXPECT_EQ(send(pair.tx, "poke", 4, 0), 4); },
      &poked);
  EXPECT_FALSE(poked) << "nic_wait slept through the release";
  EXPECT_GT(ran, 0);
  EXPECT_TRUE(NicPollUntil([&] { return sink.Calls() == 8; }));
  for (size_t i = 0; i < sink.msgs.size(); i++)
    EXPECT_TRUE(sink.msgs[i] == data.Bytes(i, 60000)) << "message " << i << " changed or moved";
  EXPECT_EQ(NicStats().recv_waiting, 0u);
}

// The same for a program asleep in poll() on nic_event_fd.
TEST_F(UringReceiveCapped, NicEventFdTurnsReadableWhenAReleaseLetsWaitingMessagesGo) {
  UdpPair pair;
  Sink sink;
  sink.hold = true;
  ASSERT_NE(Receiving(pair.rx, &sink), nullptr);
  const int efd = nic_event_fd();
  ASSERT_GE(efd, 0);
  Region data(60008, 6);
  EightDatagramsFiveHeldThreeWaiting(pair, sink, data);
  if (HasFatalFailure()) return;
  while (nic_poll(0) > 0) {
  }
  bool poked = false;
  const int rc = ReleasedWhileWaiting(
      sink,
      [&] {
        struct pollfd p = {efd, POLLIN, 0};
        return poll(&p, 1, static_cast<int>(kLimit.count()));
      },
      [] {}, &poked);
  EXPECT_EQ(rc, 1) << "nic_event_fd stayed quiet through the release";
  EXPECT_EQ(nic_poll(0), 3);
  EXPECT_EQ(sink.Calls(), 8u);
}

// Destroying an endpoint with messages waiting gives them back undelivered: the destroy
// succeeds, they are counted, and its receive function is not called for them.
TEST_F(UringReceiveCapped, DestroyWithMessagesWaitingGivesThemBackUndelivered) {
  UdpPair pair;
  Sink sink;
  sink.hold = true;
  nic_endpoint *ep = nic_uring_endpoint_create(pair.rx);
  ASSERT_NE(ep, nullptr);
  ASSERT_EQ(nic_endpoint_receive(ep, Sink::Fn, &sink), 0);
  Region data(60008, 7);
  const uint64_t dropped0 = NicStats().recv_capped_dropped;
  EightDatagramsFiveHeldThreeWaiting(pair, sink, data);
  if (HasFatalFailure()) return;
  SetHold(sink, false);
  sink.ReleaseAll();
  EXPECT_EQ(nic_uring_endpoint_destroy(ep), 0);
  EXPECT_EQ(NicStats().recv_capped_dropped - dropped0, 3u);
  EXPECT_EQ(NicStats().recv_waiting, 0u);
  EXPECT_EQ(NicStats().recv_held_buffers, 0u);
  for (int i = 0; i < 50; i++)
    nic_poll(0);
  EXPECT_EQ(sink.Calls(), 5u) << "a waiting message was handed over after its endpoint closed";
}

// Run with 32 buffers of 16 MiB and 64 MiB chunks (tests/uring.cmake): the buffers are one
// dataplane block, larger than a chunk, so no endpoint can receive. The error is ENOMEM; the
// line says why, once.
TEST_F(UringReceive, BuffersLargerThanAChunkAreRefusedSayingWhy) {
  const char *size = getenv("NICMALLOC_RECV_BUFFER_SIZE");
  if (!size || strcmp(size, "16M")) GTEST_SKIP() << "run with NICMALLOC_RECV_BUFFER_SIZE=16M";
  UdpPair pair;
  nic_endpoint *ep = Endpoint(pair.rx);
  ASSERT_NE(ep, nullptr);
  Sink sink;
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_endpoint_receive(ep, Sink::Fn, &sink), -ENOMEM);
  EXPECT_EQ(nic_endpoint_receive(ep, Sink::Fn, &sink), -ENOMEM);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2)
      << "the cause and the error, once each: " << err;
  EXPECT_NE(err.find("more than a chunk holds (67108864)"), std::string::npos) << err;
}

} // namespace
