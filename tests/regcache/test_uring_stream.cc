// The io_uring backend on a stream under pressure: order of posts on one socket, two posting
// threads, memory held in flight while the receiver stalls, a connection that dies mid-message,
// and a posting thread that exits before its send completes.
#include "uring_loopback.h"

#include <liburing.h> // here, not in extern "C" through uring_internal.h: it has templates
extern "C" {
#include "uring_internal.h"
}

using namespace uring_test;

// io_uring alone may run two sends on one socket out of order when the first finds it full;
// the backend must keep post order on a stream.
TEST_F(UringTest, PostsOnOneSocketKeepTheirOrderUnderBackpressure) {
  Region mem(4 << 20, 11);
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  ASSERT_EQ(fcntl(pair.tx, F_SETFL, O_NONBLOCK), 0); // as event-driven servers have it
  Reader reader(pair.rx, /*paused=*/true, 4096);     // starts once everything is posted
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  constexpr int kPosts = 64;
  std::vector<Done> done(kPosts);
  std::string want;
  for (int i = 0; i < kPosts; i++) {
    size_t off = (size_t(i) * 61 * 1021) % (3 << 20);
    uint32_t len = 1000 + uint32_t(i) * 997;
    std::vector<nic_sge> sge{Sge(r, off, len)};
    if (i % 3 == 1) sge.push_back(Sge(r, off + len + 11, 333)); // SENDMSG_ZC between SEND_ZCs
    for (auto &e : sge)
      want += std::string(static_cast<const char *>(e.addr), e.len);
    ASSERT_EQ(b->post(b, ep, sge.data(), sge.size(), Done::Fn, &done[i]), 0);
  }
  EXPECT_LT(reader.Size(), want.size());
  reader.Resume();
  ASSERT_TRUE(PollUntil(b, [&] {
    for (auto &d : done)
      if (!d.calls) return false;
    return true;
  }));
  for (int i = 0; i < kPosts; i++) {
    EXPECT_EQ(done[i].calls, 1) << i;
    EXPECT_EQ(done[i].status, 0) << i;
  }
  ASSERT_TRUE(reader.WaitFor(want.size()));
  std::string got = reader.Data();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "bytes differ from offset "
                           << std::distance(
                                  got.begin(),
                                  std::mismatch(got.begin(), got.end(), want.begin()).first);
}

