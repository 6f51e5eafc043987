// nic_wait and nic_event_fd through the public API on io_uring (NICMALLOC_BACKEND=uring): a
// server that blocks instead of spinning on nic_poll, by nic_wait or by its own epoll set.
#include "uring_loopback.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cstring>
#include <thread>

using namespace uring_test;

namespace {

constexpr int kLimitMs = int(kLimit.count());

// epoll_wait until fd events or the deadline. io_uring runs a send's continuation as task work
// in the thread that submitted it, which interrupts epoll_wait there with EINTR (epoll_wait is
// never restarted): a program retries, as for a signal.
int EpollWait(int epfd, epoll_event *ev, int timeout_ms) {
  int n, eintr = 0;
  auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while ((n = epoll_wait(epfd, ev, 1, timeout_ms)) < 0 && errno == EINTR && Clock::now() < end)
    eintr++;
  if (n < 0) ADD_FAILURE() << "epoll_wait: " << strerror(errno) << " after " << eintr << " EINTR";
  return n;
}

// eventfd and epoll descriptors open in the process.
int AnonDescriptors() {
  int n = 0;
  char link[64], target[64];
  for (int fd = 0; fd < 4096; fd++) {
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t len = readlink(link, target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = 0;
    n += strstr(target, "[eventfd]") || strstr(target, "[eventpoll]");
  }
  return n;
}

struct Message {
  explicit Message(size_t len) : len(len), p(static_cast<char *>(nic_malloc(len))) {
    for (size_t i = 0; i < len; i++)
      p[i] = static_cast<char>(i * 7 + 3);
  }
  ~Message() { free(p); }
  size_t len;
  char *p;
};

// fd in an epoll set of the test's: empty before a send, readable once the backend's thread made
// its completion ready (the program only sleeps in epoll_wait), empty once nic_poll ran it.
void ExpectEpollFollowsACompletion(int fd, nic_endpoint *ep) {
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(epfd, 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ASSERT_EQ(epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev), 0);
  EXPECT_EQ(EpollWait(epfd, &ev, 0), 0) << "nothing to do yet";
  Message m(1 << 20);
  Done d;
  ASSERT_EQ(PostParts(ep, {{m.p, m.len}}, &d), 0);
  ASSERT_EQ(EpollWait(epfd, &ev, kLimitMs), 1) << "the completion never made the fd readable";
  EXPECT_EQ(d.calls, 0) << "done() runs only from nic_poll";
  EXPECT_EQ(nic_poll(0), 1);
  EXPECT_EQ(d.calls, 1);
  EXPECT_EQ(d.status, 0);
  EXPECT_EQ(EpollWait(epfd, &ev, 0), 0) << "nic_poll ran everything: the fd is clear";
  close(epfd);
}

} // namespace

TEST_F(UringSgaTest, WaitRunsCompletionsAndTimesOutWhenThereAreNone) {
  EXPECT_EQ(nic_wait(0), 0) << "nothing posted";
  EXPECT_EQ(nic_wait(5), 0) << "nothing posted: returns at the timeout";
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  Message m(3 << 20);
  Done d[2];
  ASSERT_EQ(PostParts(ep, {{m.p, m.len}}, &d[0]), 0);
  ASSERT_EQ(PostParts(ep, {{m.p, m.len}}, &d[1]), 0);
  int ran = 0;
  while (ran < 2) {
    const int n = nic_wait(kLimitMs);
    ASSERT_GT(n, 0) << (n ? strerror(-n) : "nic_wait timed out with posts in flight");
    ran += n;
  }
  EXPECT_EQ(ran, 2);
  EXPECT_EQ(d[0].calls + d[1].calls, 2);
  EXPECT_EQ(d[0].status, 0);
  EXPECT_EQ(d[1].status, 0);
  EXPECT_TRUE(reader.WaitFor(2 * m.len));
  EXPECT_EQ(nic_wait(0), 0);
}

TEST_F(UringSgaTest, EventFdInEpollSaysWhenNicPollHasWork) {
  const int efd = nic_event_fd();
  ASSERT_GE(efd, 0) << strerror(-efd);
  EXPECT_EQ(nic_event_fd(), efd) << "one descriptor for the process";
  LoopbackPair pair;
  Reader reader(pair.rx);
  ExpectEpollFollowsACompletion(efd, Endpoint(pair.tx));
}

// nic_thread_event_fd (one per thread, holding the backends' set) wakes an event loop for the
// NIC's work as nic_event_fd does, through the set nested in it.
TEST_F(UringSgaTest, ThreadEventFdInEpollSaysWhenNicPollHasWork) {
  const int tfd = nic_thread_event_fd();
  ASSERT_GE(tfd, 0) << strerror(-tfd);
  EXPECT_EQ(nic_thread_event_fd(), tfd) << "one descriptor for the thread";
  EXPECT_NE(nic_event_fd(), tfd);
  int other = -1;
  std::thread([&other] { other = nic_thread_event_fd(); }).join();
  EXPECT_GE(other, 0);
  EXPECT_NE(other, tfd) << "each thread has its own";
  LoopbackPair pair;
  Reader reader(pair.rx);
  ExpectEpollFollowsACompletion(tfd, Endpoint(pair.tx));
}

// A thread's descriptor, and the eventfd in it, go when the thread exits: a program that starts
// a thread per connection does not run out of descriptors.
TEST_F(UringSgaTest, ThreadEventFdIsClosedWhenItsThreadExits) {
  ASSERT_GE(nic_event_fd(), 0);
  const int before = AnonDescriptors();
  for (int i = 0; i < 3; i++) {
    int fd = -1;
    std::thread([&fd] { fd = nic_thread_event_fd(); }).join();
    ASSERT_GE(fd, 0) << strerror(-fd);
  }
  EXPECT_EQ(AnonDescriptors(), before) << "descriptors of exited threads left open";
}

// A program that closes the descriptor (which it must not) and opens another set under the same
// number keeps that set: the thread's exit closes only the set that still holds its eventfd.
TEST_F(UringSgaTest, AThreadEventFdTheProgramClosedIsNotClosedAgainAtExit) {
  ASSERT_GE(nic_event_fd(), 0);
  int reused = -1, was = -1;
  std::thread([&] {
    was = nic_thread_event_fd();
    close(was);
    reused = epoll_create1(EPOLL_CLOEXEC); // the lowest free number: the one just closed
  }).join();
  ASSERT_GE(was, 0);
  ASSERT_EQ(reused, was) << "the number was not reused; nothing to check";
  EXPECT_NE(fcntl(reused, F_GETFD), -1) << "the program's own set was closed at the thread's exit";
  close(reused);
}

TEST_F(UringSgaTest, WaitRefusesATimeoutBelowMinusOne) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_wait(-2), -EINVAL);
  EXPECT_EQ(nic_wait(-7), -EINVAL);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("nic_wait(-2)"), std::string::npos) << err;
  EXPECT_EQ(err.find("nic_wait(-7)"), std::string::npos) << "said once: " << err;
}
