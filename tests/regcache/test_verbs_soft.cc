// The verbs backend's receive paths (regcache/verbs/verbs.c) run for real, without an RDMA
// device: this program is built from the plugin's sources against a software device
// (soft_verbs.c) instead of libibverbs. The QP is connected to itself; the test plays
// libnicmalloc's part (safety/receive.c): it hands the backend dataplane memory, takes what rx
// hands over and gives buffers back, at once or later (held). The same checks on a real device
// are the VerbsDevice.Receive* tests (test_verbs_backend.cc).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend.h"
#include "nicmalloc.h"
#include "plugin_test_host.h"
#include "soft_verbs.h"
#include "verbs.h"
#include "verbs_rx.h"
#include "verbs_rx_sink.h"

namespace {

using Memory = VerbsRxMemory;

using Rx = VerbsRxSink;

using Done = VerbsDone;

// A QP of the soft device in the backend's PD but outside it, in RTS with CQs of its own, and a
// page to send from (src, its MR without local write) and one to receive into (dst, with): the
// device's own behaviour, work requests posted and completions reaped by hand.
struct RawQp {
  ibv_cq *scq, *rcq;
  ibv_qp *qp;
  alignas(4096) char src[4096] = {}, dst[4096] = {};
  ibv_mr *smr, *rmr;
  explicit RawQp(ibv_pd *pd)
      : scq(soft_verbs_cq(pd->context)), rcq(soft_verbs_cq(pd->context)),
        qp(soft_verbs_qp(pd, scq, rcq, IBV_QPT_RC, 16, nullptr)),
        smr(ibv_reg_mr(pd, src, sizeof src, 0)),
        rmr(ibv_reg_mr(pd, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE)) {
    EXPECT_TRUE(smr && rmr);
    for (ibv_qp_state st : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
      ibv_qp_attr a{};
      a.qp_state = st;
      EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    }
  }
  RawQp(const RawQp &) = delete;
  RawQp &operator=(const RawQp &) = delete;
  // The MRs that are left go, and the QP's asynchronous events (none are the backend's).
  ~RawQp() {
    for (ibv_mr *mr : {smr, rmr}) {
      if (mr) {
        EXPECT_EQ(ibv_dereg_mr(mr), 0);
      }
    }
    pollfd pfd = {qp->context->async_fd, POLLIN, 0};
    ibv_async_event ev;
    while (poll(&pfd, 1, 0) == 1 && !ibv_get_async_event(qp->context, &ev))
      ibv_ack_async_event(&ev);
    for (void *p : {static_cast<void *>(qp), static_cast<void *>(scq), static_cast<void *>(rcq)})
      soft_verbs_free(p);
  }
  int Send(uint32_t lkey, uint64_t wr_id, bool signaled = true) {
    return Send(src, 5, lkey, wr_id, signaled);
  }
  int Recv(uint64_t wr_id) { return Recv(dst, sizeof dst, rmr->lkey, wr_id); }
  int Send(const void *addr, uint32_t len, uint32_t lkey, uint64_t wr_id, bool signaled = true) {
    ibv_sge sge = {reinterpret_cast<uintptr_t>(addr), len, lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    return ibv_post_send(qp, &wr, &bad);
  }
  int Recv(void *addr, uint32_t len, uint32_t lkey, uint64_t wr_id) {
    ibv_sge sge = {reinterpret_cast<uintptr_t>(addr), len, lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(qp, &wr, &bad);
  }
  // Each completion on cq, oldest first: its wr_id and status.
  using Wcs = std::vector<std::pair<uint64_t, int>>;
  static Wcs Reap(ibv_cq *cq) {
    Wcs out;
    ibv_wc wc;
    while (ibv_poll_cq(cq, 1, &wc) == 1)
      out.emplace_back(wc.wr_id, wc.status);
    return out;
  }
  ibv_qp_state State() {
    ibv_qp_attr a{};
    ibv_qp_init_attr init{};
    EXPECT_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE, &init), 0);
    return a.qp_state;
  }
};

class SoftVerbs : public ::testing::Test {
protected:
  // chunk_access: what the dataplane chunk is registered with (libnicmalloc: local write).
  void Open(unsigned chunk_access = NIC_ACCESS_LOCAL_WRITE, uint32_t max_recv_wr = 16) {
    soft_verbs_set_devices(1);
    ASSERT_NE(b = nic_backend_verbs_open(TestPluginHost()), nullptr) << strerror(errno);
    ibv_pd *pd = nic_verbs_pd(b);
    nic_region_ref ref{};
    void *p = nic_malloc(64);
    ASSERT_EQ(nic_translate(p, 1, &ref), 0);
    free(p);
    ASSERT_EQ(b->reg(b, ref.region_base, ref.region_len, chunk_access, &chunk), 0);
    Memory::chunk = chunk;
    Memory::blocks = 0;
    nic_verbs_rx_memory mem = {Memory::Alloc, Memory::Free};
    nic_verbs_set_rx_memory(b, &mem);
    scq = soft_verbs_cq(pd->context);
    rcq = soft_verbs_cq(pd->context);
    qp = soft_verbs_qp(pd, scq, rcq, IBV_QPT_RC, max_recv_wr, nullptr);
    ASSERT_TRUE(scq && rcq && qp);
    ToState(qp, IBV_QPS_INIT);
    ToState(qp, IBV_QPS_RTR);
    ToState(qp, IBV_QPS_RTS);
    ASSERT_NE(ep = nic_verbs_endpoint(b, qp, nullptr), nullptr);
    rx.b = b;
    rx.ep = ep;
  }
  static void ToState(ibv_qp *q, ibv_qp_state s) {
    ibv_qp_attr a{};
    a.qp_state = s;
    ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE), 0);
  }
  void TearDown() override {
    if (!b) return;
    if (ep) {
      EXPECT_EQ(CloseReceiving(), 0);
    }
    for (void *p : {static_cast<void *>(qp), static_cast<void *>(scq), static_cast<void *>(rcq)})
      soft_verbs_free(p);
    if (chunk.base) {
      EXPECT_EQ(b->dereg(b, &chunk), 0);
    }
    b->close(b);
  }
  void Send(const std::string &text, Done *d) {
    char *p = static_cast<char *>(nic_malloc(text.size()));
    memcpy(p, text.data(), text.size());
    sent.push_back(p);
    nic_sge s = {p, static_cast<uint32_t>(text.size()), chunk.lkey, chunk.handle};
    ASSERT_EQ(b->post(b, ep, &s, 1, Done::Fn, d), 0);
  }
  // Sends "msg %08d" for 0 to n - 1 from bufs (16 bytes each), no more than window ahead of
  // completed (the soft CQ holds 256), until the deadline.
  void SendNumbered(char *bufs, int n, int window, const std::atomic<int> &completed,
                    nic_completion_fn done, void *arg,
                    std::chrono::steady_clock::time_point deadline) {
    for (int i = 0; i < n && std::chrono::steady_clock::now() < deadline;) {
      if (i - completed.load() >= window) {
        std::this_thread::yield();
        continue;
      }
      char *p = bufs + i * 16;
      snprintf(p, 16, "msg %08d", i);
      nic_sge sge = {p, 12, chunk.lkey, chunk.handle};
      ASSERT_EQ(b->post(b, ep, &sge, 1, done, arg), 0);
      i++;
    }
  }
  // The soft device completes inside post and post_recv: one poll runs all that is ready.
  void Poll() {
    while (b->poll(b, 0) > 0) {
    }
  }
  int CloseReceiving() {
    int rc = nic_verbs_endpoint_close(b, ep);
    for (int i = 0; rc == -EBUSY && i < 100; i++) {
      Poll();
      rc = nic_verbs_endpoint_close(b, ep);
    }
    if (rc == 0) ep = nullptr;
    return rc;
  }
  ~SoftVerbs() override {
    for (char *p : sent)
      free(p);
  }
  nic_backend *b = nullptr;
  nic_registration chunk{};
  ibv_cq *scq = nullptr, *rcq = nullptr;
  ibv_qp *qp = nullptr;
  nic_endpoint *ep = nullptr;
  Rx rx;
  std::vector<char *> sent;
};

