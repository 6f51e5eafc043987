// The adapters' suites send through the public API over the backend of the run (ctest sets
// NICMALLOC_BACKEND): on sim, an endpoint that receives its own posts; on uring, a TCP pair on
// 127.0.0.1, posting on one end and receiving (nic_endpoint_receive) on the other; on verbs, an
// RC QP of the software device (tests/regcache/soft_verbs.h) connected to itself, each post one
// send into one of the endpoint's 64 KiB receive buffers; on dpdk, net_ring0
// (NICMALLOC_DPDK_VDEV), a port that receives its own packets, in order, in the very memory the
// sender posted. Either way the receiver is fed the bytes in order, in whatever pieces the
// transport delivers. A sim endpoint's receive function runs on the sim engine's thread: the feed
// runs under a lock that the waits (PollUntil) take to test their condition, so that the test
// never reads what the feed fills while the feed writes it.
//
// DPDK: a post is one packet. net_ring hands a packet over in place when its segments lie end to
// end (one entry, however long), but a packet of scattered entries must be gathered into one
// 4 KiB receive buffer and is dropped when longer; so on dpdk every post carries one entry
// (Wire::entries) and the stream readers join a message's packets. A message read in place
// holds the sender's own memory, whose post then completes only at the release: the suites
// check and drop what they received before waiting for completions, never hold while waiting.
#pragma once

#include <gtest/gtest.h>

#include <nicmalloc.h>
#include <nicmalloc/sg_post.h>

#ifdef NIC_ADAPTERS_SOFT_VERBS
#include "soft_verbs.h"
#endif

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>