TEST_F(UringTest, TwoThreadsOnTwoSocketsEachCompletionRunsOnce) {
  Region mem(4 << 20, 12);
  nic_registration r1 = Reg(mem.base, 2 << 20), r2 = Reg(mem.base + (2 << 20), 2 << 20);
  constexpr int kPosts = 300;
  struct Side {
    LoopbackPair pair{kSmallBuf, kSmallBuf};
    std::vector<Done> done = std::vector<Done>(kPosts);
    std::string want;
    nic_endpoint *ep = nullptr;
    bool posted_all = false, completed_all = false;
  } sides[2];
  std::vector<std::unique_ptr<Reader>> readers;
  for (auto &s : sides) {
    s.ep = Endpoint(s.pair.tx);
    readers.push_back(std::make_unique<Reader>(s.pair.rx));
  }
  auto work = [&](int t) {
    Side &s = sides[t];
    for (int i = 0; i < kPosts; i++) {
      std::vector<nic_sge> sge;
      for (int k = 0; k <= (i + t) % 4; k++) { // 1 to 4 entries, alternating slots
        const nic_registration &r = (i + k) % 2 ? r1 : r2;
        sge.push_back(Sge(r, size_t(i) * 4099 % (1 << 20) + k * 7, 512 + uint32_t(i * 37 + k)));
        s.want += std::string(static_cast<const char *>(sge.back().addr), sge.back().len);
      }
      if (b->post(b, s.ep, sge.data(), sge.size(), Done::Fn, &s.done[i]) != 0) return;
      if (i % 8 == 0) b->poll(b, 16); // both threads reap, each other's completions too
    }
    s.posted_all = true;
    s.completed_all = PollUntil(b, [&] {
      for (auto &d : s.done)
        if (!d.calls) return false;
      return true;
    });
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  for (int t = 0; t < 2; t++) {
    Side &s = sides[t];
    ASSERT_TRUE(s.posted_all) << "thread " << t << ": a post failed";
    ASSERT_TRUE(s.completed_all) << "thread " << t << ": completions missing";
    for (int i = 0; i < kPosts; i++) {
      EXPECT_EQ(s.done[i].calls, 1) << "thread " << t << " post " << i;
      EXPECT_EQ(s.done[i].status, 0) << "thread " << t << " post " << i;
    }
    ASSERT_TRUE(readers[t]->WaitFor(s.want.size()));
    EXPECT_TRUE(readers[t]->Data() == s.want) << "stream " << t << " corrupted";
  }
  for (int i = 0; i < 20; i++)
    b->poll(b, 64);
  EXPECT_EQ(Stats().completions, 2u * kPosts) << "a completion ran twice";
}

// A send larger than both socket buffers cannot finish before the receiver reads, so the
// memory is certainly in flight while the reader is paused: what the safety suites rely on.
TEST_F(UringTest, MemoryStaysInFlightWhileTheReceiverStalls) {
  Region mem(4 << 20, 13);
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  Reader reader(pair.rx, /*paused=*/true);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  nic_sge sge = Sge(r, 0, mem.len);
  Done d;
  ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d), 0);
  for (auto end = Clock::now() + std::chrono::milliseconds(200); Clock::now() < end;) {
    b->poll(b, 64);
    usleep(1000);
  }
  EXPECT_EQ(d.calls, 0) << "completed although most bytes cannot have left";
  EXPECT_EQ(b->dereg(b, &r), -EBUSY);
  EXPECT_EQ(Stats().pending, 1u);
  reader.Resume();
  ASSERT_TRUE(PollUntil(b, [&] { return d.calls > 0; }));
  EXPECT_EQ(d.status, 0);
  ASSERT_TRUE(reader.WaitFor(mem.len));
  EXPECT_TRUE(reader.Data() == mem.Bytes(0, mem.len));
  EXPECT_EQ(b->dereg(b, &r), 0);
}

// The peer resets the connection mid-message: an error (never SIGPIPE), and the endpoint
// stays failed rather than sending the rest of a torn stream.
TEST_F(UringTest, ConnectionResetMidMessageFailsThisAndLaterPosts) {
  Region mem(4 << 20, 14);
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  nic_sge sge = Sge(r, 0, mem.len);
  Done d1, d2;
  ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d1), 0);
  char buf[1000];
  pollfd pfd{pair.rx, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, int(kLimit.count())), 1);
  ASSERT_GT(read(pair.rx, buf, sizeof buf), 0); // part of it arrived: the message is torn
  linger hard{1, 0};
  setsockopt(pair.rx, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  close(pair.rx); // unread data: RST
  pair.rx = -1;
  ASSERT_TRUE(PollUntil(b, [&] { return d1.calls > 0; }));
  EXPECT_LT(d1.status, 0) << "the connection failed mid-message";
  ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d2), 0);
  ASSERT_TRUE(PollUntil(b, [&] { return d2.calls > 0; }));
  EXPECT_EQ(d2.status, -EPIPE) << "a broken endpoint sends nothing more";
  nic_uring_stats s = Stats();
  EXPECT_EQ(s.torn, 1u);
  EXPECT_EQ(s.send_errors, 2u);
  EXPECT_EQ(b->dereg(b, &r), 0);
}

// io_uring cancels a send still waiting for socket space when the thread that submitted it
// exits (measured: a 4 MiB SEND_ZC came back with 32 KiB sent); the backend resumes it.
TEST_F(UringTest, PostFromAThreadThatExitsStillCompletes) {
  Region mem(2 << 20, 15);
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  Reader reader(pair.rx, /*paused=*/true);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  nic_sge sge = Sge(r, 0, mem.len);
  Done d;
  std::thread([&] { EXPECT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d), 0); }).join();
  reader.Resume();
  ASSERT_TRUE(PollUntil(b, [&] { return d.calls > 0; }));
  EXPECT_EQ(d.status, 0);
  ASSERT_TRUE(reader.WaitFor(mem.len));
  EXPECT_TRUE(reader.Data() == mem.Bytes(0, mem.len));
  EXPECT_GE(Stats().resubmits, 1u) << "the send was expected to be cut short by the exit";
}

