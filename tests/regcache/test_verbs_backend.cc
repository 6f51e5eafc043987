// The verbs backend plugin. What needs no RDMA device runs everywhere: the access-flag and rkey
// rules, the completion-status mapping, open() without a device, the plugin's exports (the
// receive buffers' books: test_verbs_rx.cc). The device tests (register, post and receive over a
// loopback RC queue pair, poll) skip when ibv_get_device_list finds nothing, as on machines whose
// kernel has no RDMA.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend.h"
#include "nicmalloc.h"
#include "plugin_test_host.h"
#include "verbs.h"
#include "verbs_loopback.h"
#include "verbs_rx.h"
#include "verbs_rx_sink.h"

namespace {

void *Plugin() {
  static void *h = dlopen(NIC_PLUGIN_DIR "/libnicmalloc-verbs.so", RTLD_NOW | RTLD_LOCAL);
  return h;
}
#define SYM(fn) reinterpret_cast<decltype(&fn)>(dlsym(Plugin(), #fn))

int DeviceCount() {
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  if (list) ibv_free_device_list(list);
  return list ? n : 0;
}

TEST(VerbsPlugin, LoadsAndExportsItsApiOnly) {
  ASSERT_NE(Plugin(), nullptr) << dlerror();
  EXPECT_NE(SYM(nic_backend_verbs_open), nullptr);
  EXPECT_NE(SYM(nic_verbs_endpoint), nullptr);
  EXPECT_NE(SYM(nic_verbs_set_rx_memory), nullptr);
  EXPECT_EQ(dlsym(Plugin(), "nic_plugin_log"), nullptr) << "the host's services stay hidden";
}

TEST(VerbsMapping, AccessFlagsMapExactly) {
  auto flags = SYM(nic_verbs_access_flags);
  ASSERT_NE(flags, nullptr);
  EXPECT_EQ(flags(NIC_ACCESS_LOCAL, false), 0); // local read needs no flag
  EXPECT_EQ(flags(NIC_ACCESS_LOCAL_WRITE, false), IBV_ACCESS_LOCAL_WRITE);
  EXPECT_EQ(flags(NIC_ACCESS_REMOTE_READ, false), IBV_ACCESS_REMOTE_READ);
  // verbs refuses REMOTE_WRITE without LOCAL_WRITE.
  EXPECT_EQ(flags(NIC_ACCESS_REMOTE_WRITE, false),
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE);
  EXPECT_EQ(flags(NIC_ACCESS_LOCAL_WRITE | NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE, false),
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(flags(NIC_ACCESS_LOCAL, true), IBV_ACCESS_ON_DEMAND);
  EXPECT_EQ(flags(NIC_ACCESS_LOCAL_WRITE, true), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  EXPECT_EQ(flags(1u << 7, false), -EINVAL);
}

TEST(VerbsMapping, RkeyOnlyWhenRemoteAccessWasAsked) {
  auto rkey = SYM(nic_verbs_exposed_rkey);
  ASSERT_NE(rkey, nullptr);
  EXPECT_EQ(rkey(NIC_ACCESS_LOCAL, 0x1234), 0u);
  EXPECT_EQ(rkey(NIC_ACCESS_LOCAL_WRITE, 0x1234), 0u);
  EXPECT_EQ(rkey(NIC_ACCESS_REMOTE_READ, 0x1234), 0x1234u);
  EXPECT_EQ(rkey(NIC_ACCESS_REMOTE_WRITE, 0x1234), 0x1234u);
}

TEST(VerbsMapping, CompletionStatusToErrno) {
  auto err = SYM(nic_verbs_wc_errno);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(err(IBV_WC_SUCCESS), 0);
  EXPECT_EQ(err(IBV_WC_LOC_PROT_ERR), -EFAULT);
  EXPECT_EQ(err(IBV_WC_WR_FLUSH_ERR), -ECANCELED);
  EXPECT_EQ(err(IBV_WC_RETRY_EXC_ERR), -ETIMEDOUT);
  EXPECT_EQ(err(IBV_WC_RNR_RETRY_EXC_ERR), -ETIMEDOUT);
  EXPECT_EQ(err(IBV_WC_REM_ACCESS_ERR), -EACCES);
  EXPECT_EQ(err(IBV_WC_LOC_LEN_ERR), -EMSGSIZE);
  EXPECT_EQ(err(IBV_WC_REM_INV_REQ_ERR), -EMSGSIZE);
  EXPECT_EQ(err(IBV_WC_LOC_QP_OP_ERR), -EIO);
  EXPECT_EQ(err(IBV_WC_GENERAL_ERR), -EIO);
}

TEST(VerbsOpen, NoDeviceGivesNullAndEnodev) {
  if (DeviceCount()) GTEST_SKIP() << "an RDMA device exists here";
  errno = 0;
  EXPECT_EQ(SYM(nic_backend_verbs_open)(TestPluginHost()), nullptr);
  EXPECT_EQ(errno, ENODEV);
}

// The host table is versioned by its size: a plugin refuses a host older than itself (a member
// it needs is missing) before touching anything, and takes a newer one (members it does not know
// follow the ones it reads). The unknown device name makes a host that was taken say ENODEV.
TEST(VerbsOpen, TheHostTableIsCheckedByItsSize) {
  auto open = SYM(nic_backend_verbs_open);
  ASSERT_NE(open, nullptr);
  nic_plugin_settings s{};
  s.verbs_device = "no-such-rdma-device";
  SYM(nic_backend_verbs_settings)(&s);
  static nic_plugin_host older;
  older = *TestPluginHost();
  older.size = offsetof(nic_plugin_host, calloc);
  static struct {
    nic_plugin_host known;
    void (*later)(void);
  } newer;
  newer.known = *TestPluginHost();
  newer.known.size = sizeof newer;
  for (auto c : {std::make_pair(&older, EPROTO), std::make_pair(&newer.known, ENODEV),
                 std::make_pair(static_cast<nic_plugin_host *>(nullptr), EPROTO)}) {
    errno = 0;
    EXPECT_EQ(open(c.first), nullptr);
    EXPECT_EQ(errno, c.second) << "host table of " << (c.first ? c.first->size : 0) << " bytes";
  }
  s.verbs_device = nullptr;
  SYM(nic_backend_verbs_settings)(&s);
  struct nic_backend *b = open(TestPluginHost()); // leaves the suite's own host attached
  if (b) b->close(b);
}

// NICMALLOC_VERBS_DEVICE as libnicmalloc hands it over (backend.c).
TEST(VerbsOpen, UnknownDeviceNameGivesEnodev) {
  nic_plugin_settings s{};
  s.verbs_device = "no-such-rdma-device";
  SYM(nic_backend_verbs_settings)(&s);
  errno = 0;
  EXPECT_EQ(SYM(nic_backend_verbs_open)(TestPluginHost()), nullptr);
  EXPECT_EQ(errno, ENODEV);
  s.verbs_device = nullptr;
  SYM(nic_backend_verbs_settings)(&s);
}

using Done = VerbsDone;

// A device: the backend, a dataplane chunk registered in it, and an RC queue pair connected to
// itself, so a send arrives in its own receive queue.
class VerbsDeviceBase : public ::testing::Test {
protected:
  void SetUp() override {
    if (!DeviceCount()) GTEST_SKIP() << "no RDMA device: ibv_get_device_list returned 0 devices";
    ASSERT_NE(b = SYM(nic_backend_verbs_open)(TestPluginHost()), nullptr) << strerror(errno);
    ibv_context *ctx = SYM(nic_verbs_context)(b);
    ibv_pd *pd = SYM(nic_verbs_pd)(b);
    ASSERT_TRUE(ctx && pd);
    nic_region_ref ref{};
    void *p = nic_malloc(64);
    ASSERT_EQ(nic_translate(p, 1, &ref), 0);
    free(p);
    ASSERT_EQ(b->reg(b, ref.region_base, ref.region_len, NIC_ACCESS_LOCAL, &chunk), 0);
    ASSERT_TRUE((scq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0)) &&
                (rcq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0)));
    ibv_qp_init_attr init{};
    init.send_cq = scq;
    init.recv_cq = rcq;
    init.qp_type = IBV_QPT_RC;
    init.cap = {16, 16, 4, 4, 0};
    ASSERT_NE(qp = ibv_create_qp(pd, &init), nullptr) << strerror(errno);
    ConnectToSelf(ctx);
    ASSERT_NE(ep = SYM(nic_verbs_endpoint)(b, qp, scq), nullptr);
  }
  void ConnectToSelf(ibv_context *ctx) {
    const std::string err = VerbsConnectToSelf(ctx, qp);
    ASSERT_EQ(err, "");
  }
  void TearDown() override {
    if (!b) return;
    if (ep) {
      EXPECT_EQ(SYM(nic_verbs_endpoint_close)(b, ep), 0);
    }
    if (qp) ibv_destroy_qp(qp);
    if (scq) ibv_destroy_cq(scq);
    if (rcq) ibv_destroy_cq(rcq);
    if (chunk.base) {
      EXPECT_EQ(b->dereg(b, &chunk), 0);
    }
    b->close(b);
  }
  bool PollFor(const Done &d) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!d.calls && std::chrono::steady_clock::now() < end)
      b->poll(b, 16);
    return d.calls > 0;
  }
  nic_sge Sge(const void *p, uint32_t len) { return {p, len, chunk.lkey, chunk.handle}; }
  struct nic_backend *b = nullptr;
  nic_registration chunk{};
  ibv_cq *scq = nullptr, *rcq = nullptr;
  ibv_qp *qp = nullptr;
  nic_endpoint *ep = nullptr;
};