namespace adapters_test {

inline nic_stats Stats() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

// The backend of the run ("sim", "uring", ...), opened by a first nic_sga_init: the one
// NICMALLOC_BACKEND names (the statistics name every backend started, a case's own included).
inline std::string Backend() {
  nic_sga sga;
  if (nic_sga_init(&sga, 0) != 0) return "none";
  const char *named = getenv("NICMALLOC_BACKEND");
  return named && *named ? named : Stats().backend;
}

// An RC QP of the software verbs device (built in for the verbs runs: tests/adapters.cmake),
// connected to itself, in RTS, with CQs of its own, taking send_sge send entries (0: the
// device's). Empty where the device is not built in.
struct SoftQp {
  void *qp = nullptr, *scq = nullptr, *rcq = nullptr;
};
inline SoftQp SoftQpOpen(unsigned send_sge) {
  SoftQp q;
#ifdef NIC_ADAPTERS_SOFT_VERBS
  auto *pd = static_cast<ibv_pd *>(nic_verbs_get_pd());
  if (!pd) return q;
  auto *scq = soft_verbs_cq(pd->context), *rcq = soft_verbs_cq(pd->context);
  ibv_qp *qp = soft_verbs_qp(pd, scq, rcq, IBV_QPT_RC, 32, nullptr);
  q = {qp, scq, rcq};
  if (!qp) return q;
  if (send_sge) soft_verbs_qp_send_sge(qp, send_sge);
  for (ibv_qp_state st : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    ibv_qp_attr a{};
    a.qp_state = st;
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  }
#else
  (void)send_sge;
  ADD_FAILURE() << "built without the software verbs device (tests/adapters.cmake)";
#endif
  return q;
}
inline void SoftQpFree(const SoftQp &q) {
#ifdef NIC_ADAPTERS_SOFT_VERBS
  for (void *p : {q.qp, q.scq, q.rcq})
    if (p) soft_verbs_free(p);
#else
  (void)q;
#endif
}

// Counts done() calls and failures.
struct Done {
  std::atomic<int> calls{0}, failed{0};
  static void Fn(void *arg, int status) {
    auto *d = static_cast<Done *>(arg);
    if (status) d->failed++;
    d->calls++;
  }
};

class Wire {
public:
  using Feed = std::function<void(void *data, size_t len)>;
  // verbs_send_sge: on verbs, the send entries the QP is made with (0: the device's), as a QP
  // made with fewer than its device takes.
  explicit Wire(Feed feed, unsigned verbs_send_sge = 0)
      : feed_(std::move(feed)), backend_(Backend()) {
    if (backend_ == "none") return; // the fixture skips (Unavailable)
    if (backend_ == "verbs") {
      qp_ = SoftQpOpen(verbs_send_sge);
      EXPECT_NE(qp_.qp, nullptr);
      tx_ = qp_.qp ? nic_verbs_endpoint_create(qp_.qp) : nullptr;
      EXPECT_NE(tx_, nullptr) << strerror(errno);
      if (tx_) {
        EXPECT_EQ(nic_endpoint_receive(tx_, Receive, this), 0);
      }
      return;
    }
    if (backend_ == "sim") {
      tx_ = nic_sim_endpoint_create(Receive, this, 0);
      EXPECT_NE(tx_, nullptr) << strerror(errno);
      return;
    }
    if (backend_ == "dpdk") {
      tx_ = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
      EXPECT_NE(tx_, nullptr) << strerror(errno);
      if (tx_) {
        EXPECT_EQ(nic_endpoint_receive(tx_, Receive, this), 0);
      }
      return;
    }
    EXPECT_EQ(backend_, "uring") << "run with NICMALLOC_BACKEND=sim, uring, verbs or dpdk";
    int l = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(l, (sockaddr *)&a, sizeof a) || listen(l, 1) || getsockname(l, (sockaddr *)&a, &alen))
      ADD_FAILURE() << "listen on 127.0.0.1: " << strerror(errno);
    fd_tx_ = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd_tx_, (sockaddr *)&a, sizeof a)) ADD_FAILURE() << "connect: " << strerror(errno);
    fd_rx_ = accept(l, nullptr, nullptr);
    close(l);
    tx_ = nic_uring_endpoint_create(fd_tx_);
    rx_ = nic_uring_endpoint_create(fd_rx_);
    EXPECT_NE(tx_, nullptr) << strerror(errno);
    EXPECT_NE(rx_, nullptr) << strerror(errno);
    if (rx_) {
      EXPECT_EQ(nic_endpoint_receive(rx_, Receive, this), 0);
    }
  }
  ~Wire() {
    if (backend_ == "none") return;
    // A stream a case cut is forgotten with its endpoint (the next case's endpoint, even at its
    // address, has a stream of its own: this only drops the entry).
    if (tx_) nicmalloc::stream_restart(tx_);
    auto end = std::chrono::steady_clock::now() + kLimit;
    if (backend_ == "sim") {
      while (tx_ && nic_sim_endpoint_destroy(tx_) == -EBUSY &&
             std::chrono::steady_clock::now() < end)
        nic_wait(10);
      return;
    }
    if (backend_ == "dpdk") {
      while (tx_ && nic_dpdk_endpoint_destroy(tx_) == -EBUSY &&
             std::chrono::steady_clock::now() < end)
        nic_wait(10);
      return;
    }
    if (backend_ == "verbs") {
      // The destroy moves the QP to error, whose flushed receives polls reap.
      while (tx_ && nic_verbs_endpoint_destroy(tx_) == -EBUSY &&
             std::chrono::steady_clock::now() < end)
        nic_wait(10);
      SoftQpFree(qp_);
      return;
    }
    while (tx_ && nic_uring_endpoint_destroy(tx_) == -EBUSY &&
           std::chrono::steady_clock::now() < end)
      nic_wait(10);
    while (rx_ && nic_uring_endpoint_destroy(rx_) == -EBUSY &&
           std::chrono::steady_clock::now() < end)
      nic_wait(10);
    close(fd_tx_);
    close(fd_rx_);
  }
  Wire(const Wire &) = delete;
  Wire &operator=(const Wire &) = delete;

  nic_endpoint *tx() const { return tx_; }
  const std::string &backend() const { return backend_; }
  // Why the run's backend could not open (DPDK where EAL cannot start), or "".
  std::string Unavailable() const {
    return backend_ == "none" ? "the backend of NICMALLOC_BACKEND did not open (see the warning "
                                "above): nothing to send on"
                              : "";
  }
  int ends() const {
    std::lock_guard<std::mutex> g(mu_);
    return ends_;
  }
  // The receiving endpoint's nic_endpoint_status: 0 while it receives, else how it ended.
  int status() const { return nic_endpoint_status(rx_ ? rx_ : tx_); }
  // The entry limit to post with, for a test that wants `want` (0: the endpoint's): 1 on dpdk,
  // where a packet of several scattered entries longer than a receive buffer is dropped.
  unsigned entries(unsigned want = 0) const { return backend_ == "dpdk" ? 1 : want; }

  // Runs completions and receives until pred() holds; false after kLimit. pred runs under the
  // feed's lock: it must not wait for nicmalloc, whose sim engine may be feeding meanwhile.
  template <typename Pred> bool PollUntil(Pred pred) {
    for (auto end = std::chrono::steady_clock::now() + kLimit;;) {
      {
        std::lock_guard<std::mutex> g(mu_);
        if (pred()) return true;
      }
      if (std::chrono::steady_clock::now() > end) return false;
      nic_wait(10);
    }
  }

  static constexpr std::chrono::milliseconds kLimit{30000}; // every wait fails after this

private:
  static void Receive(void *arg, void *data, size_t len) {
    auto *w = static_cast<Wire *>(arg);
    std::lock_guard<std::mutex> g(w->mu_);
    if (!data) {
      w->ends_++;
      return;
    }
    w->feed_(data, len);
  }
  mutable std::mutex mu_; // the feed's, and PollUntil's while it tests its condition
  Feed feed_;
  std::string backend_;
  nic_endpoint *tx_ = nullptr, *rx_ = nullptr;
  SoftQp qp_; // verbs
  int fd_tx_ = -1, fd_rx_ = -1;
  int ends_ = 0;
};

// Bytes of a pattern that differs with seed and position (a misplaced byte shows).
inline unsigned char PatternByte(uint64_t seed, size_t i) {
  uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  return static_cast<unsigned char>(x >> 56);
}
inline void FillPattern(void *p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++)
    static_cast<unsigned char *>(p)[i] = PatternByte(seed, i);
}
// The index of the first byte off the pattern, or n.
inline size_t PatternMismatch(const void *p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++)
    if (static_cast<const unsigned char *>(p)[i] != PatternByte(seed, i)) return i;
  return n;
}

} // namespace adapters_test
