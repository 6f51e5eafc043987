// The public endpoints of the dpdk and verbs backends (nic_dpdk_endpoint_create,
// nic_verbs_get_pd / nic_verbs_endpoint_create) through libnicmalloc.so, as an application uses
// them: the dpdk cases run with NICMALLOC_BACKEND=dpdk on net_ring0 (which loops back to
// itself), the refusals under sim, the verbs ones under NICMALLOC_BACKEND=verbs (tests/
// plugins.cmake). Every case is a process of its own: EAL starts once per process.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <infiniband/verbs.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include "../dpdk_app_eal.h"
#include "dpdk_ring_ports.h"
#include "dpdk_rx.h"
#include "nicmalloc.h"
#include "verbs_loopback.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Done {
  int calls = 0, status = 1;
  static void Fn(void *arg, int status) {
    auto *d = static_cast<Done *>(arg);
    d->status = status;
    d->calls++;
  }
};

bool PollUntilDone(const Done &d) {
  for (auto end = Clock::now() + std::chrono::seconds(10); !d.calls; nic_poll(16))
    if (Clock::now() > end) return false;
  return true;
}

nic_stats Stats() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

int Lines(const std::string &s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// A dataplane block and a control-heap block, filled; posted as one message.
struct Message {
  char *dp = static_cast<char *>(nic_malloc(3000));
  char *ctl = static_cast<char *>(malloc(5000));
  std::string bytes;
  Message() {
    for (int i = 0; i < 3000; i++)
      dp[i] = static_cast<char>(i * 7);
    for (int i = 0; i < 5000; i++)
      ctl[i] = static_cast<char>(i * 13 + 1);
    bytes = std::string(dp, 3000) + std::string(ctl, 5000);
  }
  Message(const Message &) = delete;
  Message &operator=(const Message &) = delete;
  ~Message() { // a post still in flight defers the frees
    free(dp);
    free(ctl);
  }
  int Post(nic_endpoint *ep, Done *done) {
    nic_sga sga;
    int rc = nic_sga_init(&sga, 0);
    if (!rc) rc = nic_sga_add(&sga, dp, 3000);
    if (!rc) rc = nic_sga_add(&sga, ctl, 5000);
    if (!rc) rc = nic_sga_post(&sga, ep, Done::Fn, done);
    return rc;
  }
  // Right after the post: both frees must wait for the NIC.
  void FreeAndScribble() {
    free(dp);
    free(ctl);
    dp = ctl = nullptr;
    for (int i = 0; i < 32; i++) {
      void *q = i % 2 ? nic_malloc(3000) : malloc(5000);
      memset(q, 0x5a, i % 2 ? 3000 : 5000);
      free(q);
    }
  }
};

// Posts msg on ep and takes its packet off net_ring0, where it loops back: the peer holds the
// mbufs, so the post completes only after rte_pktmbuf_free. NULL, with a failure, otherwise.
rte_mbuf *PostAndTakeOffTheRing(nic_endpoint *ep, Message &msg, Done *done) {
  uint16_t port = UINT16_MAX;
  if (rte_eth_dev_get_port_by_name("net_ring0", &port) != 0) {
    ADD_FAILURE() << "no port net_ring0";
    return nullptr;
  }
  if (int rc = msg.Post(ep, done)) {
    ADD_FAILURE() << "nic_sga_post: " << rc;
    return nullptr;
  }
  rte_mbuf *m = RxOne(port, 5000);
  if (!m) ADD_FAILURE() << "nothing came back on net_ring0";
  return m;
}

// Takes the packet of a post off port, checks its bytes and frees it (the post then completes),
// then polls until done ran, with 0. The packet's segments; 0 when none came.
unsigned TakeItAndComplete(int port, const std::string &want, Done &done) {
  rte_mbuf *m = RxOne(static_cast<uint16_t>(port));
  if (!m) {
    ADD_FAILURE() << "nothing arrived on port " << port;
    return 0;
  }
  const unsigned segs = m->nb_segs;
  EXPECT_EQ(Bytes(m), want);
  rte_pktmbuf_free(m);
  EXPECT_TRUE(PollUntilDone(done));
  EXPECT_EQ(done.status, 0);
  return segs;
}

// The backend opens on first need; nic_sga_init needs it.
std::string BackendName() {
  nic_sga sga;
  nic_sga_init(&sga, 0);
  return Stats().backend;
}
// The started backends' names are joined by '+': an io_uring endpoint may run beside dpdk.
bool UsingDpdk() {
  return BackendName().find("dpdk") != std::string::npos;
}
#define REQUIRE_DPDK()                                                                             \
  if (!UsingDpdk()) GTEST_SKIP() << "the dpdk backend did not open (see the warning above)"

TEST(DpdkEndpoint, DefaultPortFreeAfterPostArrivesIntactAndCompletesAfterThePeerFrees) {
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  EXPECT_EQ(nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0), ep) << "one endpoint per queue";
  uint16_t port = UINT16_MAX;
  ASSERT_EQ(rte_eth_dev_get_port_by_name("net_ring0", &port), 0);
  const uint64_t deferred = Stats().deferred_frees;
  Message msg;
  Done done;
  ASSERT_EQ(msg.Post(ep, &done), 0);
  const std::string want = msg.bytes;
  msg.FreeAndScribble();
  EXPECT_GE(Stats().deferred_frees, deferred + 2) << "a block in flight was freed at once";
  rte_mbuf *m = RxOne(port, 5000);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(Bytes(m), want) << "the peer got reused memory";
  nic_poll(16);
  EXPECT_EQ(done.calls, 0) << "completed while the peer holds the mbufs";
  rte_pktmbuf_free(m);
  ASSERT_TRUE(PollUntilDone(done));
  EXPECT_EQ(done.status, 0);
  EXPECT_EQ(Stats().deferred_pending, 0u);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0) << "each create needs its destroy";
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), -EINVAL) << "destroyed more often than created";
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("not an endpoint made by nic_dpdk_endpoint_create"), std::string::npos) << err;
}