// The device suite. For receiving the test plays libnicmalloc's part (safety/receive.c): it hands
// the backend dataplane memory, takes what rx hands over, and gives buffers back, at once or later
// (held).
using RxMemory = VerbsRxMemory;

using Rx = VerbsRxSink;

class VerbsDevice : public VerbsDeviceBase {
protected:
  void SetUp() override {
    VerbsDeviceBase::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    RxMemory::chunk = chunk;
    RxMemory::blocks = 0;
    nic_verbs_rx_memory mem = {RxMemory::Alloc, RxMemory::Free};
    SYM(nic_verbs_set_rx_memory)(b, &mem);
    rx.b = b;
    rx.ep = ep;
  }
  // One message of len bytes of c, sent over the loopback QP; returns once its send completed.
  void Send(size_t len, char c) {
    char *p = static_cast<char *>(nic_malloc(len));
    memset(p, c, len);
    nic_sge s = Sge(p, static_cast<uint32_t>(len));
    Done d;
    ASSERT_EQ(b->post(b, ep, &s, 1, Done::Fn, &d), 0);
    ASSERT_TRUE(PollFor(d));
    EXPECT_EQ(d.status, 0);
    free(p);
  }
  // Polls until pred holds; false after 5 s (a bound on the loop, not a timing assertion).
  template <class F> bool PollUntil(F pred) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!pred() && std::chrono::steady_clock::now() < end)
      b->poll(b, 16);
    return pred();
  }
  // Closes ep as a program does: -EBUSY while receive buffers are posted, polling meanwhile.
  int CloseReceiving() {
    int rc = SYM(nic_verbs_endpoint_close)(b, ep);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (rc == -EBUSY && std::chrono::steady_clock::now() < end) {
      b->poll(b, 16);
      rc = SYM(nic_verbs_endpoint_close)(b, ep);
    }
    if (rc == 0) ep = nullptr;
    return rc;
  }
  Rx rx;
};