TEST_F(SoftVerbs, ReceivedBytesAreTheBytesSentInPageAlignedDataplaneBuffers) {
  Open();
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  EXPECT_EQ(Memory::blocks, 1);
  EXPECT_EQ(soft_verbs_rq_posted(qp), 16u) << "as many buffers as the receive queue holds";
  std::vector<std::string> texts = {"a", std::string(4096, 'b'), std::string(65536, 'c')};
  std::vector<Done> done(texts.size());
  for (size_t i = 0; i < texts.size(); i++)
    Send(texts[i], &done[i]);
  // Several messages in the receive CQ at once, with one from the message list of the scatter:
  // a two-entry send arrives as one message.
  char *x = static_cast<char *>(nic_malloc(3)), *y = static_cast<char *>(nic_malloc(4));
  memcpy(x, "two", 3);
  memcpy(y, "part", 4);
  nic_sge two[2] = {{x, 3, chunk.lkey, chunk.handle}, {y, 4, chunk.lkey, chunk.handle}};
  Done d2;
  ASSERT_EQ(b->post(b, ep, two, 2, Done::Fn, &d2), 0);
  Poll();
  ASSERT_EQ(rx.msgs.size(), 4u);
  for (size_t i = 0; i < texts.size(); i++) {
    EXPECT_EQ(rx.msgs[i], texts[i]) << i;
    EXPECT_EQ(done[i].status, 0);
  }
  EXPECT_EQ(rx.msgs[3], "twopart");
  EXPECT_EQ(rx.dataplane, 4);
  EXPECT_EQ(rx.aligned, 4);
  EXPECT_EQ(soft_verbs_rq_posted(qp), 16u) << "each buffer was posted again";
  EXPECT_EQ(rx.stalls, 0);
  EXPECT_EQ(rx.ends, 0);
  EXPECT_EQ(b->dereg(b, &chunk), -EBUSY) << "the chunk's registration stays while it receives";
  EXPECT_EQ(CloseReceiving(), 0);
  EXPECT_EQ(rx.ends, 1) << "closing flushed the QP";
  EXPECT_EQ(rx.status, -ECANCELED);
  EXPECT_EQ(Memory::blocks, 0) << "the block went back";
  free(x);
  free(y);
}

TEST_F(SoftVerbs, AllBuffersHeldStallsOnceTheSenderWaitsAndAReleaseResumes) {
  Open(NIC_ACCESS_LOCAL_WRITE, 4);
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  rx.hold = true;
  std::vector<Done> done(6);
  for (int i = 0; i < 4; i++)
    Send("held " + std::to_string(i), &done[i]);
  Poll();
  ASSERT_EQ(rx.held.size(), 4u);
  EXPECT_EQ(rx.stalls, 1);
  Send("waits", &done[4]);
  Poll();
  EXPECT_EQ(soft_verbs_sends_waiting(qp), 1u) << "no receive posted: the sender retries";
  EXPECT_EQ(rx.msgs.size(), 4u);
  EXPECT_EQ(rx.stalls, 1) << "said once per stall";
  EXPECT_EQ(nic_verbs_endpoint_close(b, ep), -EBUSY) << "buffers are held";
  EXPECT_EQ(rx.ends, 0) << "a held buffer leaves the QP alone";
  rx.hold = false;
  rx.b->rx_recycle(b, ep, rx.held[2]); // one back: the waiting message takes it
  rx.held.erase(rx.held.begin() + 2);
  Poll();
  ASSERT_EQ(rx.msgs.size(), 5u);
  EXPECT_EQ(rx.msgs[4], "waits");
  EXPECT_EQ(done[4].status, 0);
  rx.hold = true; // everything out again: a new stall, said again
  Send("again", &done[5]);
  Poll();
  EXPECT_EQ(rx.stalls, 2);
  rx.Release();
  EXPECT_EQ(soft_verbs_rq_posted(qp), 4u);
  // A token that is not out changes nothing.
  rx.b->rx_recycle(b, ep, 1);
  rx.b->rx_recycle(b, ep, 999);
  EXPECT_EQ(soft_verbs_rq_posted(qp), 4u);
}

TEST_F(SoftVerbs, DestroyIsBusyWhileABufferIsHeldThenFlushesAndFreesTheBlock) {
  Open();
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  rx.hold = true;
  Done d;
  Send("kept", &d);
  Poll();
  ASSERT_EQ(rx.held.size(), 1u);
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(nic_verbs_endpoint_close(b, ep), -EBUSY);
    Poll();
  }
  EXPECT_EQ(soft_verbs_rq_posted(qp), 15u) << "the QP was left alone while a buffer is held";
  EXPECT_EQ(Memory::blocks, 1);
  rx.hold = false;
  rx.Release();
  EXPECT_EQ(nic_verbs_endpoint_close(b, ep), -EBUSY) << "the NIC still has the posted ones";
  EXPECT_EQ(soft_verbs_rq_posted(qp), 0u) << "flushed";
  Poll();
  EXPECT_EQ(rx.ends, 1);
  EXPECT_EQ(rx.status, -ECANCELED);
  EXPECT_EQ(nic_verbs_endpoint_close(b, ep), 0);
  ep = nullptr;
  EXPECT_EQ(Memory::blocks, 0);
}

TEST_F(SoftVerbs, AChunkRegistrationWithoutLocalWriteGetsAnMrOfItsOwn) {
  Open(NIC_ACCESS_LOCAL);
  // A message into memory whose MR lacks local write fails, as on a NIC.
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  EXPECT_EQ(soft_verbs_rq_posted(qp), 16u);
  Done d;
  Send("into its own MR", &d);
  Poll();
  ASSERT_EQ(rx.msgs.size(), 1u);
  EXPECT_EQ(rx.msgs[0], "into its own MR");
  EXPECT_EQ(CloseReceiving(), 0);
}

