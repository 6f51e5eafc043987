// Loopback harness for the io_uring backend: a connected TCP or UDP pair, a receiver that drains
// on its own thread (on loopback the zero-copy notification usually waits for the receiver to
// read, so a test that waits for completions without draining hangs), patterned memory, and
// polling with a deadline. The safety suites (free-after-post, write-after-post) rely on a paused
// Reader plus small socket buffers keeping a post in flight for as long as a test wants; they
// go through the public API (UringSgaTest at the end).
#pragma once

#include <gtest/gtest.h>

#include "nicmalloc.h"
extern "C" {
#include "uring.h"
}

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace uring_test {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kLimit{20000}; // every wait fails after this

// Socket buffers small enough that a send of a few MiB must wait for the reader. Not much
// smaller: once the receive window stays below loopback's 64 KiB MSS, zero-copy sends on 6.18
// can stall for good (measured with 4 and 16 KiB buffers; plain send does not).
constexpr int kSmallBuf = 256 << 10;

// Anonymous memory filled with a seeded, non-periodic pattern (a misplaced byte shows).
struct Region {
  explicit Region(size_t len, unsigned seed = 1) : len(len) {
    void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    base = p == MAP_FAILED ? nullptr : static_cast<char *>(p);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; base && i < len; i++) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      base[i] = static_cast<char>(x);
    }
  }
  ~Region() {
    if (base) munmap(base, len);
  }
  std::string Bytes(size_t off, size_t n) const { return std::string(base + off, n); }
  char *base;
  size_t len;
};