TEST_F(VerbsDevice, RkeyOnlyForRemoteRegistrations) {
  static char page[2][4096] __attribute__((aligned(4096)));
  nic_registration local{}, remote{};
  ASSERT_EQ(b->reg(b, page[0], 4096, NIC_ACCESS_LOCAL_WRITE, &local), 0);
  ASSERT_EQ(b->reg(b, page[1], 4096, NIC_ACCESS_REMOTE_READ, &remote), 0);
  EXPECT_EQ(chunk.rkey, 0u);
  EXPECT_EQ(local.rkey, 0u);
  EXPECT_NE(remote.rkey, 0u);
  EXPECT_EQ(b->dereg(b, &local), 0);
  EXPECT_EQ(b->dereg(b, &remote), 0);
  EXPECT_GT(b->caps.max_sge, 0u);
  EXPECT_GT(b->caps.max_regions, 0u);
}

TEST_F(VerbsDevice, SgListArrivesAndCompletesFromPoll) {
  const uint32_t lens[3] = {64, 1000, 3000};
  std::string expect;
  std::vector<nic_sge> sge;
  std::vector<char *> bufs;
  for (int i = 0; i < 3; i++) {
    bufs.push_back(static_cast<char *>(nic_malloc(lens[i])));
    memset(bufs[i], 'a' + i, lens[i]);
    sge.push_back(Sge(bufs[i], lens[i]));
    expect.append(bufs[i], lens[i]);
  }
  static char rbuf[8192];
  nic_registration rreg{};
  ASSERT_EQ(b->reg(b, rbuf, sizeof rbuf, NIC_ACCESS_LOCAL_WRITE, &rreg), 0);
  ibv_sge rsge = {reinterpret_cast<uintptr_t>(rbuf), sizeof rbuf, rreg.lkey};
  ibv_recv_wr rwr{}, *bad = nullptr;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ASSERT_EQ(ibv_post_recv(qp, &rwr, &bad), 0);
  Done d;
  ASSERT_EQ(b->post(b, ep, sge.data(), 3, Done::Fn, &d), 0);
  EXPECT_EQ(d.calls, 0) << "done ran inside post";
  EXPECT_EQ(b->dereg(b, &chunk), -EBUSY);
  ASSERT_TRUE(PollFor(d));
  EXPECT_EQ(d.status, 0);
  ibv_wc wc{};
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (ibv_poll_cq(rcq, 1, &wc) == 0 && std::chrono::steady_clock::now() < end) {
  }
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(wc.byte_len, expect.size());
  EXPECT_EQ(std::string(rbuf, expect.size()), expect);
  EXPECT_EQ(b->dereg(b, &rreg), 0);
  for (char *p : bufs)
    free(p);
}