TEST_F(SoftVerbs, AMessageLongerThanABufferEndsReceivingOnceWithEmsgsize) {
  Open();
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  Done d, after;
  Send(std::string(NIC_VERBS_RX_BUF_BYTES + 1, 'L'), &d);
  Poll();
  EXPECT_EQ(rx.msgs.size(), 0u);
  EXPECT_EQ(rx.ends, 1) << "the other buffers were flushed without another word";
  EXPECT_EQ(rx.status, -EMSGSIZE);
  EXPECT_EQ(d.status, -EMSGSIZE) << "the sender hears why (the responder's IBV_WC_REM_INV_REQ_ERR)";
  EXPECT_EQ(CloseReceiving(), 0);
  EXPECT_EQ(rx.ends, 1);
}

TEST_F(SoftVerbs, ACompletionOfTheApplicationsOwnReceiveIsDroppedNotFollowed) {
  Open();
  static char own[256] __attribute__((aligned(4096)));
  nic_registration oreg{};
  PostApplicationReceive(b, qp, own, sizeof own, &oreg);
  if (HasFatalFailure()) return;
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  EXPECT_EQ(soft_verbs_rq_posted(qp), 16u) << "one buffer fewer fits beside the application's";
  Done d1, d2;
  Send("ooo", &d1); // into the application's receive, posted first
  Send("nnn", &d2);
  Poll();
  ASSERT_EQ(rx.msgs.size(), 1u);
  EXPECT_EQ(rx.msgs[0], "nnn");
  EXPECT_EQ(std::string(own, 3), "ooo");
  EXPECT_EQ(CloseReceiving(), 0);
  EXPECT_EQ(b->dereg(b, &oreg), 0);
}

// The application's own signaled work requests on an endpoint's QP complete on its send CQ too
// (an RDMA read or write with a key from nic_register, say): their completions are dropped,
// said and counted, not taken for nicmalloc's posts. Their wr_id was cast to a post and followed
// (SIGSEGV on 0x4141; a pointer to the application's own record is followed just the same).
TEST_F(SoftVerbs, ACompletionOfTheApplicationsOwnSendIsDroppedNotFollowed) {
  Open();
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0); // where the sends land
  char *msg = static_cast<char *>(nic_malloc(16));
  memcpy(msg, "app", 3);
  static char record[64]; // what an application's wr_id may point at
  memset(record, 0x41, sizeof record);
  for (uint64_t wr_id : {uint64_t{0x4141}, reinterpret_cast<uint64_t>(record)}) {
    ibv_sge sge = {reinterpret_cast<uintptr_t>(msg), 3, chunk.lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
  }
  Done d;
  Send("ours", &d);
  testing::internal::CaptureStderr();
  Poll();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(d.calls, 1);
  EXPECT_EQ(d.status, 0);
  ASSERT_EQ(rx.msgs.size(), 3u);
  EXPECT_EQ(rx.msgs[2], "ours");
  EXPECT_NE(err.find("names no post of nicmalloc's"), std::string::npos) << err;
  EXPECT_EQ(CloseReceiving(), 0);
  free(msg);
}

// Two endpoints share an 8-deep send CQ and a 24-deep receive CQ. The work requests that can
// complete on a CQ never outnumber its room: the second endpoint posts the 8 receives left, and
// sends past the 8 in flight are refused with -EAGAIN, nothing posted and no completion. Without
// the count 32 receives and 12 sends went to the NIC: the send CQ overran at the ninth (in error,
// completions lost: four posts never completed), and the receive CQ at the flush that closing
// makes. The sends past the room then completed -EAGAIN, unsent, where a later one might go.
TEST_F(SoftVerbs, WorkRequestsThatCanCompleteOnACqNeverOutnumberItsRoom) {
  Open();
  ibv_pd *pd = nic_verbs_pd(b);
  ibv_cq *small = soft_verbs_cq_depth(pd->context, 8),
         *rsmall = soft_verbs_cq_depth(pd->context, 24);
  ibv_qp *q[2];
  nic_endpoint *e[2];
  Rx r[2];
  for (int i = 0; i < 2; i++) {
    q[i] = soft_verbs_qp(pd, small, rsmall, IBV_QPT_RC, 16, nullptr);
    for (ibv_qp_state st : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS})
      ToState(q[i], st);
    ASSERT_NE(e[i] = nic_verbs_endpoint(b, q[i], nullptr), nullptr);
    r[i].b = b;
    r[i].ep = e[i];
    ASSERT_EQ(b->endpoint_receive(b, e[i], Rx::Fn, &r[i]), 0) << i;
  }
  EXPECT_EQ(soft_verbs_rq_posted(q[0]), 16u);
  EXPECT_EQ(soft_verbs_rq_posted(q[1]), 8u) << "the receive CQ's room left";
  char *buf = static_cast<char *>(nic_malloc(16));
  memcpy(buf, "x", 1);
  std::vector<Done> done(12);
  int taken = 0, again = 0;
  for (int i = 0; i < 12; i++) {
    nic_sge sge = {buf, 1, chunk.lkey, chunk.handle};
    const int rc = b->post(b, e[i / 6], &sge, 1, Done::Fn, &done[i]);
    EXPECT_TRUE(rc == 0 || rc == -EAGAIN) << i << ": " << rc;
    EXPECT_EQ(rc == 0, i < 8) << "post " << i;
    taken += rc == 0;
    again += rc == -EAGAIN;
  }
  EXPECT_EQ(taken, 8);
  EXPECT_EQ(again, 4);
  Poll();
  EXPECT_FALSE(soft_verbs_cq_overrun(small));
  int ok = 0, calls = 0;
  for (const Done &d : done) {
    calls += d.calls;
    ok += d.calls && d.status == 0;
  }
  EXPECT_EQ(calls, 8) << "every post taken completes, and no refused one";
  EXPECT_EQ(ok, 8);
  // Both close unpolled: their QPs flush every receive still posted into the receive CQ.
  EXPECT_EQ(nic_verbs_endpoint_close(b, e[0]), -EBUSY);
  EXPECT_EQ(nic_verbs_endpoint_close(b, e[1]), -EBUSY);
  for (int i = 0; i < 2; i++) {
    int rc = nic_verbs_endpoint_close(b, e[i]);
    for (int k = 0; rc == -EBUSY && k < 100; k++) {
      Poll();
      rc = nic_verbs_endpoint_close(b, e[i]);
    }
    EXPECT_EQ(rc, 0) << i;
  }
  EXPECT_FALSE(soft_verbs_cq_overrun(rsmall));
  EXPECT_EQ(r[0].msgs.size() + r[1].msgs.size(), 8u);
  for (void *p : {static_cast<void *>(q[0]), static_cast<void *>(q[1]), static_cast<void *>(small),
                  static_cast<void *>(rsmall)})
    soft_verbs_free(p);
  free(buf);
}