// A connected 127.0.0.1 pair (TCP, or another stream protocol). Small buffers (bytes; 0 = kernel
// default) bound how much a send can queue before the receiver reads.
struct LoopbackPair {
  explicit LoopbackPair(int rcvbuf = 0, int sndbuf = 0, int protocol = 0) {
    int l = socket(AF_INET, SOCK_STREAM, protocol);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (rcvbuf) setsockopt(l, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf); // inherited
    if (bind(l, (sockaddr *)&a, sizeof a) || listen(l, 1) || getsockname(l, (sockaddr *)&a, &alen))
      ADD_FAILURE() << "listen on 127.0.0.1: " << strerror(errno);
    tx = socket(AF_INET, SOCK_STREAM, protocol);
    if (sndbuf) setsockopt(tx, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    if (connect(tx, (sockaddr *)&a, sizeof a)) ADD_FAILURE() << "connect: " << strerror(errno);
    rx = accept(l, nullptr, nullptr);
    close(l);
  }
  ~LoopbackPair() {
    if (tx >= 0) close(tx);
    if (rx >= 0) close(rx);
  }
  int tx = -1, rx = -1;
};

// Two UDP (or UDP-Lite) sockets on 127.0.0.1, connected to each other. A large receive buffer,
// so that no datagram is dropped while the Reader catches up.
struct UdpPair {
  explicit UdpPair(int protocol = 0) {
    rx = socket(AF_INET, SOCK_DGRAM, protocol);
    tx = socket(AF_INET, SOCK_DGRAM, protocol);
    int big = 8 << 20;
    setsockopt(rx, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    sockaddr_in a{}, b{};
    a.sin_family = b.sin_family = AF_INET;
    a.sin_addr.s_addr = b.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a, blen = sizeof b;
    if (bind(rx, (sockaddr *)&a, sizeof a) || getsockname(rx, (sockaddr *)&a, &alen) ||
        bind(tx, (sockaddr *)&b, sizeof b) || getsockname(tx, (sockaddr *)&b, &blen) ||
        connect(tx, (sockaddr *)&a, sizeof a) || connect(rx, (sockaddr *)&b, sizeof b))
      ADD_FAILURE() << "udp pair on 127.0.0.1: " << strerror(errno);
  }
  ~UdpPair() {
    close(tx);
    close(rx);
  }
  int tx = -1, rx = -1;
};

// Waits for a forked child, which answers through its exit status, and expects 0; what the other
// statuses mean is the caller's to say.
inline void ExpectChildExitsZero(pid_t pid, const char *statuses) {
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "wait status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << statuses;
}

// Reads rx on its own thread into a string, in reads of at most `chunk` bytes.
class Reader {
public:
  explicit Reader(int fd, bool paused = false, size_t chunk = 1 << 16)
      : fd_(fd), chunk_(chunk), paused_(paused), thread_([this] { Run(); }) {}
  ~Reader() {
    stop_ = true;
    thread_.join();
  }
  void Resume() { paused_ = false; }
  void Pause() { paused_ = true; }
  std::string Data() {
    std::lock_guard<std::mutex> g(mu_);
    return data_;
  }
  size_t Size() {
    std::lock_guard<std::mutex> g(mu_);
    return data_.size();
  }
  // What each read returned: one datagram per read on a datagram socket.
  std::vector<std::string> Reads() {
    std::lock_guard<std::mutex> g(mu_);
    std::vector<std::string> out;
    for (size_t i = 0, at = 0; i < ends_.size(); at = ends_[i++])
      out.push_back(data_.substr(at, ends_[i] - at));
    return out;
  }
  // True once at least n bytes arrived; false at the deadline.
  bool WaitFor(size_t n, std::chrono::milliseconds limit = kLimit) {
    for (auto end = Clock::now() + limit; Size() < n;) {
      if (Clock::now() > end) return false;
      usleep(200);
    }
    return true;
  }

private:
  void Run() {
    std::vector<char> buf(chunk_);
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (paused_ || poll(&p, 1, 10) <= 0) {
        if (paused_) usleep(1000);
        continue;
      }
      ssize_t r = read(fd_, buf.data(), buf.size());
      if (r <= 0) break; // EOF or reset
      std::lock_guard<std::mutex> g(mu_);
      data_.append(buf.data(), static_cast<size_t>(r));
      ends_.push_back(data_.size());
    }
  }
  int fd_;
  size_t chunk_;
  std::atomic<bool> paused_, stop_{false};
  std::mutex mu_;
  std::string data_;
  std::vector<size_t> ends_;
  std::thread thread_; // last: starts once the rest is built
};

// Counts done() calls and failures; keeps the last status.
struct Done {
  std::atomic<int> calls{0}, failed{0};
  std::atomic<int> status{INT_MIN};
  static void Fn(void *arg, int st) {
    auto *d = static_cast<Done *>(arg);
    d->status = st;
    if (st) d->failed++;
    d->calls++;
  }
};

// Runs completions until pred() holds; false at the deadline.
template <class Pred>
bool PollUntil(struct nic_backend *b, Pred pred, std::chrono::milliseconds limit = kLimit) {
  for (auto end = Clock::now() + limit; !pred();) {
    if (Clock::now() > end) return false;
    if (b->poll(b, 64) == 0) usleep(100);
  }
  return true;
}

inline nic_sge Sge(const nic_registration &r, size_t off, uint32_t len) {
  return nic_sge{static_cast<char *>(r.base) + off, len, r.lkey, r.handle};
}

// The reason io_uring cannot run here, or "" when it should.
inline std::string UringDisabledReason(int open_errno) {
  int disabled = 0;
  std::ifstream("/proc/sys/kernel/io_uring_disabled") >> disabled;
  if (disabled == 2) return "io_uring is disabled (kernel.io_uring_disabled = 2)";
  if (open_errno == EPERM) return "io_uring_setup: EPERM (io_uring_disabled or seccomp)";
  if (open_errno == ENOSYS) return "io_uring_setup: ENOSYS (kernel without io_uring)";
  return "";
}

// Opens a fresh uring backend per test; skips only where io_uring is switched off.
class UringTest : public ::testing::Test {
protected:
  void SetUp() override {
    errno = 0;
    b = nic_backend_uring_open();
    if (!b) {
      int e = errno;
      std::string why = UringDisabledReason(e);
      if (!why.empty()) GTEST_SKIP() << why;
      FAIL() << "nic_backend_uring_open failed: " << strerror(e);
    }
  }
  void TearDown() override {
    for (nic_endpoint *ep : eps)
      EXPECT_EQ(nic_uring_endpoint_close(ep), 0);
    if (b) b->close(b);
  }
  nic_endpoint *Endpoint(int fd) {
    nic_endpoint *ep = nic_uring_endpoint_open(b, fd);
    EXPECT_NE(ep, nullptr) << strerror(errno);
    if (ep) eps.push_back(ep);
    return ep;
  }
  nic_registration Reg(void *base, size_t len) {
    nic_registration r{};
    EXPECT_EQ(b->reg(b, base, len, NIC_ACCESS_LOCAL, &r), 0);
    return r;
  }
  nic_uring_stats Stats() {
    nic_uring_stats s{};
    EXPECT_TRUE(nic_uring_get_stats(b, &s));
    return s;
  }
  struct nic_backend *b = nullptr;
  std::vector<nic_endpoint *> eps;
};

// ---- Through the public API: nic_uring_endpoint_create, nic_sga_*, nic_poll ----

inline nic_stats NicStats() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

// Until thread tid (a gettid number) is inside a poll or epoll_wait system call, as nic_wait's
// sleep is; false at the deadline.
inline bool WaitUntilInPoll(pid_t tid, std::chrono::milliseconds limit = kLimit) {
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/syscall";
  for (auto end = Clock::now() + limit; Clock::now() < end;) {
    FILE *f = fopen(path.c_str(), "r");
    long nr = -1;
    if (f) {
      if (fscanf(f, "%ld", &nr) != 1) nr = -1;
      fclose(f);
    }
    if (nr == SYS_poll || nr == SYS_ppoll || nr == SYS_epoll_wait || nr == SYS_epoll_pwait)
      return true;
    std::this_thread::yield();
  }
  return false;
}

// Runs completions (nic_poll) until pred() holds; false at the deadline.
template <class Pred> bool NicPollUntil(Pred pred, std::chrono::milliseconds limit = kLimit) {
  for (auto end = Clock::now() + limit; !pred();) {
    if (Clock::now() > end) return false;
    if (nic_poll(64) == 0) usleep(100);
  }
  return true;
}

// One message of the given parts, posted with done as its completion. 0 or the first error.
inline int PostParts(nic_endpoint *ep, const std::vector<std::pair<const void *, size_t>> &parts,
                     Done *done) {
  nic_sga sga;
  int rc = nic_sga_init(&sga, 0);
  for (size_t i = 0; i < parts.size() && rc == 0; i++)
    rc = nic_sga_add(&sga, parts[i].first, parts[i].second);
  if (rc == 0) rc = nic_sga_post(&sga, ep, Done::Fn, done);
  if (rc) nic_sga_reset(&sga);
  return rc;
}

// The process-wide backend must be uring (ctest sets NICMALLOC_BACKEND=uring); skips only where
// io_uring is switched off. Endpoints made with Endpoint() are destroyed once their posts are.
class UringSgaTest : public ::testing::Test {
protected:
  void SetUp() override {
    struct nic_backend *b = nic_backend_active();
    if (b && nic_uring_is(b)) return;
    std::string why = UringDisabledReason(0);
    if (!why.empty()) GTEST_SKIP() << why;
    FAIL() << "the backend in use is " << (b ? b->name : "none")
           << ", not uring: run with NICMALLOC_BACKEND=uring (ctest does)";
  }
  void TearDown() override {
    for (nic_endpoint *ep : eps) {
      int rc = -EBUSY;
      NicPollUntil([&] { return (rc = nic_uring_endpoint_destroy(ep)) != -EBUSY; });
      EXPECT_EQ(rc, 0);
    }
    EXPECT_EQ(NicStats().inflight_entries, 0u);
  }
  nic_endpoint *Endpoint(int fd) {
    nic_endpoint *ep = nic_uring_endpoint_create(fd);
    EXPECT_NE(ep, nullptr) << strerror(errno);
    if (ep) eps.push_back(ep);
    return ep;
  }
  std::vector<nic_endpoint *> eps;
};

} // namespace uring_test