TEST_F(VerbsDevice, UncoveredEntryCompletesWithEfault) {
  static char outside[64];
  nic_sge s = Sge(outside, sizeof outside);
  Done d;
  ASSERT_EQ(b->post(b, ep, &s, 1, Done::Fn, &d), 0);
  ASSERT_TRUE(PollFor(d));
  EXPECT_EQ(d.status, -EFAULT);
  std::vector<nic_sge> many(b->caps.max_sge + 1, s);
  EXPECT_EQ(b->post(b, ep, many.data(), many.size(), Done::Fn, &d), -E2BIG);
}

TEST_F(VerbsDevice, OdpFollowsTheDeviceCaps) {
  ibv_device_attr_ex attr{};
  ASSERT_EQ(ibv_query_device_ex(SYM(nic_verbs_context)(b), nullptr, &attr), 0);
  bool odp = (attr.odp_caps.general_caps & IBV_ODP_SUPPORT) &&
             (attr.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_SEND);
  EXPECT_EQ(SYM(nic_verbs_set_odp)(b, true), odp ? 0 : -EOPNOTSUPP);
  EXPECT_EQ(SYM(nic_verbs_set_odp)(b, false), 0);
}

TEST_F(VerbsDevice, ReceiveBytesReceivedAreTheBytesSentInPageAlignedDataplaneBuffers) {
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  EXPECT_EQ(RxMemory::blocks, 1);
  const size_t lens[] = {1, 100, 4096, 60000};
  for (size_t i = 0; i < 4; i++)
    Send(lens[i], static_cast<char>('a' + i));
  ASSERT_TRUE(PollUntil([&] { return rx.msgs.size() == 4; }));
  for (size_t i = 0; i < 4; i++)
    EXPECT_EQ(rx.msgs[i], std::string(lens[i], static_cast<char>('a' + i))) << i;
  EXPECT_EQ(rx.dataplane, 4);
  EXPECT_EQ(rx.aligned, 4);
  EXPECT_EQ(rx.stalls, 0);
  EXPECT_EQ(rx.ends, 0);
  EXPECT_EQ(CloseReceiving(), 0);
  EXPECT_EQ(rx.ends, 1) << "the QP was flushed to give the posted buffers back";
  EXPECT_EQ(rx.status, -ECANCELED);
  EXPECT_EQ(RxMemory::blocks, 0) << "the block went back";
}