// dpdk has no event descriptor: nic_event_fd says so (once), and nic_wait polls in short
// sleeps until the completion is ready.
TEST(DpdkEndpoint, WaitWithoutAnEventFdPollsUntilTheCompletion) {
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_event_fd(), -ENOSYS);
  EXPECT_EQ(nic_event_fd(), -ENOSYS);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(Lines(err), 1) << err;
  EXPECT_NE(err.find("no event descriptor"), std::string::npos) << err;
  Message msg;
  Done done;
  rte_mbuf *m = PostAndTakeOffTheRing(ep, msg, &done);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(nic_wait(0), 0) << "the peer holds the mbufs";
  // The peer frees the chain once this thread sleeps in nic_wait (nanosleep in /proc): the
  // completion must be found by a later round of the wait, not by its first poll.
  const pid_t waiter = gettid();
  std::thread peer([waiter, m] {
    const std::string path = "/proc/self/task/" + std::to_string(waiter) + "/syscall";
    for (int i = 0; i < 100000; i++) { // bounded: a broken wait still ends the test
      long nr = -1;
      if (FILE *f = fopen(path.c_str(), "r")) {
        if (fscanf(f, "%ld", &nr) != 1) nr = -1;
        fclose(f);
      }
      if (nr == SYS_nanosleep || nr == SYS_clock_nanosleep) break;
      usleep(100);
    }
    rte_pktmbuf_free(m);
  });
  int ran = nic_wait(10000); // the deadline only bounds a broken wait
  while (ran == -EINTR)
    ran = nic_wait(10000);
  peer.join();
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(done.calls, 1);
  EXPECT_EQ(done.status, 0);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
}