TEST_F(UringTest, EndpointsAreConnectedTcpOrUdpSocketsOnly) {
  int p[2], u[2], sp[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, u), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp), 0);
  int idle = socket(AF_INET, SOCK_STREAM, 0);
  int udp = socket(AF_INET, SOCK_DGRAM, 0);
  struct {
    int fd, err;
    const char *what;
  } cases[] = {{p[0], ENOTSOCK, "pipe"},
               {-1, EBADF, "bad fd"},
               {idle, ENOTCONN, "unconnected stream"},
               {udp, ENOTCONN, "unconnected datagram (posts carry no address)"},
               {sp[0], EPROTOTYPE, "seqpacket"},
               {u[0], EOPNOTSUPP, "AF_UNIX (no zero-copy send)"}};
  for (auto &c : cases) {
    errno = 0;
    EXPECT_EQ(nic_uring_endpoint_open(b, c.fd), nullptr) << c.what;
    EXPECT_EQ(errno, c.err) << c.what;
  }
  for (int fd : {p[0], p[1], u[0], u[1], sp[0], sp[1], idle, udp})
    close(fd);
  EXPECT_EQ(nic_uring_endpoint_open(nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  UdpPair pair;
  Endpoint(pair.tx); // a connected datagram socket is one
}

// Three batches of 255 linked sends give 1530 CQEs (a result and a notification each), more
// than the 1024-entry completion queue holds, while nothing reaps: the kernel keeps the rest
// (its overflow flag says so), and the next reaping must move them in and lose none. The test
// used to leave the backend's thread running, which reaps as CQEs come: whether the queue
// overflowed was left to timing (in two runs of three it did not, the overflow path unrun), and
// nothing checked it. Here the thread is stopped (poll() alone reaps, as when the thread cannot
// run), and the test polls once to submit the batches, then not until the kernel says the queue
// overflowed.
TEST_F(UringTest, CompletionQueueOverflowLosesNothing) {
  struct uring_backend *ub = uring_of(b);
  nic_uring_progress_stop(ub);
  Region mem(1 << 20, 16);
  nic_registration r = Reg(mem.base, mem.len);
  constexpr int kSockets = 3, kPosts = 256;
  std::vector<std::unique_ptr<LoopbackPair>> pairs;
  std::vector<std::unique_ptr<Reader>> readers;
  std::vector<nic_endpoint *> ep;
  for (int s = 0; s < kSockets; s++) {
    pairs.push_back(std::make_unique<LoopbackPair>());
    readers.push_back(std::make_unique<Reader>(pairs.back()->rx));
    ep.push_back(Endpoint(pairs.back()->tx));
  }
  std::vector<Done> done(kSockets * kPosts);
  for (int i = 0; i < kPosts; i++)
    for (int s = 0; s < kSockets; s++) {
      nic_sge sge = Sge(r, size_t(i) * 100, 100);
      ASSERT_EQ(b->post(b, ep[s], &sge, 1, Done::Fn, &done[s * kPosts + i]), 0);
    }
  // Each socket's first post went out alone; the poll that reaps its result and notification
  // submits the other 255 as one batch. Sleeping runs the io_uring task work that posts CQEs.
  const auto until = Clock::now() + kLimit;
  while (io_uring_cq_ready(&ub->ring) < 2 * kSockets && Clock::now() < until)
    usleep(1000);
  ASSERT_EQ(io_uring_cq_ready(&ub->ring), 2u * kSockets) << "the first sends did not complete";
  ASSERT_EQ(b->poll(b, 1), 1); // the sends may overflow the queue inside its submit already
  while (!io_uring_cq_has_overflow(&ub->ring) && Clock::now() < until)
    usleep(1000);
  ASSERT_TRUE(io_uring_cq_has_overflow(&ub->ring))
      << io_uring_cq_ready(&ub->ring) << " CQEs waiting, the queue never overflowed";
  ASSERT_TRUE(PollUntil(b,
                        [&] {
                          for (auto &d : done)
                            if (!d.calls) return false;
                          return true;
                        }))
      << Stats().completions << " of " << done.size() << " completed";
  EXPECT_GE(Stats().cq_overflows, 1u);
  EXPECT_FALSE(io_uring_cq_has_overflow(&ub->ring));
  for (auto &d : done) {
    EXPECT_EQ(d.calls, 1);
    EXPECT_EQ(d.status, 0);
  }
  for (int s = 0; s < kSockets; s++) {
    ASSERT_TRUE(readers[s]->WaitFor(kPosts * 100));
    EXPECT_TRUE(readers[s]->Data() == mem.Bytes(0, kPosts * 100));
  }
}

// Posts queued behind a send that fails because the peer is gone: each completes once, with
// the connection's error or -EPIPE, none left cancelled or hanging.
TEST_F(UringTest, PostsToAResetPeerAllFailOnce) {
  Region mem(1 << 20, 17);
  LoopbackPair pair;
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  linger hard{1, 0};
  setsockopt(pair.rx, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  close(pair.rx); // RST
  pair.rx = -1;
  usleep(10000);
  constexpr int kPosts = 40;
  std::vector<Done> done(kPosts);
  for (int i = 0; i < kPosts; i++) {
    nic_sge sge = Sge(r, size_t(i) * 1000, 1000);
    ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &done[i]), 0);
  }
  ASSERT_TRUE(PollUntil(b, [&] {
    for (auto &d : done)
      if (!d.calls) return false;
    return true;
  }));
  for (int i = 0; i < kPosts; i++) {
    EXPECT_EQ(done[i].calls, 1) << i;
    EXPECT_LT(done[i].status, 0) << i;
    EXPECT_NE(done[i].status, -ECANCELED) << i;
  }
}