// A send the QP's send queue has no room for (ibv_post_send's ENOMEM) is refused with -EAGAIN:
// nothing posted, no completion, the registration and the endpoint left as before it. Posted
// again once polls made room, it arrives after those before it, and nothing after it overtakes
// it. It completed -EAGAIN, unsent, after a poll, while a send posted after it went: the
// receiver got "0" to "3" and then "5", a hole where "4" was.
TEST_F(SoftVerbs, ASendTheSendQueueHasNoRoomForIsRefusedAndPostedAgainArrivesInOrder) {
  Open();
  soft_verbs_qp_send_wr(qp, 4);
  char *buf = static_cast<char *>(nic_malloc(6));
  memcpy(buf, "012345", 6);
  std::vector<Done> done(6);
  auto post = [&](int i) {
    nic_sge sge = {buf + i, 1, chunk.lkey, chunk.handle};
    return b->post(b, ep, &sge, 1, Done::Fn, &done[i]);
  };
  for (int i = 0; i < 4; i++) // no receive posted yet: the sends wait in the send queue
    ASSERT_EQ(post(i), 0) << i;
  const int refused = post(4);
  EXPECT_EQ(refused, -EAGAIN) << "the send queue is full";
  Poll();
  EXPECT_EQ(done[4].calls, 0) << "a refused send completed";
  EXPECT_EQ(soft_verbs_sends_waiting(qp), 4u);
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0); // the waiting sends land
  Poll();
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(done[i].calls, 1) << i;
    EXPECT_EQ(done[i].status, 0) << i;
  }
  if (refused) { // as a caller of a refused post does
    ASSERT_EQ(post(4), 0) << "room again";
  }
  ASSERT_EQ(post(5), 0);
  Poll();
  std::string got;
  for (const std::string &m : rx.msgs)
    got += m;
  EXPECT_EQ(got, "012345");
  EXPECT_EQ(done[4].calls, 1);
  EXPECT_EQ(done[4].status, 0);
  EXPECT_EQ(done[5].status, 0);
  EXPECT_EQ(CloseReceiving(), 0) << "nothing of the refused send left in flight";
  free(buf);
}

// A post longer than the port carries (max_msg_sz, caps.max_message) is refused with -EMSGSIZE
// before it reaches the NIC. It was posted: the NIC completed it IBV_WC_LOC_LEN_ERR and the QP
// went to the error state, taking every later post and receive with it.
TEST_F(SoftVerbs, APostLongerThanThePortCarriesIsRefusedAndTheQueuePairLives) {
  struct PortLimit {
    PortLimit() { soft_verbs_set_max_msg(4096); }
    ~PortLimit() { soft_verbs_set_max_msg(1u << 30); }
  } limit;
  Open();
  EXPECT_EQ(b->caps.max_message, 4096u);
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  char *p = static_cast<char *>(nic_malloc(6000));
  memset(p, 'm', 6000);
  nic_sge two[2] = {{p, 3000, chunk.lkey, chunk.handle},
                    {p + 3000, 3000, chunk.lkey, chunk.handle}};
  Done big, after;
  EXPECT_EQ(b->post(b, ep, two, 2, Done::Fn, &big), -EMSGSIZE);
  Poll();
  EXPECT_EQ(big.calls, 0) << "refused, not posted";
  Send("after", &after);
  Poll();
  EXPECT_EQ(after.status, 0) << "the queue pair still sends";
  ASSERT_EQ(rx.msgs.size(), 1u);
  EXPECT_EQ(rx.msgs[0], "after");
  free(p);
}

// The device reads a send's entries as the data moves, not when the work request is posted: an
// MR deregistered in between fails the send IBV_WC_LOC_PROT_ERR and the QP goes to error,
// flushing what was queued behind it. The soft device checked at post only, and copied from the
// deregistered MR at delivery.
TEST_F(SoftVerbs, DeviceChecksASendsMrWhenItsDataMoves) {
  Open();
  RawQp raw(nic_verbs_pd(b));
  memcpy(raw.src, "moved", 5);
  ASSERT_EQ(raw.Send(raw.smr->lkey, 1), 0);
  ASSERT_EQ(raw.Send(raw.smr->lkey, 2), 0);
  EXPECT_EQ(soft_verbs_sends_waiting(raw.qp), 2u) << "no receive posted: the sender retries";
  ASSERT_EQ(ibv_dereg_mr(raw.smr), 0);
  raw.smr = nullptr;
  ASSERT_EQ(raw.Recv(10), 0);
  EXPECT_EQ(RawQp::Reap(raw.scq), (RawQp::Wcs{{1, IBV_WC_LOC_PROT_ERR}, {2, IBV_WC_WR_FLUSH_ERR}}));
  EXPECT_EQ(RawQp::Reap(raw.rcq), (RawQp::Wcs{{10, IBV_WC_WR_FLUSH_ERR}}));
  EXPECT_EQ(raw.State(), IBV_QPS_ERR);
  EXPECT_EQ(std::string(raw.dst, 5), std::string(5, '\0')) << "copied from a deregistered MR";
}

// An lkey names an MR of one protection domain: a QP of another cannot use it, and the send
// completes IBV_WC_LOC_PROT_ERR, the QP to error. The soft device took any live MR's lkey.
TEST_F(SoftVerbs, DeviceRefusesAnMrOfAnotherProtectionDomain) {
  Open();
  RawQp raw(nic_verbs_pd(b));
  ibv_pd *other = ibv_alloc_pd(nic_verbs_context(b));
  ASSERT_NE(other, nullptr);
  memcpy(raw.src, "other", 5);
  ibv_mr *omr = ibv_reg_mr(other, raw.src, sizeof raw.src, 0);
  ASSERT_NE(omr, nullptr);
  ASSERT_EQ(raw.Recv(10), 0);
  ASSERT_EQ(raw.Send(omr->lkey, 1), 0);
  EXPECT_EQ(RawQp::Reap(raw.scq), (RawQp::Wcs{{1, IBV_WC_LOC_PROT_ERR}}));
  EXPECT_EQ(RawQp::Reap(raw.rcq), (RawQp::Wcs{{10, IBV_WC_WR_FLUSH_ERR}}));
  EXPECT_EQ(raw.State(), IBV_QPS_ERR);
  EXPECT_EQ(std::string(raw.dst, 5), std::string(5, '\0')) << "copied through another PD's MR";
  EXPECT_EQ(ibv_dereg_mr(omr), 0);
  EXPECT_EQ(ibv_dealloc_pd(other), 0);
}

// A QP in the error state still takes sends, as mlx5's does, and flushes them: each completes
// IBV_WC_WR_FLUSH_ERR. The soft device refused them with EINVAL.
TEST_F(SoftVerbs, DeviceFlushesSendsPostedInTheErrorState) {
  Open();
  RawQp raw(nic_verbs_pd(b));
  soft_verbs_qp_fatal(raw.qp);
  EXPECT_EQ(raw.Send(raw.smr->lkey, 1), 0);
  EXPECT_EQ(RawQp::Reap(raw.scq), (RawQp::Wcs{{1, IBV_WC_WR_FLUSH_ERR}}));
}

// A NIC completes a send posted without IBV_SEND_SIGNALED only when it fails. The soft device
// completed every send.
TEST_F(SoftVerbs, DeviceCompletesAnUnsignaledSendOnlyInError) {
  Open();
  RawQp raw(nic_verbs_pd(b));
  ASSERT_EQ(raw.Recv(10), 0);
  ASSERT_EQ(raw.Send(raw.smr->lkey, 1, false), 0);
  ASSERT_EQ(raw.Send(raw.smr->lkey, 2, false), 0); // waits: no receive left
  EXPECT_EQ(RawQp::Reap(raw.rcq), (RawQp::Wcs{{10, IBV_WC_SUCCESS}}));
  EXPECT_EQ(RawQp::Reap(raw.scq), RawQp::Wcs{}) << "an unsignaled success completed";
  soft_verbs_qp_fatal(raw.qp);
  EXPECT_EQ(RawQp::Reap(raw.scq), (RawQp::Wcs{{2, IBV_WC_WR_FLUSH_ERR}})) << "errors complete";
}