// nic_event_fd's set handed out while only the sim ran, then dpdk, which has no event
// descriptor, started beside it (run under sim): a program asleep on that set must still wake
// for dpdk's completions. The set ticks every millisecond from then on, said once, and each
// nic_poll reads the ticks, so a loop on it wakes about once a millisecond, not without pause.
TEST(DpdkAfterEventFd, TheSetHandedOutBeforeStillWakesForItsCompletions) {
  if (BackendName() != "sim")
    GTEST_SKIP() << "the backend is " << BackendName() << ": ctest runs this under sim";
  const int efd = nic_event_fd();
  ASSERT_GE(efd, 0) << "the sim has an event descriptor";
  testing::internal::CaptureStderr();
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  std::string err = testing::internal::GetCapturedStderr();
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  EXPECT_NE(err.find("now polls readable every millisecond"), std::string::npos) << err;
  EXPECT_EQ(nic_event_fd(), -ENOSYS) << "a new caller is told, as when dpdk came first";
  Message msg;
  Done done;
  rte_mbuf *m = PostAndTakeOffTheRing(ep, msg, &done);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(Bytes(m), msg.bytes);
  rte_pktmbuf_free(m); // the completion is ready for the next poll of dpdk
  // As an event loop: sleep on the set, poll when it is readable.
  const auto start = Clock::now();
  while (!done.calls && Clock::now() - start < std::chrono::seconds(10)) {
    pollfd p = {efd, POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) break; // without the ticks: asleep for good
    nic_poll(0);
  }
  ASSERT_EQ(done.calls, 1) << "asleep on nic_event_fd's set, the completion never woke it";
  EXPECT_EQ(done.status, 0);
  // Then idle for 100 ms: ticks, not a readable set that never clears (that would wake the loop
  // without pause, far more often than the bound below, which a tick a millisecond never nears).
  unsigned wakeups = 0;
  const auto idle = Clock::now();
  while (Clock::now() - idle < std::chrono::milliseconds(100)) {
    pollfd p = {efd, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) wakeups++;
    nic_poll(0);
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - idle).count();
  EXPECT_GE(wakeups, 1u) << "no tick in " << ms << " ms";
  EXPECT_LE(wakeups, 3 * static_cast<unsigned>(ms) + 20) << "the set stays readable";
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
}

// A connected TCP pair over loopback, for an io_uring endpoint beside the dpdk one.
struct TcpPair {
  TcpPair() {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(l, (sockaddr *)&a, sizeof a) || listen(l, 1) || getsockname(l, (sockaddr *)&a, &alen))
      ADD_FAILURE() << "listen on 127.0.0.1: " << strerror(errno);
    tx = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(tx, (sockaddr *)&a, sizeof a)) ADD_FAILURE() << "connect: " << strerror(errno);
    rx = accept(l, nullptr, nullptr);
    close(l);
  }
  ~TcpPair() {
    close(tx);
    close(rx);
  }
  std::string Read(size_t n) const {
    std::string out;
    char buf[1 << 16];
    for (auto end = Clock::now() + std::chrono::seconds(10);
         out.size() < n && Clock::now() < end;) {
      pollfd p = {rx, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      ssize_t got = read(rx, buf, std::min(sizeof buf, n - out.size()));
      if (got <= 0) break;
      out.append(buf, static_cast<size_t>(got));
    }
    return out;
  }
  int tx = -1, rx = -1;
};

// dpdk (the default backend here) and io_uring in one process: the io_uring endpoint starts
// its backend beside dpdk, and a message to each arrives whole and completes from nic_poll.
TEST(DpdkEndpoint, BesideUringBothDeliverEveryByte) {
  nic_endpoint *dpdk = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(dpdk, nullptr);
  TcpPair pair;
  nic_endpoint *uring = nic_uring_endpoint_create(pair.tx);
  ASSERT_NE(uring, nullptr) << "errno " << errno;
  EXPECT_EQ(std::string(Stats().backend), "uring+dpdk");
  uint16_t port = UINT16_MAX;
  ASSERT_EQ(rte_eth_dev_get_port_by_name("net_ring0", &port), 0);
  for (int round = 0; round < 4; round++) {
    Message to_dpdk, to_uring;
    for (int i = 0; i < 3000; i++)
      to_uring.dp[i] = static_cast<char>(i * 5 + round);
    to_uring.bytes = std::string(to_uring.dp, 3000) + std::string(to_uring.ctl, 5000);
    Done dpdk_done, uring_done;
    ASSERT_EQ(to_dpdk.Post(dpdk, &dpdk_done), 0);
    ASSERT_EQ(to_uring.Post(uring, &uring_done), 0);
    EXPECT_EQ(pair.Read(to_uring.bytes.size()), to_uring.bytes) << "round " << round;
    rte_mbuf *m = RxOne(port, 5000);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(Bytes(m), to_dpdk.bytes) << "round " << round;
    rte_pktmbuf_free(m);
    ASSERT_TRUE(PollUntilDone(dpdk_done));
    ASSERT_TRUE(PollUntilDone(uring_done));
    EXPECT_EQ(dpdk_done.status, 0);
    EXPECT_EQ(uring_done.status, 0);
    free(to_dpdk.dp), free(to_dpdk.ctl), free(to_uring.dp), free(to_uring.ctl);
  }
  EXPECT_EQ(nic_uring_endpoint_destroy(uring), 0);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(dpdk), 0);
}

