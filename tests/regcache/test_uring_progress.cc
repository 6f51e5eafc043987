// Progress without poll(): the backend's own thread moves posts past the first of a batch, the
// event fd says when poll() has work, and a plain send on a socket with posts not yet in the
// kernel waits for them (issue #18 items 3 and 4).
#include "uring_loopback.h"

#include <sys/uio.h>
#include <sys/wait.h>

extern "C" {
#include "send_order.h"
}

using namespace uring_test;

namespace {

// True once fd polls readable; false at the deadline.
bool Readable(int fd, std::chrono::milliseconds limit = kLimit) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, int(limit.count())) == 1 && (p.revents & POLLIN);
}

bool ReadableNow(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

// The first offset where got and want differ, or -1.
long Mismatch(const std::string &got, const std::string &want) {
  auto at = std::mismatch(got.begin(), got.end(), want.begin(), want.end());
  return at.first == got.end() && at.second == want.end() ? -1 : long(at.first - got.begin());
}

} // namespace

// Two posts of 4 MiB on one socket: the second waits in the backlog until the first's send
// reports. Nobody polls, yet the peer gets every byte; then one poll runs both completions.
TEST_F(UringTest, TwoBigPostsReachThePeerWithoutPoll) {
  constexpr size_t kPost = 4 << 20;
  Region mem(2 * kPost, 21);
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  Done d[2];
  for (int i = 0; i < 2; i++) {
    nic_sge sge = Sge(r, i * kPost, kPost);
    ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d[i]), 0);
  }
  ASSERT_TRUE(reader.WaitFor(2 * kPost))
      << "the peer got " << reader.Size() << " of " << 2 * kPost << " bytes without poll()";
  EXPECT_EQ(Mismatch(reader.Data(), mem.Bytes(0, 2 * kPost)), -1);
  // Every send submitted gets one notification; once all are reaped both posts are ready.
  auto all_notified = [&] {
    nic_uring_stats s = Stats();
    return s.notifications == s.send_zc_fixed + s.sendmsg_zc_fixed + s.sendmsg_zc_plain;
  };
  for (auto end = Clock::now() + kLimit; !all_notified() && Clock::now() < end;)
    usleep(200);
  ASSERT_TRUE(all_notified());
  EXPECT_EQ(d[0].calls + d[1].calls, 0) << "done() runs only from poll()";
  EXPECT_GT(Stats().progress_wakeups, 0u) << "the backend's thread did the reaping";
  const int efd = b->event_fd(b);
  ASSERT_GE(efd, 0);
  EXPECT_TRUE(Readable(efd)) << "completions are ready: the event fd must say so";
  EXPECT_EQ(b->poll(b, 0), 2);
  EXPECT_EQ(d[0].calls, 1);
  EXPECT_EQ(d[1].calls, 1);
  EXPECT_EQ(d[0].status, 0);
  EXPECT_EQ(d[1].status, 0);
  EXPECT_FALSE(ReadableNow(efd)) << "poll() ran everything: the event fd is cleared";
}