// A receive into memory its MR does not let the NIC write is taken, as on a NIC, and fails when a
// message comes: the receive IBV_WC_LOC_PROT_ERR, the send IBV_WC_REM_OP_ERR (the responder's
// NAK), the QP to error. The soft device refused the post with EFAULT.
TEST_F(SoftVerbs, DeviceFailsAReceiveWithoutLocalWriteWhenAMessageComes) {
  Open();
  RawQp raw(nic_verbs_pd(b));
  memcpy(raw.dst, "bytes", 5);
  ASSERT_EQ(raw.Recv(raw.src, sizeof raw.src, raw.smr->lkey, 10), 0);
  EXPECT_EQ(soft_verbs_rq_posted(raw.qp), 1u);
  ASSERT_EQ(raw.Send(raw.dst, 5, raw.rmr->lkey, 1), 0);
  EXPECT_EQ(RawQp::Reap(raw.rcq), (RawQp::Wcs{{10, IBV_WC_LOC_PROT_ERR}}));
  EXPECT_EQ(RawQp::Reap(raw.scq), (RawQp::Wcs{{1, IBV_WC_REM_OP_ERR}}));
  EXPECT_EQ(raw.State(), IBV_QPS_ERR);
  EXPECT_EQ(std::string(raw.src, 5), std::string(5, '\0')) << "written without local write";
}

// A message longer than the receive it lands in: the responder completes the receive
// IBV_WC_LOC_LEN_ERR and NAKs the send, which completes IBV_WC_REM_INV_REQ_ERR; the QP goes to
// error. The soft device flushed the send (IBV_WC_WR_FLUSH_ERR), as if it had never gone out.
TEST_F(SoftVerbs, DeviceFailsTheSendOfAMessageLongerThanItsReceiveWithAnInvalidRequest) {
  Open();
  RawQp raw(nic_verbs_pd(b));
  ASSERT_EQ(raw.Recv(raw.dst, 4, raw.rmr->lkey, 10), 0);
  ASSERT_EQ(raw.Send(raw.smr->lkey, 1), 0); // 5 bytes
  EXPECT_EQ(RawQp::Reap(raw.rcq), (RawQp::Wcs{{10, IBV_WC_LOC_LEN_ERR}}));
  EXPECT_EQ(RawQp::Reap(raw.scq), (RawQp::Wcs{{1, IBV_WC_REM_INV_REQ_ERR}}));
  EXPECT_EQ(raw.State(), IBV_QPS_ERR);
}

// Work completions in error are counted through the host's table (verbs_completion_errors) and
// said (once per status by libnicmalloc's host: VerbsSoftPublic): a message longer than the
// receive buffer fails the receive (IBV_WC_LOC_LEN_ERR) and its send (IBV_WC_REM_INV_REQ_ERR), the
// QP's 15 other receives flush, and so does a later post. They were neither counted nor said.
TEST_F(SoftVerbs, CompletionsInErrorAreCountedAndSaid) {
  Open();
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  const uint64_t before = TestCompletionErrors();
  testing::internal::CaptureStderr();
  Done d[2];
  Send(std::string(NIC_VERBS_RX_BUF_BYTES + 1, 'L'), &d[0]);
  Poll();
  Send("flushed", &d[1]);
  Poll();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(d[1].status, -ECANCELED);
  EXPECT_EQ(TestCompletionErrors() - before, 18u);
  for (int status : {IBV_WC_LOC_LEN_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_WR_FLUSH_ERR})
    EXPECT_NE(err.find("status " + std::to_string(status) + " ("), std::string::npos) << err;
}

// The flushes of the receives an endpoint's close takes back (it moves the QP to error) are no
// error: not counted.
TEST_F(SoftVerbs, TheFlushesOfACloseAreNotCountedAsErrors) {
  Open();
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  const uint64_t before = TestCompletionErrors();
  EXPECT_EQ(CloseReceiving(), 0);
  EXPECT_EQ(rx.ends, 1);
  EXPECT_EQ(TestCompletionErrors(), before);
}

// Every post is signaled: an unsignaled send's success makes no completion, so its done() would
// never run and its endpoint never close (-EBUSY, a post in flight for good).
TEST_F(SoftVerbs, EveryPostIsSignaledSoItsDoneRuns) {
  Open();
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  Done d;
  Send("signaled", &d);
  Poll();
  ASSERT_EQ(rx.msgs.size(), 1u);
  EXPECT_EQ(d.calls, 1) << "the post's completion never came";
  EXPECT_EQ(d.status, 0);
}

// A NIC lets an MR be deregistered under work requests still queued that name it, and fails them
// later (IBV_WC_LOC_PROT_ERR, the QP to error): the backend must refuse the deregistration while
// a post from the registration is in flight (its count), here a send waiting for a receive.
TEST_F(SoftVerbs, ARegistrationWithAPostInFlightIsNotDeregistered) {
  Open();
  static char own[4096] __attribute__((aligned(4096)));
  memcpy(own, "waited", 6);
  nic_registration oreg{};
  ASSERT_EQ(b->reg(b, own, sizeof own, NIC_ACCESS_LOCAL, &oreg), 0);
  Done d;
  nic_sge sge = {own, 6, oreg.lkey, oreg.handle};
  ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d), 0);
  Poll();
  ASSERT_EQ(soft_verbs_sends_waiting(qp), 1u) << "no receive posted: the send waits";
  EXPECT_EQ(b->dereg(b, &oreg), -EBUSY) << "deregistered under a post in flight";
  EXPECT_NE(soft_verbs_mr_access(oreg.lkey), -1) << "the MR is gone";
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  Poll();
  EXPECT_EQ(d.calls, 1);
  EXPECT_EQ(d.status, 0);
  ASSERT_EQ(rx.msgs.size(), 1u);
  EXPECT_EQ(rx.msgs[0], "waited");
  EXPECT_EQ(b->dereg(b, &oreg), 0) << "once the post completed";
}

// A post finds and counts its registrations in one step against a deregistration's test and
// clear, so one that comes while the MR is being deregistered (here from inside ibv_dereg_mr)
// finds it gone and completes -EFAULT. It read the slot's MR unlocked and counted it after: it
// took the MR that was being freed, and the deregistration succeeded under a post in flight.
TEST_F(SoftVerbs, APostWhileItsRegistrationGoesFindsItGone) {
  Open();
  static char own[4096] __attribute__((aligned(4096)));
  memcpy(own, "gone", 4);
  static nic_registration oreg;
  static nic_backend *sb;
  static nic_endpoint *sep;
  static Done d;
  static int hooks;
  oreg = {};
  sb = b;
  sep = ep;
  d = Done{};
  hooks = 0;
  ASSERT_EQ(b->reg(b, own, sizeof own, NIC_ACCESS_LOCAL, &oreg), 0);
  soft_verbs_on_dereg([] {
    if (hooks++) return;
    nic_sge sge = {own, 4, oreg.lkey, oreg.handle};
    EXPECT_EQ(sb->post(sb, sep, &sge, 1, Done::Fn, &d), 0);
  });
  const int rc = b->dereg(b, &oreg);
  soft_verbs_on_dereg(nullptr);
  ASSERT_EQ(hooks, 1);
  EXPECT_EQ(rc, 0);
  Poll();
  EXPECT_EQ(d.calls, 1) << "the post was handed to the NIC with an MR being freed";
  EXPECT_EQ(d.status, -EFAULT);
}