TEST(DpdkEndpoint, BadPortsAndQueuesAreRefusedWithErrnoAndOneLine) {
  nic_endpoint *probe = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_EQ(nic_dpdk_endpoint_destroy(probe), 0);
  struct {
    uint16_t port, queue;
    const char *says;
  } cases[] = {{200, 0, "no such port"},
               {NIC_DPDK_DEFAULT_PORT, 1, "the default port takes queue 0"}};
  for (auto &c : cases) {
    testing::internal::CaptureStderr();
    errno = 0;
    EXPECT_EQ(nic_dpdk_endpoint_create(c.port, c.queue), nullptr) << c.says;
    EXPECT_EQ(errno, EINVAL) << c.says;
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(c.says), std::string::npos) << err;
    EXPECT_EQ(Lines(err), 1) << err;
  }
}

// The plugin's own API, reached in the plugin the allocator loaded, reports through the host:
// an error it returns is counted every time and said once (gtest's capture moved fd 2 with dup2,
// so the host's lines land in it).
TEST(DpdkEndpoint, PluginApiErrorsAreCountedAndSaidOnceByTheHost) {
  nic_endpoint *probe = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_EQ(nic_dpdk_endpoint_destroy(probe), 0);
  void *plugin = dlopen(NIC_PLUGIN_DIR "/libnicmalloc-dpdk.so", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(plugin, nullptr) << "the allocator did not load the dpdk plugin";
  auto attach = reinterpret_cast<int (*)(uint16_t, uint16_t)>(dlsym(plugin, "nic_dpdk_attach"));
  ASSERT_NE(attach, nullptr);
  constexpr unsigned kCalls = 100;
  const uint64_t before = Stats().endpoint_errors;
  testing::internal::CaptureStderr();
  for (unsigned i = 0; i < kCalls; i++)
    EXPECT_EQ(attach(200, 0), -EINVAL);
  const std::string err = testing::internal::GetCapturedStderr();
  dlclose(plugin);
  EXPECT_EQ(Stats().endpoint_errors - before, kCalls);
  EXPECT_EQ(Lines(err), 1) << err;
  EXPECT_NE(err.find("nicmalloc: error: nic_dpdk_attach(200, 0): no such port"), std::string::npos)
      << err;
}

// An application's own port pair: destroy is refused while a post on it is in flight.
TEST(DpdkEndpoint, ApplicationPortIsBusyUntilThePeerFreesTheChain) {
  nic_endpoint *probe = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_EQ(nic_dpdk_endpoint_destroy(probe), 0);
  int ports[2];
  ASSERT_EQ(StartRingPortPair("pub", 8, ports), "");
  nic_endpoint *ep = nic_dpdk_endpoint_create(ports[0], 0);
  ASSERT_NE(ep, nullptr);
  Message msg;
  Done done;
  ASSERT_EQ(msg.Post(ep, &done), 0);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), -EBUSY);
  ASSERT_NE(TakeItAndComplete(ports[1], msg.bytes, done), 0u);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
}

// The default endpoint is held by the backend too: the caller's destroy still waits for the
// caller's posts, as on any endpoint (-EBUSY), rather than leave done() to run after it.
TEST(DpdkEndpoint, DefaultPortIsBusyWhileAPostIsInFlight) {
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  Message msg;
  Done done;
  rte_mbuf *m = PostAndTakeOffTheRing(ep, msg, &done);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), -EBUSY) << "the peer holds the mbufs";
  EXPECT_EQ(done.calls, 0);
  rte_pktmbuf_free(m);
  ASSERT_TRUE(PollUntilDone(done));
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
  EXPECT_EQ(nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0), ep) << "the backend kept it";
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
}

// A queue asked for again while open is the same endpoint, with the same nic_endpoint_id, until
// its last destroy; asked for after that, it is a new one to the program (the backend's default
// endpoint at the very same address): a new number, so that no state kept by the old number
// passes to it.
TEST(DpdkEndpoint, AQueueAskedForTwiceKeepsItsIdAndAskedForAfterItsDestroyGetsANewOne) {
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  const uint64_t id = nic_endpoint_id(ep);
  EXPECT_NE(id, 0u);
  ASSERT_EQ(nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0), ep);
  EXPECT_EQ(nic_endpoint_id(ep), id) << "asked for twice";
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
  EXPECT_EQ(nic_endpoint_id(ep), id) << "one of its two holders destroyed it";
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
  EXPECT_EQ(nic_endpoint_id(ep), 0u) << "destroyed";
  ASSERT_EQ(nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0), ep) << "the backend kept it";
  const uint64_t again = nic_endpoint_id(ep);
  EXPECT_NE(again, 0u);
  EXPECT_NE(again, id) << "the number of a destroyed endpoint was given again";
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
}