// Posts queued behind a send stalled on a full socket go out as one linked batch when it is
// resumed; the peer's reset then fails its head and the kernel cancels the rest, whose
// notifications come without F_MORE on their results. Each post must still complete once.
TEST_F(UringTest, BatchCancelledByAResetStillCompletesEveryPost) {
  Region mem(1 << 20, 19);
  LoopbackPair pair(64 << 10, 64 << 10);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  constexpr int kPosts = 16;
  std::vector<Done> done(kPosts);
  nic_sge sge = Sge(r, 0, uint32_t(mem.len));
  for (int i = 0; i < kPosts; i++)
    ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &done[i]), 0);
  // The first send is part-way (the receiver reads nothing); the reset cuts it short and the
  // rest join its resumption, which fails.
  pollfd pfd{pair.rx, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, int(kLimit.count())), 1);
  linger hard{1, 0};
  setsockopt(pair.rx, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  close(pair.rx); // unread data: RST
  pair.rx = -1;
  ASSERT_TRUE(PollUntil(b,
                        [&] {
                          for (auto &d : done)
                            if (!d.calls) return false;
                          return true;
                        }))
      << Stats().pending << " posts never completed";
  for (int i = 0; i < kPosts; i++) {
    EXPECT_EQ(done[i].calls, 1) << i;
    EXPECT_LT(done[i].status, 0) << i;
  }
  EXPECT_EQ(Stats().pending, 0u);
  EXPECT_EQ(b->dereg(b, &r), 0);
}

// Zero-copy for real on the sending side: bytes the kernel has not taken yet are read from the
// registered pages when they go out, so a write after post reaches the receiver. This is the
// unprotected baseline the safety layer's write-after-post fencing exists for.
TEST_F(UringTest, WriteAfterPostReachesTheReceiverUnlessFenced) {
  Region mem(4 << 20, 18);
  const std::string original = mem.Bytes(0, mem.len);
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  Reader reader(pair.rx, /*paused=*/true);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  nic_sge sge = Sge(r, 0, mem.len);
  Done d;
  ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d), 0);
  const size_t tail = 3 << 20; // far beyond what two 256 KiB socket buffers can hold
  memset(mem.base + tail, 0x5a, mem.len - tail);
  reader.Resume();
  ASSERT_TRUE(PollUntil(b, [&] { return d.calls > 0; }));
  EXPECT_EQ(d.status, 0);
  ASSERT_TRUE(reader.WaitFor(mem.len));
  std::string got = reader.Data();
  EXPECT_TRUE(got.compare(0, 1 << 20, original, 0, 1 << 20) == 0) << "head changed";
  EXPECT_TRUE(got.compare(tail, std::string::npos, std::string(mem.len - tail, '\x5a')) == 0)
      << "the kernel sent a copy taken at post time: not zero-copy on the sending side";
}