// On-demand paging only for registrations whose every use the device offers it for on RC: sends
// from them, receives into them (receive buffers are carved from registrations with local
// write) and a peer's reads and writes; and no UC endpoint while registrations page on demand
// where the device offers no UC ODP (mlx5). It was applied to every registration once the device
// offered ODP for RC sends, and UC endpoints were taken.
TEST_F(SoftVerbs, OnDemandPagingOnlyWhereTheDeviceOffersItForThatUse) {
  struct Caps {
    Caps() { soft_verbs_set_odp(IBV_ODP_SUPPORT, IBV_ODP_SUPPORT_SEND, 0); }
    ~Caps() { soft_verbs_set_odp(0, 0, 0); }
  } caps;
  Open();
  ASSERT_EQ(nic_verbs_set_odp(b, true), 0);
  static char mem[3][4096] __attribute__((aligned(4096)));
  const unsigned access[3] = {NIC_ACCESS_LOCAL, NIC_ACCESS_LOCAL_WRITE, NIC_ACCESS_REMOTE_READ};
  const bool odp[3] = {true, false, false}; // no RC receive or read ODP on this device
  nic_registration reg[3];
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(b->reg(b, mem[i], sizeof mem[i], access[i], &reg[i]), 0) << i;
    const int flags = soft_verbs_mr_access(reg[i].lkey);
    EXPECT_EQ((flags & IBV_ACCESS_ON_DEMAND) != 0, odp[i]) << "access " << access[i];
  }
  ibv_qp *uc = soft_verbs_qp(nic_verbs_pd(b), scq, rcq, IBV_QPT_UC, 8, nullptr);
  errno = 0;
  nic_endpoint *e = nic_verbs_endpoint(b, uc, nullptr);
  EXPECT_EQ(e, nullptr) << "a UC endpoint while registrations page on demand";
  EXPECT_EQ(errno, EOPNOTSUPP);
  if (e) {
    EXPECT_EQ(nic_verbs_endpoint_close(b, e), 0);
  }
  soft_verbs_free(uc);
  for (nic_registration &r : reg)
    EXPECT_EQ(b->dereg(b, &r), 0);
}

// With NICMALLOC_VERBS_ODP=1 on a device whose RC ODP covers every use a registration can have,
// every MR follows the address: caps.pages_follow says so (the heap then gives pages back under
// them) and ODP can no longer be turned off. Short of that, registrations that keep their pages
// may exist and pages_follow stays false. It was never set: README promised pages back with ODP.
TEST(SoftVerbsOpen, PagesFollowOnlyWhenEveryRegistrationPagesOnDemand) {
  struct Odp {
    Odp() { Set(true); }
    ~Odp() {
      Set(false);
      soft_verbs_set_odp(0, 0, 0);
    }
    static void Set(bool on) {
      nic_plugin_settings s{};
      s.verbs_odp = on;
      nic_backend_verbs_settings(&s);
    }
  } odp;
  soft_verbs_set_devices(1);
  const uint32_t all =
      IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_WRITE;
  for (bool every : {false, true}) {
    soft_verbs_set_odp(IBV_ODP_SUPPORT, every ? all : uint32_t{IBV_ODP_SUPPORT_SEND}, 0);
    nic_backend *b = nic_backend_verbs_open(TestPluginHost());
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->caps.pages_follow, every);
    static char mem[4096] __attribute__((aligned(4096)));
    nic_registration reg{};
    ASSERT_EQ(b->reg(b, mem, sizeof mem, NIC_ACCESS_LOCAL_WRITE | NIC_ACCESS_REMOTE_WRITE, &reg),
              0);
    EXPECT_EQ((soft_verbs_mr_access(reg.lkey) & IBV_ACCESS_ON_DEMAND) != 0, every);
    EXPECT_EQ(b->dereg(b, &reg), 0);
    EXPECT_EQ(nic_verbs_set_odp(b, false), every ? -EBUSY : 0);
    b->close(b);
  }
}

// NICMALLOC_VERBS_ASYNC_EVENTS as libnicmalloc's host table answers it (plugin_host.h), for the
// backends this scope opens.
struct AsyncEventsSetting {
  explicit AsyncEventsSetting(bool on) { TestVerbsAsyncEvents() = on; }
  ~AsyncEventsSetting() { TestVerbsAsyncEvents() = false; }
};

// Under NICMALLOC_VERBS_ASYNC_EVENTS=1 a QP the NIC failed says so from poll (its asynchronous
// event, read without waiting for one), once; the descriptor keeps its flags.
TEST_F(SoftVerbs, AQueuePairTheNicFailedIsToldFromPoll) {
  {
    AsyncEventsSetting on(true);
    Open();
  }
  const int fd = nic_verbs_context(b)->async_fd, flags = fcntl(fd, F_GETFL);
  testing::internal::CaptureStderr();
  soft_verbs_qp_fatal(qp);
  std::string err;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    Poll(); // the events are read at most once per tick of the coarse clock
    err += testing::internal::GetCapturedStderr();
    if (err.find("IBV_EVENT_QP_FATAL") != std::string::npos ||
        std::chrono::steady_clock::now() > deadline)
      break;
    testing::internal::CaptureStderr();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_NE(err.find("is in the error state (IBV_EVENT_QP_FATAL)"), std::string::npos) << err;
  EXPECT_EQ(fcntl(fd, F_GETFL), flags);
  pollfd pfd = {fd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 0) << "the event was read";
}

// The device context is the one the application creates its QPs on, so its asynchronous events
// are the application's: an event about its QP is still there for it after nicmalloc's polls,
// and the descriptor is as the application left it (blocking: a thread of its may wait there).
// poll() read and dropped every event, and made the descriptor non-blocking at open, so that the
// application's ibv_get_async_event failed EAGAIN at once.
TEST_F(SoftVerbs, TheApplicationsAsyncEventsStayItsOwn) {
  Open();
  RawQp app(nic_verbs_pd(b));
  const int fd = nic_verbs_context(b)->async_fd;
  EXPECT_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0) << "made non-blocking at open";
  soft_verbs_qp_event(app.qp, IBV_EVENT_COMM_EST);
  // Polls across two ticks of the coarse clock, when poll would read events if it did.
  auto tick = [] {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    return static_cast<int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
  };
  const int64_t first = tick();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (tick() < first + 2 && std::chrono::steady_clock::now() < deadline) {
    Poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Poll();
  EXPECT_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0) << "made non-blocking";
  pollfd pfd = {fd, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 0), 1) << "the application's event was taken";
  ibv_async_event ev;
  ASSERT_EQ(ibv_get_async_event(nic_verbs_context(b), &ev), 0) << strerror(errno);
  EXPECT_EQ(ev.event_type, IBV_EVENT_COMM_EST);
  EXPECT_EQ(ev.element.qp, app.qp);
  ibv_ack_async_event(&ev);
}