// A port the application configured without multi-segment transmit takes one segment per
// packet (its driver may send a chain's first segment alone), and nic_endpoint_limits says so:
// a post of two entries is -E2BIG and leaves the array as it was; one entry goes out.
TEST(DpdkEndpoint, PortWithoutMultiSegmentTransmitTakesOneEntry) {
  REQUIRE_DPDK();
  int ports[2];
  ASSERT_EQ(StartRingPortPair("one", 8, ports, false), "");
  nic_endpoint *ep = nic_dpdk_endpoint_create(ports[0], 0);
  ASSERT_NE(ep, nullptr);
  unsigned entries = 0;
  ASSERT_EQ(nic_endpoint_limits(ep, &entries, nullptr), 0);
  EXPECT_EQ(entries, 1u);
  Message msg;
  Done done;
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_EQ(nic_sga_add(&sga, msg.dp, 3000), 0);
  ASSERT_EQ(nic_sga_add(&sga, msg.ctl, 5000), 0);
  EXPECT_EQ(nic_sga_post(&sga, ep, Done::Fn, &done), -E2BIG);
  EXPECT_EQ(sga.count, 2u) << "nothing was posted";
  nic_sga_reset(&sga);
  ASSERT_EQ(nic_sga_add(&sga, msg.dp, 3000), 0);
  ASSERT_EQ(nic_sga_post(&sga, ep, Done::Fn, &done), 0);
  EXPECT_EQ(TakeItAndComplete(ports[1], msg.bytes.substr(0, 3000), done), 1u);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
}

// nic_dpdk_attach once the backend is open: a queue that is not there is an error and the
// default stays; another port becomes the default, and the backend lets go of the old one (whose
// last caller then waits for its posts like any).
TEST(DpdkEndpoint, AttachAfterOpenReplacesTheDefaultOrChangesNothing) {
  nic_endpoint *old = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(old, nullptr);
  void *plugin = dlopen(NIC_PLUGIN_DIR "/libnicmalloc-dpdk.so", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(plugin, nullptr);
  auto attach = reinterpret_cast<int (*)(uint16_t, uint16_t)>(dlsym(plugin, "nic_dpdk_attach"));
  ASSERT_NE(attach, nullptr);
  uint16_t ring0 = UINT16_MAX;
  ASSERT_EQ(rte_eth_dev_get_port_by_name("net_ring0", &ring0), 0);
  testing::internal::CaptureStderr();
  EXPECT_EQ(attach(ring0, 5), -EINVAL) << "no tx queue 5";
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("nic_dpdk_attach"), std::string::npos) << err;
  nic_endpoint *same = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  EXPECT_EQ(same, old) << "a failed attach replaced the default";
  EXPECT_EQ(nic_dpdk_endpoint_destroy(same), 0);

  int ports[2];
  ASSERT_EQ(StartRingPortPair("att", 8, ports), "");
  ASSERT_EQ(attach(static_cast<uint16_t>(ports[0]), 0), 0);
  nic_endpoint *now = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  ASSERT_NE(now, nullptr);
  EXPECT_NE(now, old);
  Message msg;
  Done done, old_done;
  ASSERT_EQ(msg.Post(now, &done), 0);
  ASSERT_NE(TakeItAndComplete(ports[1], msg.bytes, done), 0u)
      << "the new default does not send on the attached port";
  EXPECT_EQ(nic_dpdk_endpoint_destroy(now), 0);
  // The caller's is the last reference to the old default now.
  rte_mbuf *held = PostAndTakeOffTheRing(old, msg, &old_done);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(old), -EBUSY) << "the backend still holds the old default";
  rte_pktmbuf_free(held);
  ASSERT_TRUE(PollUntilDone(old_done));
  EXPECT_EQ(nic_dpdk_endpoint_destroy(old), 0);
  EXPECT_EQ(attach(ring0, 0), 0); // as the tests after this one expect
  dlclose(plugin);
}