// A plain send, write, writev or sendmsg right after a 4 MiB post on the same socket arrives
// after all of it, every time. On a non-blocking socket (as event-driven servers have it) the
// program retries on EAGAIN, and the kernel took its bytes as soon as the socket had room, in
// the middle of the post (measured: at byte 523,864 of 4 MiB); on a blocking one it waits.
TEST_F(UringTest, PlainSendsAfterAPostArriveAfterIt) {
  constexpr size_t kPost = 4 << 20;
  constexpr int kRounds = 16;
  Region mem(kPost, 22);
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  std::vector<Done> done(kRounds);
  std::string want;
  int mismatched = 0;
  for (int i = 0; i < kRounds; i++) {
    const bool nonblocking = i % 2 == 0;
    ASSERT_EQ(fcntl(pair.tx, F_SETFL, nonblocking ? O_NONBLOCK : 0), 0);
    nic_sge sge = Sge(r, 0, kPost);
    ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &done[i]), 0);
    char tail[6];
    snprintf(tail, sizeof tail, "h%04d", i);
    iovec iov[2] = {{tail, 2}, {tail + 2, 3}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    ssize_t n = -1;
    for (auto end = Clock::now() + kLimit; Clock::now() < end;) {
      switch (i / 2 % 4) {
      case 0:
        n = send(pair.tx, tail, 5, 0);
        break;
      case 1:
        n = write(pair.tx, tail, 5);
        break;
      case 2:
        n = writev(pair.tx, iov, 2);
        break;
      case 3:
        n = sendmsg(pair.tx, &msg, 0);
        break;
      }
      if (n >= 0 || errno != EAGAIN) break;
      pollfd p{pair.tx, POLLOUT, 0};
      poll(&p, 1, 10);
    }
    ASSERT_EQ(n, 5) << strerror(errno);
    const size_t before = want.size();
    want += mem.Bytes(0, kPost) + std::string(tail, 5);
    ASSERT_TRUE(reader.WaitFor(want.size()));
    std::string got = reader.Data();
    long at = Mismatch(got.substr(before), want.substr(before));
    if (at >= 0) {
      mismatched++;
      ADD_FAILURE() << "round " << i << (nonblocking ? " (non-blocking)" : " (blocking)")
                    << ": the plain send landed inside the post, at byte " << at << " of "
                    << kPost + 5;
    }
  }
  EXPECT_EQ(mismatched, 0) << "of " << kRounds << " rounds";
  ASSERT_TRUE(PollUntil(b, [&] {
    for (auto &d : done)
      if (!d.calls) return false;
    return true;
  }));
}

// On a non-blocking socket a plain send does not wait behind posts: EAGAIN, nothing sent, and
// once the posts are in the socket it goes.
TEST_F(UringTest, NonBlockingPlainSendBehindAPostSaysEagain) {
  constexpr size_t kPost = 4 << 20;
  Region mem(kPost, 23);
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  ASSERT_EQ(fcntl(pair.tx, F_SETFL, O_NONBLOCK), 0);
  Reader reader(pair.rx, /*paused=*/true);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  Done d;
  nic_sge sge = Sge(r, 0, kPost);
  ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d), 0);
  errno = 0;
  EXPECT_EQ(send(pair.tx, "xyz", 3, 0), -1);
  EXPECT_EQ(errno, EAGAIN);
  reader.Resume();
  ssize_t n = -1;
  for (auto end = Clock::now() + kLimit; n != 3 && Clock::now() < end;) {
    n = send(pair.tx, "xyz", 3, 0);
    if (n < 0) {
      ASSERT_EQ(errno, EAGAIN);
      usleep(200);
    }
  }
  ASSERT_EQ(n, 3);
  ASSERT_TRUE(reader.WaitFor(kPost + 3));
  EXPECT_EQ(Mismatch(reader.Data(), mem.Bytes(0, kPost) + "xyz"), -1);
  ASSERT_TRUE(PollUntil(b, [&] { return d.calls > 0; }));
}

// A child of fork shares the parent's rings but not its posts: its plain sends on the socket
// go straight out (no wait for the parent's posts, and the check is back to one load).
TEST_F(UringTest, AChildOfForkSendsWithoutWaitingForTheParentsPosts) {
  constexpr size_t kPost = 4 << 20;
  Region mem(kPost, 24);
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  Reader reader(pair.rx, /*paused=*/true);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  Done d;
  nic_sge sge = Sge(r, 0, kPost);
  ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d), 0);
  ASSERT_TRUE(nic_send_order_active());
  fflush(nullptr);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (nic_send_order_active()) _exit(2);
    send(pair.tx, "c", 1, MSG_DONTWAIT); // returns (sent, or EAGAIN: the socket is full)
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: the child still checks plain sends against the "
                                       "parent's endpoints";
  reader.Resume();
  ASSERT_TRUE(PollUntil(b, [&] { return d.calls > 0; }));
}