TEST_F(SoftVerbs, QueuePairsItCannotServeAndBadCallsAreRefused) {
  Open();
  ibv_pd *pd = nic_verbs_pd(b);
  int not_an_endpoint = 0;
  testing::internal::CaptureStderr();
  EXPECT_EQ(b->endpoint_receive(b, reinterpret_cast<nic_endpoint *>(&not_an_endpoint), Rx::Fn, &rx),
            -EINVAL);
  EXPECT_EQ(b->endpoint_receive(b, ep, nullptr, &rx), -EINVAL);
  struct Case {
    const char *name;
    ibv_qp_type type;
    bool srq, shared_cq;
    ibv_qp_state state;
    int rc;
  } cases[] = {
      {"srq", IBV_QPT_RC, true, false, IBV_QPS_RTS, -EOPNOTSUPP},
      {"recv cq is the send cq", IBV_QPT_RC, false, true, IBV_QPS_RTS, -EINVAL},
      {"reset", IBV_QPT_RC, false, false, IBV_QPS_RESET, -EINVAL},
      {"error", IBV_QPT_RC, false, false, IBV_QPS_ERR, -ENOTCONN},
      {"uc", IBV_QPT_UC, false, false, IBV_QPS_INIT, 0},
  };
  ibv_srq *fake_srq = reinterpret_cast<ibv_srq *>(&not_an_endpoint); // only looked at, never used
  for (const Case &c : cases) {
    ibv_cq *own_rcq = soft_verbs_cq(pd->context);
    ibv_qp *q =
        soft_verbs_qp(pd, scq, c.shared_cq ? scq : own_rcq, c.type, 8, c.srq ? fake_srq : nullptr);
    if (c.state != IBV_QPS_RESET) ToState(q, c.state);
    nic_endpoint *e = nic_verbs_endpoint(b, q, nullptr);
    ASSERT_NE(e, nullptr) << c.name;
    Rx r;
    r.b = b;
    r.ep = e;
    EXPECT_EQ(b->endpoint_receive(b, e, Rx::Fn, &r), c.rc) << c.name;
    if (c.rc == 0) {
      EXPECT_EQ(b->endpoint_receive(b, e, Rx::Fn, &r), -EALREADY) << "twice";
      int rc = nic_verbs_endpoint_close(b, e);
      for (int i = 0; rc == -EBUSY && i < 100; i++) {
        while (b->poll(b, 0) > 0) {
        }
        rc = nic_verbs_endpoint_close(b, e);
      }
      EXPECT_EQ(rc, 0) << c.name;
    } else {
      EXPECT_EQ(nic_verbs_endpoint_close(b, e), 0) << c.name;
    }
    soft_verbs_free(q);
    soft_verbs_free(own_rcq);
  }
  EXPECT_EQ(Memory::blocks, 0) << "a refusal takes no memory";
  const std::string err = testing::internal::GetCapturedStderr();
  for (const char *says : {"not an endpoint of the verbs backend", "shared receive queue",
                           "is a send CQ", "RESET", "error state", "receives already"})
    EXPECT_NE(err.find(says), std::string::npos) << says << " in:\n" << err;
  // An endpoint whose send CQ is a receiving endpoint's receive CQ is refused too.
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  errno = 0;
  EXPECT_EQ(nic_verbs_endpoint(b, qp, rcq), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// A post is a bare IBV_WR_SEND: a queue pair whose sends need more (UD's address handle, remote
// QP number and Q_Key, XRC's remote SRQ number, a raw packet's frame header) is refused as an
// endpoint, saying why. It was taken, and its first post died in the provider (mlx5 reads the UD
// address handle; the soft device aborts there, as on a NIC).
TEST_F(SoftVerbs, OnlyRcAndUcQueuePairsBecomeEndpoints) {
  Open();
  ibv_pd *pd = nic_verbs_pd(b);
  testing::internal::CaptureStderr();
  for (ibv_qp_type t : {IBV_QPT_UD, IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV}) {
    ibv_qp *q = soft_verbs_qp(pd, scq, rcq, t, 8, nullptr);
    for (ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS})
      ToState(q, s);
    errno = 0;
    nic_endpoint *e = nic_verbs_endpoint(b, q, nullptr);
    EXPECT_EQ(e, nullptr) << "qp type " << t;
    EXPECT_EQ(errno, EOPNOTSUPP) << "qp type " << t;
    if (e) {
      EXPECT_EQ(nic_verbs_endpoint_close(b, e), 0);
    }
    soft_verbs_free(q);
  }
  ibv_qp *uc = soft_verbs_qp(pd, scq, rcq, IBV_QPT_UC, 8, nullptr);
  nic_endpoint *e = nic_verbs_endpoint(b, uc, nullptr);
  EXPECT_NE(e, nullptr) << "UC sends are plain sends";
  if (e) {
    EXPECT_EQ(nic_verbs_endpoint_close(b, e), 0);
  }
  soft_verbs_free(uc);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("only RC and UC queue pairs can send"), std::string::npos) << err;
}

TEST_F(SoftVerbs, WithoutMemoryFromTheHostReceivingIsNotOffered) {
  soft_verbs_set_devices(1);
  nic_backend *bare = nic_backend_verbs_open(TestPluginHost());
  ASSERT_NE(bare, nullptr);
  ibv_pd *pd = nic_verbs_pd(bare);
  ibv_cq *cq1 = soft_verbs_cq(pd->context), *cq2 = soft_verbs_cq(pd->context);
  ibv_qp *q = soft_verbs_qp(pd, cq1, cq2, IBV_QPT_RC, 8, nullptr);
  ToState(q, IBV_QPS_INIT);
  nic_endpoint *e = nic_verbs_endpoint(bare, q, nullptr);
  ASSERT_NE(e, nullptr);
  Rx r;
  EXPECT_EQ(bare->endpoint_receive(bare, e, Rx::Fn, &r), -EOPNOTSUPP);
  EXPECT_EQ(nic_verbs_endpoint_close(bare, e), 0);
  for (void *p : {static_cast<void *>(q), static_cast<void *>(cq1), static_cast<void *>(cq2)})
    soft_verbs_free(p);
  bare->close(bare);
}