// Under sim, with dpdk started beside it by its endpoint: the receive pool's dataplane memory is
// registered with dpdk, the backend whose port writes there (its step becomes DPDK external
// memory), not with the default backend alone.
TEST(DpdkBesideSim, ReceivePoolMemoryIsRegisteredWithDpdk) {
  if (BackendName() != "sim")
    GTEST_SKIP() << "the backend is " << BackendName() << ": ctest runs this under sim";
  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  REQUIRE_DPDK();
  ASSERT_NE(ep, nullptr);
  ASSERT_EQ(nic_endpoint_receive(
                ep, [](void *, void *, size_t) {}, nullptr),
            0);
  rte_mempool *pool = rte_mempool_lookup("nic_rx_dataplane");
  ASSERT_NE(pool, nullptr);
  rte_mbuf *m = rte_pktmbuf_alloc(pool);
  ASSERT_NE(m, nullptr) << "the pool was not filled";
  EXPECT_TRUE(nic_is_dataplane(m->buf_addr));
  EXPECT_NE(rte_mem_virt2memseg_list(m->buf_addr), nullptr)
      << "the pool's memory is no DPDK external memory: not registered with dpdk";
  rte_pktmbuf_free(m);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
}

// Run under sim: each constructor starts its own backend beside sim, or says in one line why it
// cannot. dpdk starts (EAL without ports here) and refuses the port that is not there; verbs
// needs an RDMA device.
int RdmaDevices();
TEST(OtherBackendEndpoints, StartTheirBackendOrSayWhyNot) {
  if (BackendName() != "sim")
    GTEST_SKIP() << "the backend is " << BackendName() << ": ctest runs this under sim";
  const bool verbs = RdmaDevices() > 0;
  struct {
    const char *what;
    int err;
    std::function<void *()> call;
  } cases[] = {
      {"nic_dpdk_endpoint_create(0, 0): no such port", EINVAL,
       [] { return static_cast<void *>(nic_dpdk_endpoint_create(0, 0)); }},
      {"nic_verbs_get_pd: the verbs backend cannot run here (", ENODEV,
       [] { return nic_verbs_get_pd(); }},
      {"nic_verbs_endpoint_create: the verbs backend cannot run here (", ENODEV,
       [] { return static_cast<void *>(nic_verbs_endpoint_create(nullptr)); }},
  };
  for (auto &c : cases) {
    if (verbs && c.err == ENODEV) continue; // the device is there: VerbsEndpoint covers it
    testing::internal::CaptureStderr();
    errno = 0;
    EXPECT_EQ(c.call(), nullptr) << c.what;
    EXPECT_EQ(errno, c.err) << c.what;
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(c.what), std::string::npos) << err;
    if (c.err == ENODEV) {
      EXPECT_NE(err.find("it needs an RDMA device)"), std::string::npos) << err;
    }
    EXPECT_EQ(Lines(err), 1) << err;
  }
  EXPECT_NE(std::string(Stats().backend).find("sim+"), std::string::npos)
      << "dpdk started beside sim: " << Stats().backend;
  int not_an_endpoint = 0;
  auto *fake = reinterpret_cast<nic_endpoint *>(&not_an_endpoint);
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_dpdk_endpoint_destroy(fake), -EINVAL);
  EXPECT_EQ(nic_verbs_endpoint_destroy(nullptr), -EINVAL);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(Lines(err), 2) << err;
}

// Run with NICMALLOC_BACKEND=verbs. With no RDMA device the backend falls back and the verbs
// constructors say so; with one, a QP in nicmalloc's PD becomes an endpoint and a QP of
// another PD is refused.
int RdmaDevices() {
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  if (list) ibv_free_device_list(list);
  return list ? n : 0;
}

TEST(VerbsEndpoint, WithoutADeviceTheConstructorsSaySo) {
  if (RdmaDevices() > 0) GTEST_SKIP() << "an RDMA device exists: VerbsEndpoint.QpInOurPd runs";
  testing::internal::CaptureStderr();
  errno = 0;
  EXPECT_EQ(nic_verbs_get_pd(), nullptr);
  EXPECT_EQ(errno, ENODEV);
  std::string err = testing::internal::GetCapturedStderr();
  // The suite runs with NICMALLOC_BACKEND=verbs: no advice to set it, the device hint kept (the
  // start-up warning, said first, has the reason).
  EXPECT_NE(
      err.find(
          "nic_verbs_get_pd: the verbs backend cannot run here (NICMALLOC_BACKEND=verbs "
          "is set but could not start here: see the warning said when it was tried; it needs an "
          "RDMA device)"),
      std::string::npos)
      << err;
}