TEST_F(VerbsDevice, ReceiveAllBuffersHeldStallsOnceAndAReleaseResumes) {
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  rx.hold = true;
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_CAP, &init), 0);
  const unsigned bufs = std::min<unsigned>(attr.cap.max_recv_wr, NIC_VERBS_RX_BUFS);
  for (unsigned i = 0; i < bufs; i++)
    Send(10, 'h');
  ASSERT_TRUE(PollUntil([&] { return rx.msgs.size() == bufs; }));
  EXPECT_EQ(rx.stalls, 1);
  // The next one finds no receive posted: the NIC retries it (RNR) until a buffer is back.
  char *p = static_cast<char *>(nic_malloc(5));
  memcpy(p, "after", 5);
  nic_sge s = Sge(p, 5);
  Done d;
  ASSERT_EQ(b->post(b, ep, &s, 1, Done::Fn, &d), 0);
  EXPECT_EQ(SYM(nic_verbs_endpoint_close)(b, ep), -EBUSY) << "buffers are held";
  b->poll(b, 16);
  EXPECT_EQ(rx.msgs.size(), bufs) << "arrived with every buffer held";
  rx.hold = false;
  rx.Release();
  ASSERT_TRUE(PollUntil([&] { return rx.msgs.size() == bufs + 1 && d.calls; }));
  EXPECT_EQ(rx.msgs.back(), "after");
  EXPECT_EQ(d.status, 0);
  EXPECT_EQ(rx.stalls, 1);
  free(p);
  EXPECT_EQ(CloseReceiving(), 0);
}

TEST_F(VerbsDevice, ReceiveDestroyIsBusyWhileABufferIsHeld) {
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  rx.hold = true;
  Send(64, 'x');
  ASSERT_TRUE(PollUntil([&] { return rx.held.size() == 1; }));
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(SYM(nic_verbs_endpoint_close)(b, ep), -EBUSY);
    b->poll(b, 16);
  }
  EXPECT_EQ(RxMemory::blocks, 1) << "the held buffer's block stays";
  EXPECT_EQ(rx.ends, 0) << "a held buffer leaves the QP alone";
  rx.Release();
  EXPECT_EQ(CloseReceiving(), 0);
  EXPECT_EQ(RxMemory::blocks, 0);
}