// Buffers given back from another thread while one thread polls and a third sends: every message
// arrives once, in order, intact. The books and the receive queue are shared by the three.
TEST_F(SoftVerbs, BuffersGivenBackFromAnotherThreadWhilePollingAndSending) {
  Open(NIC_ACCESS_LOCAL_WRITE, 8);
  struct Shared {
    std::mutex m;
    std::deque<uint64_t> tokens;
    std::vector<std::string> msgs;
  } sh;
  auto fn = [](void *arg, void *data, size_t len, int status, uint64_t token) {
    auto *s = static_cast<Shared *>(arg);
    if (!data) return; // stalls come and go; the end does not come here
    EXPECT_EQ(status, 0);
    std::lock_guard<std::mutex> g(s->m);
    s->msgs.emplace_back(static_cast<char *>(data), len);
    s->tokens.push_back(token);
  };
  ASSERT_EQ(b->endpoint_receive(b, ep, fn, &sh), 0);
  constexpr int kMessages = 400, kWindow = 32;
  std::atomic<int> completed{0}, failed{0}, recycled{0};
  std::atomic<bool> stop{false};
  auto done = [](void *arg, int status) {
    auto *c = static_cast<std::pair<std::atomic<int> *, std::atomic<int> *> *>(arg);
    c->first->fetch_add(1);
    if (status) c->second->fetch_add(1);
  };
  std::pair<std::atomic<int> *, std::atomic<int> *> counters{&completed, &failed};
  char *bufs = static_cast<char *>(nic_malloc(kMessages * 16));
  std::thread recycler([&] {
    while (!stop.load()) {
      uint64_t t = UINT64_MAX;
      {
        std::lock_guard<std::mutex> g(sh.m);
        if (!sh.tokens.empty()) {
          t = sh.tokens.front();
          sh.tokens.pop_front();
        }
      }
      if (t == UINT64_MAX)
        std::this_thread::yield();
      else {
        b->rx_recycle(b, ep, t);
        recycled.fetch_add(1);
      }
    }
  });
  std::thread poller([&] {
    while (!stop.load())
      if (!b->poll(b, 16)) std::this_thread::yield();
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(45);
  SendNumbered(bufs, kMessages, kWindow, completed, done, &counters, deadline);
  while (completed.load() < kMessages && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  // Every buffer back, then stop: the sends' completions can come before the last receives'
  // (still to be polled), and a token the recycler took may not be back on the queue yet.
  while (recycled.load() < kMessages && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  stop = true;
  recycler.join();
  poller.join();
  EXPECT_EQ(completed.load(), kMessages);
  EXPECT_EQ(failed.load(), 0);
  ASSERT_EQ(sh.msgs.size(), static_cast<size_t>(kMessages));
  int wrong = 0;
  for (int i = 0; i < kMessages; i++) {
    char want[16];
    snprintf(want, sizeof want, "msg %08d", i);
    wrong += sh.msgs[i] != want;
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(soft_verbs_rq_posted(qp), 8u) << "every buffer back on the queue";
  free(bufs);
}

// Two threads polling while a third sends, with a receiver slow enough for their polls to
// overlap (it gives each buffer back before it returns, so the next message lands meanwhile, for
// the other poller to reap): it still runs on one thread at a time, hearing the messages in order.
TEST_F(SoftVerbs, PollingThreadsTellOneEndpointsMessagesOneAtATimeInOrder) {
  Open(NIC_ACCESS_LOCAL_WRITE, 8);
  struct Heard {
    nic_backend *b;
    nic_endpoint *ep;
    std::atomic<int> inside{0}, most_inside{0}, inversions{0}, messages{0};
    std::atomic<long> last{-1};
  } heard;
  heard.b = b;
  heard.ep = ep;
  auto fn = [](void *arg, void *data, size_t len, int, uint64_t token) {
    auto *h = static_cast<Heard *>(arg);
    const int now = h->inside.fetch_add(1) + 1;
    for (int most = h->most_inside.load();
         now > most && !h->most_inside.compare_exchange_weak(most, now);) {
    }
    if (data && len > 4) {
      const long seq = std::stol(std::string(static_cast<char *>(data) + 4, len - 4));
      if (h->last.exchange(seq) > seq) h->inversions++;
      h->b->rx_recycle(h->b, h->ep, token);
      std::this_thread::sleep_for(std::chrono::microseconds(200)); // room for the other's poll
      h->messages++;
    }
    h->inside--;
  };
  ASSERT_EQ(b->endpoint_receive(b, ep, fn, &heard), 0);
  constexpr int kMessages = 200, kWindow = 32;
  std::atomic<int> completed{0};
  std::atomic<bool> stop{false};
  auto done = [](void *arg, int) { static_cast<std::atomic<int> *>(arg)->fetch_add(1); };
  auto poll = [&] {
    while (!stop.load())
      if (!b->poll(b, 16)) std::this_thread::yield();
  };
  std::thread pollers[2] = {std::thread(poll), std::thread(poll)};
  char *bufs = static_cast<char *>(nic_malloc(kMessages * 16));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  SendNumbered(bufs, kMessages, kWindow, completed, done, &completed, deadline);
  while (heard.messages.load() < kMessages && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  stop = true;
  for (auto &t : pollers)
    t.join();
  EXPECT_EQ(heard.messages.load(), kMessages);
  EXPECT_EQ(heard.most_inside.load(), 1) << "the receiver ran on several threads at once";
  EXPECT_EQ(heard.inversions.load(), 0) << "messages reached the receiver out of order";
  Poll();
  free(bufs);
}

// A buffer given back that cannot be posted again (the QP went to RESET meanwhile) while no other
// is posted ends receiving: the receiver hears it from the next poll, not from inside the call
// that gave the buffer back (nic_release, a destroy, another thread's receive function), and the
// endpoint does not close before it has.
TEST_F(SoftVerbs, AnEndFoundGivingABufferBackIsToldByTheNextPoll) {
  Open(NIC_ACCESS_LOCAL_WRITE, 2);
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  rx.hold = true;
  Done d[2];
  Send("first", &d[0]);
  Send("second", &d[1]);
  Poll();
  ASSERT_EQ(rx.held.size(), 2u);
  EXPECT_EQ(rx.stalls, 1);
  ToState(qp, IBV_QPS_RESET); // the soft device refuses receives posted in RESET
  rx.hold = false;
  rx.Release();
  EXPECT_EQ(soft_verbs_rq_posted(qp), 0u);
  EXPECT_EQ(rx.ends, 0) << "the end was told from inside the call giving the buffer back";
  ASSERT_EQ(nic_verbs_endpoint_close(b, ep), -EBUSY) << "closed before its receiver heard the end";
  Poll();
  EXPECT_EQ(rx.ends, 1);
  EXPECT_EQ(rx.status, -EINVAL);
  Poll();
  EXPECT_EQ(rx.ends, 1) << "told once";
  EXPECT_EQ(rx.msgs.size(), 2u);
}

// A peer's RDMA write with immediate takes a posted receive but writes nothing into it: the
// receiver is not called and the buffer goes straight back on the queue.
TEST_F(SoftVerbs, AWriteWithImmediateTakesAReceiveAndItIsPostedAgain) {
  Open();
  ASSERT_EQ(b->endpoint_receive(b, ep, Rx::Fn, &rx), 0);
  ASSERT_TRUE(soft_verbs_write_with_imm(qp, 100));
  EXPECT_EQ(soft_verbs_rq_posted(qp), 15u);
  Poll();
  EXPECT_EQ(rx.msgs.size(), 0u);
  EXPECT_EQ(rx.ends + rx.stalls, 0);
  EXPECT_EQ(soft_verbs_rq_posted(qp), 16u);
  Done d;
  Send("then a message", &d);
  Poll();
  ASSERT_EQ(rx.msgs.size(), 1u);
  EXPECT_EQ(rx.msgs[0], "then a message");
}

} // namespace