TEST(VerbsEndpoint, QpInOurPdIsAnEndpointAndAnotherPdIsRefused) {
  if (RdmaDevices() == 0)
    GTEST_SKIP()
        << "no RDMA device: ibv_get_device_list returned 0 devices (the kernel has no "
           "RDMA here); tested up to the device boundary by WithoutADeviceTheConstructorsSaySo";
  auto *pd = static_cast<ibv_pd *>(nic_verbs_get_pd());
  ASSERT_NE(pd, nullptr);
  ibv_cq *cq = ibv_create_cq(pd->context, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = init.cap.max_recv_wr = 8;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  ibv_qp *qp = ibv_create_qp(pd, &init);
  ASSERT_NE(qp, nullptr);
  nic_endpoint *ep = nic_verbs_endpoint_create(qp);
  ASSERT_NE(ep, nullptr);
  EXPECT_EQ(nic_verbs_endpoint_destroy(ep), 0);
  ibv_pd *other = ibv_alloc_pd(pd->context);
  ASSERT_NE(other, nullptr);
  ibv_qp *foreign = ibv_create_qp(other, &init);
  ASSERT_NE(foreign, nullptr);
  errno = 0;
  EXPECT_EQ(nic_verbs_endpoint_create(foreign), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_destroy_qp(foreign);
  ibv_destroy_qp(qp);
  ibv_dealloc_pd(other);
  ibv_destroy_cq(cq);
}

// Receiving over the public calls: a QP connected to itself, messages posted with nic_sga land
// in dataplane buffers; held buffers stay out (stats, -EBUSY at destroy) until nic_release, and
// with every one held the endpoint stalls, once, until a release.
struct VerbsRx {
  std::vector<std::string> msgs;
  std::vector<void *> kept;
  int dataplane = 0, ends = 0;
  bool hold = false;
  static void Fn(void *arg, void *data, size_t len) {
    auto *r = static_cast<VerbsRx *>(arg);
    if (!data) {
      r->ends++;
      return;
    }
    r->msgs.emplace_back(static_cast<char *>(data), len);
    r->dataplane += nic_is_dataplane(data);
    if (r->hold) {
      EXPECT_EQ(nic_hold(data), 0);
      r->kept.push_back(data);
    }
  }
};

void VerbsSend(nic_endpoint *ep, const std::string &text, Done *done) {
  char *p = static_cast<char *>(nic_malloc(text.size()));
  memcpy(p, text.data(), text.size());
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_EQ(nic_sga_add(&sga, p, text.size()), 0);
  ASSERT_EQ(nic_sga_post(&sga, ep, Done::Fn, done), 0);
  free(p); // deferred until done
}

template <class F> bool PollUntil(F pred) {
  for (auto end = Clock::now() + std::chrono::seconds(10); !pred(); nic_poll(16))
    if (Clock::now() > end) return false;
  return true;
}

TEST(VerbsEndpoint, ReceivesIntoDataplaneBuffersHeldOnesComeBackAtRelease) {
  if (RdmaDevices() == 0)
    GTEST_SKIP() << "no RDMA device: ibv_get_device_list returned 0 devices (the kernel has no "
                    "RDMA here); the receive books are tested by test_verbs_rx";
  auto *pd = static_cast<ibv_pd *>(nic_verbs_get_pd());
  ASSERT_NE(pd, nullptr);
  ibv_cq *scq = ibv_create_cq(pd->context, 64, nullptr, nullptr, 0);
  ibv_cq *rcq = ibv_create_cq(pd->context, 64, nullptr, nullptr, 0);
  ASSERT_TRUE(scq && rcq);
  ibv_qp_init_attr init{};
  init.send_cq = scq;
  init.recv_cq = rcq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = init.cap.max_recv_wr = 16;
  init.cap.max_send_sge = 4;
  init.cap.max_recv_sge = 1;
  ibv_qp *qp = ibv_create_qp(pd, &init);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(VerbsConnectToSelf(pd->context, qp), "");
  ibv_qp_attr attr{};
  ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_CAP, &init), 0);
  const size_t bufs = std::min<uint32_t>(attr.cap.max_recv_wr, 32);
  nic_endpoint *ep = nic_verbs_endpoint_create(qp);
  ASSERT_NE(ep, nullptr);
  VerbsRx rx;
  ASSERT_EQ(nic_endpoint_receive(ep, VerbsRx::Fn, &rx), 0);
  const nic_stats before = Stats();
  Done d;
  VerbsSend(ep, "hello over verbs", &d);
  ASSERT_TRUE(PollUntil([&] { return rx.msgs.size() == 1 && d.calls; }));
  EXPECT_EQ(rx.msgs[0], "hello over verbs");
  EXPECT_EQ(rx.dataplane, 1);
  // Hold every buffer: the endpoint stalls; the next message waits in the sender (RNR).
  rx.hold = true;
  for (size_t i = 0; i < bufs; i++) {
    Done di;
    VerbsSend(ep, "held " + std::to_string(i), &di);
    ASSERT_TRUE(PollUntil([&] { return di.calls; })) << i;
  }
  EXPECT_EQ(rx.kept.size(), bufs);
  EXPECT_EQ(Stats().recv_held_buffers - before.recv_held_buffers, bufs);
  EXPECT_EQ(Stats().recv_stalls - before.recv_stalls, 1u);
  EXPECT_EQ(nic_verbs_endpoint_destroy(ep), -EBUSY) << "buffers are held";
  rx.hold = false;
  Done last;
  VerbsSend(ep, "after the release", &last);
  nic_poll(16);
  EXPECT_EQ(rx.msgs.size(), bufs + 1) << "arrived while every buffer was held";
  for (void *p : rx.kept)
    EXPECT_EQ(nic_release(p), 0);
  EXPECT_EQ(Stats().recv_held_buffers, before.recv_held_buffers);
  ASSERT_TRUE(PollUntil([&] { return rx.msgs.size() == bufs + 2 && last.calls; }));
  EXPECT_EQ(rx.msgs.back(), "after the release");
  EXPECT_EQ(last.status, 0);
  EXPECT_EQ(rx.dataplane, static_cast<int>(bufs + 2));
  EXPECT_EQ(Stats().recv_messages - before.recv_messages, bufs + 2);
  // Destroy flushes the QP to get the posted buffers back: receiving ends, then it goes.
  int rc = nic_verbs_endpoint_destroy(ep);
  EXPECT_TRUE(
      PollUntil([&] { return rc != -EBUSY || (rc = nic_verbs_endpoint_destroy(ep)) == 0; }));
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(rx.ends, 1);
  ibv_destroy_qp(qp);
  ibv_destroy_cq(scq);
  ibv_destroy_cq(rcq);
}