TEST_F(VerbsDevice, ReceiveBadCallsAndQueuePairsItCannotServeAreRefused) {
  int not_an_endpoint = 0;
  EXPECT_EQ(b->endpoint_receive(b, reinterpret_cast<nic_endpoint *>(&not_an_endpoint), Rx::Fn, &rx),
            -EINVAL);
  EXPECT_EQ(b->endpoint_receive(b, ep, nullptr, &rx), -EINVAL);
  ibv_context *ctx = SYM(nic_verbs_context)(b);
  ibv_pd *pd = SYM(nic_verbs_pd)(b);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = scq; // receives would complete on a send CQ
  init.qp_type = IBV_QPT_RC;
  init.cap = {4, 4, 1, 1, 0};
  ibv_qp *shared = ibv_create_qp(pd, &init);
  ASSERT_NE(shared, nullptr);
  nic_endpoint *e2 = SYM(nic_verbs_endpoint)(b, shared, nullptr);
  ASSERT_NE(e2, nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(ibv_modify_qp(shared, &a,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
  EXPECT_EQ(b->endpoint_receive(b, e2, Rx::Fn, &rx), -EINVAL);
  EXPECT_EQ(SYM(nic_verbs_endpoint_close)(b, e2), 0);
  ibv_destroy_qp(shared);
  // Still in RESET: nothing can be posted yet.
  init.send_cq = scq;
  init.recv_cq = ibv_create_cq(ctx, 4, nullptr, nullptr, 0);
  ASSERT_NE(init.recv_cq, nullptr);
  ibv_qp *fresh = ibv_create_qp(pd, &init);
  ASSERT_NE(fresh, nullptr);
  nic_endpoint *e3 = SYM(nic_verbs_endpoint)(b, fresh, nullptr);
  ASSERT_NE(e3, nullptr);
  EXPECT_EQ(b->endpoint_receive(b, e3, Rx::Fn, &rx), -EINVAL);
  EXPECT_EQ(SYM(nic_verbs_endpoint_close)(b, e3), 0);
  ibv_destroy_qp(fresh);
  // On a shared receive queue.
  ibv_srq_init_attr sattr{};
  sattr.attr.max_wr = 4;
  sattr.attr.max_sge = 1;
  ibv_srq *srq = ibv_create_srq(pd, &sattr);
  if (srq) {
    init.srq = srq;
    ibv_qp *onsrq = ibv_create_qp(pd, &init);
    ASSERT_NE(onsrq, nullptr);
    nic_endpoint *e4 = SYM(nic_verbs_endpoint)(b, onsrq, nullptr);
    ASSERT_NE(e4, nullptr);
    EXPECT_EQ(b->endpoint_receive(b, e4, Rx::Fn, &rx), -EOPNOTSUPP);
    EXPECT_EQ(SYM(nic_verbs_endpoint_close)(b, e4), 0);
    ibv_destroy_qp(onsrq);
    ibv_destroy_srq(srq);
  }
  ibv_destroy_cq(init.recv_cq);
  // Twice on one endpoint.
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  EXPECT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), -EALREADY);
  EXPECT_EQ(RxMemory::blocks, 1);
  EXPECT_EQ(CloseReceiving(), 0);
}

// A receive the application posted itself, against verbs.h, completes on nicmalloc's receive CQ
// with a wr_id of its own: dropped, never followed as one of our buffers. With it in the queue,
// one buffer fewer fits.
TEST_F(VerbsDevice, ReceiveACompletionOfTheApplicationsOwnIsDroppedNotFollowed) {
  static char own[256];
  nic_registration oreg{};
  PostApplicationReceive(b, qp, own, sizeof own, &oreg);
  if (HasFatalFailure()) return;
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  Send(10, 'o'); // into the application's receive, posted first
  Send(20, 'n'); // into nicmalloc's
  ASSERT_TRUE(PollUntil([&] { return rx.msgs.size() == 1; }));
  EXPECT_EQ(rx.msgs[0], std::string(20, 'n'));
  EXPECT_EQ(std::string(own, 10), std::string(10, 'o'));
  EXPECT_EQ(CloseReceiving(), 0);
  EXPECT_EQ(b->dereg(b, &oreg), 0);
}

} // namespace