// An application that runs EAL itself names its port with nic_dpdk_attach, through the public
// header (regcache/dpdk/dpdk.h, where the plugin declares its own, is not installed, and the
// plugin is loaded by libnicmalloc only): before EAL runs there is no such port, and neither call
// opens the backend (nor starts an EAL of nicmalloc's); once the port runs, the backend opens at
// the first need on the application's EAL, with that port as its default endpoint. A process of
// its own, which starts EAL: ctest's public_endpoints_dpdk_application_eal.
TEST(DpdkApplicationEal, AttachedBeforeTheBackendOpensItsPortIsTheDefault) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_dpdk_attach(0, 0), -EINVAL) << "no EAL yet: no port";
  EXPECT_EQ(nic_dpdk_attach(0, 0), -EINVAL);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(Lines(err), 1) << err;
  EXPECT_NE(err.find("nic_dpdk_attach(0, 0): no such port"), std::string::npos) << err;
  EXPECT_EQ(Stats().endpoint_errors, 2u);
  EXPECT_EQ(std::string(Stats().backend), "none") << "the attach opened the backend";

  ASSERT_TRUE(StartApplicationEal()) << "the application's EAL";
  int ports[2];
  ASSERT_EQ(StartRingPortPair("app", 8, ports), "");
  ASSERT_EQ(nic_dpdk_attach(static_cast<uint16_t>(ports[0]), 0), 0);
  EXPECT_EQ(std::string(Stats().backend), "none") << "the attach opened the backend";

  nic_endpoint *ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
  ASSERT_NE(ep, nullptr) << "no default port: " << strerror(errno);
  EXPECT_EQ(std::string(Stats().backend), "dpdk");
  Message msg;
  Done done;
  ASSERT_EQ(msg.Post(ep, &done), 0);
  EXPECT_NE(TakeItAndComplete(ports[1], msg.bytes, done), 0u)
      << "the default endpoint does not send on the attached port";
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), 0);
}

} // namespace
