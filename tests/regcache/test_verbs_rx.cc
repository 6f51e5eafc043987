// The verbs backend's receive buffers (regcache/verbs/verbs_rx.c), which need no device: which
// queue pairs can receive, how a block is carved, and each buffer's life from posted to out to
// posted again, with the stall and the end said once. verbs.c does what these say on the device
// (the VerbsDevice suite checks it there, where there is one).
#include <gtest/gtest.h>

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>

#include "verbs_rx.h"

namespace {

nic_verbs_rx_qp GoodQp() {
  nic_verbs_rx_qp q{};
  q.qp_type = IBV_QPT_RC;
  q.state = IBV_QPS_INIT;
  q.recv_cq = true;
  q.max_recv_wr = 1000;
  q.max_recv_sge = 1;
  return q;
}

TEST(VerbsRxCheck, RcAndUcReceiveWithAsManyBuffersAsTheQueueTakes) {
  unsigned count = 0;
  const char *why = "unset";
  nic_verbs_rx_qp q = GoodQp();
  EXPECT_EQ(nic_verbs_rx_check(&q, &count, &why), 0);
  EXPECT_EQ(why, nullptr);
  EXPECT_EQ(count, unsigned{NIC_VERBS_RX_BUFS});
  q.qp_type = IBV_QPT_UC;
  q.max_recv_wr = 5;
  q.state = IBV_QPS_RTS;
  EXPECT_EQ(nic_verbs_rx_check(&q, &count, &why), 0);
  EXPECT_EQ(count, 5u) << "no more buffers than the receive queue holds";
}

TEST(VerbsRxCheck, QueuePairsItCannotServeAreRefusedSayingWhy) {
  struct Case {
    const char *name;
    void (*bend)(nic_verbs_rx_qp &);
    int rc;
    const char *says;
  } cases[] = {
      {"srq", [](nic_verbs_rx_qp &q) { q.srq = true; }, -EOPNOTSUPP, "shared receive queue"},
      {"ud", [](nic_verbs_rx_qp &q) { q.qp_type = IBV_QPT_UD; }, -EOPNOTSUPP, "RC and UC"},
      {"no rq", [](nic_verbs_rx_qp &q) { q.max_recv_wr = 0; }, -EINVAL, "no receive queue"},
      {"no sge", [](nic_verbs_rx_qp &q) { q.max_recv_sge = 0; }, -EINVAL, "no receive queue"},
      {"no cq", [](nic_verbs_rx_qp &q) { q.recv_cq = false; }, -EINVAL, "no receive queue"},
      {"send cq", [](nic_verbs_rx_qp &q) { q.recv_cq_is_send = true; }, -EINVAL, "send CQ"},
      {"reset", [](nic_verbs_rx_qp &q) { q.state = IBV_QPS_RESET; }, -EINVAL, "RESET"},
      {"error", [](nic_verbs_rx_qp &q) { q.state = IBV_QPS_ERR; }, -ENOTCONN, "error state"},
  };
  for (const Case &c : cases) {
    nic_verbs_rx_qp q = GoodQp();
    c.bend(q);
    unsigned count = 77;
    const char *why = nullptr;
    EXPECT_EQ(nic_verbs_rx_check(&q, &count, &why), c.rc) << c.name;
    ASSERT_NE(why, nullptr) << c.name;
    EXPECT_NE(std::string(why).find(c.says), std::string::npos) << c.name << ": " << why;
    EXPECT_EQ(count, 77u) << c.name << ": no count for a refused QP";
  }
}

struct Ring {
  explicit Ring(unsigned n) : count(n) {
    block = std::aligned_alloc(NIC_VERBS_RX_ALIGN, nic_verbs_rx_block_bytes(n));
    r = static_cast<nic_verbs_rx *>(std::calloc(1, nic_verbs_rx_ring_bytes(n)));
  }
  ~Ring() {
    std::free(block);
    std::free(r);
  }
  void PostAll() {
    for (unsigned i = 0; i < count; i++)
      nic_verbs_rx_posted(r, i);
  }
  unsigned count;
  void *block;
  nic_verbs_rx *r;
};

TEST(VerbsRxRing, BuffersArePageAlignedWholePagesOfTheBlockApart) {
  Ring ring(NIC_VERBS_RX_BUFS);
  ASSERT_EQ(nic_verbs_rx_init(ring.r, ring.block, ring.count), 0);
  EXPECT_EQ(ring.r->buf_bytes % NIC_VERBS_RX_ALIGN, 0u);
  EXPECT_EQ(nic_verbs_rx_block_bytes(ring.count), ring.count * ring.r->buf_bytes);
  const auto lo = reinterpret_cast<uintptr_t>(ring.block);
  std::set<uintptr_t> pages;
  for (unsigned i = 0; i < ring.count; i++) {
    const auto a = reinterpret_cast<uintptr_t>(nic_verbs_rx_addr(ring.r, i));
    EXPECT_EQ(a % NIC_VERBS_RX_ALIGN, 0u) << i;
    EXPECT_GE(a, lo);
    EXPECT_LE(a + ring.r->buf_bytes, lo + nic_verbs_rx_block_bytes(ring.count));
    for (uintptr_t p = a; p < a + ring.r->buf_bytes; p += NIC_VERBS_RX_ALIGN)
      EXPECT_TRUE(pages.insert(p).second) << "buffer " << i << " shares a page";
    EXPECT_EQ(ring.r->bufs[i].ring, ring.r);
    EXPECT_EQ(ring.r->bufs[i].index, i);
    EXPECT_EQ(ring.r->bufs[i].state, NIC_VERBS_RX_IDLE);
  }
  EXPECT_EQ(nic_verbs_rx_init(ring.r, static_cast<char *>(ring.block) + 64, ring.count), -EINVAL);
  EXPECT_EQ(nic_verbs_rx_init(ring.r, ring.block, 0), -EINVAL);
  EXPECT_EQ(nic_verbs_rx_init(ring.r, ring.block, NIC_VERBS_RX_BUFS + 1), -EINVAL)
      << "more buffers than the books hold";
}

TEST(VerbsRxRing, ABufferGoesOutAndBackAndBadTokensChangeNothing) {
  Ring ring(4);
  ASSERT_EQ(nic_verbs_rx_init(ring.r, ring.block, ring.count), 0);
  ring.PostAll();
  EXPECT_TRUE(nic_verbs_rx_posted_any(ring.r));
  EXPECT_FALSE(nic_verbs_rx_out(ring.r));
  EXPECT_EQ(nic_verbs_rx_complete(ring.r, 2, 0), NIC_VERBS_RX_DELIVER);
  EXPECT_TRUE(nic_verbs_rx_out(ring.r)) << "destroy must say -EBUSY now";
  EXPECT_FALSE(nic_verbs_rx_stall_due(ring.r)) << "three buffers are still posted";
  EXPECT_EQ(nic_verbs_rx_complete(ring.r, 2, 0), NIC_VERBS_RX_NONE) << "completed twice";
  EXPECT_EQ(nic_verbs_rx_recycle(ring.r, 1), NIC_VERBS_RX_BAD_TOKEN) << "posted, not out";
  EXPECT_EQ(nic_verbs_rx_recycle(ring.r, 4), NIC_VERBS_RX_BAD_TOKEN) << "out of range";
  EXPECT_EQ(nic_verbs_rx_recycle(ring.r, UINT64_MAX), NIC_VERBS_RX_BAD_TOKEN);
  EXPECT_EQ(ring.r->out, 1u);
  EXPECT_EQ(ring.r->posted, 3u);
  EXPECT_EQ(nic_verbs_rx_recycle(ring.r, 2), NIC_VERBS_RX_REPOST);
  EXPECT_EQ(nic_verbs_rx_recycle(ring.r, 2), NIC_VERBS_RX_BAD_TOKEN) << "given back twice";
  nic_verbs_rx_posted(ring.r, 2);
  EXPECT_FALSE(nic_verbs_rx_out(ring.r));
  EXPECT_EQ(ring.r->posted, 4u);
}

TEST(VerbsRxRing, EveryBufferOutStallsOncePerStall) {
  Ring ring(3);
  ASSERT_EQ(nic_verbs_rx_init(ring.r, ring.block, ring.count), 0);
  ring.PostAll();
  for (unsigned i = 0; i < 3; i++) {
    ASSERT_EQ(nic_verbs_rx_complete(ring.r, i, 0), NIC_VERBS_RX_DELIVER);
    EXPECT_EQ(nic_verbs_rx_stall_due(ring.r), i == 2) << "after buffer " << i;
  }
  EXPECT_FALSE(nic_verbs_rx_stall_due(ring.r)) << "said once";
  // A release resumes receiving; holding everything again is a new stall, said again.
  ASSERT_EQ(nic_verbs_rx_recycle(ring.r, 1), NIC_VERBS_RX_REPOST);
  EXPECT_FALSE(nic_verbs_rx_stall_due(ring.r)) << "not posted yet, but not a new stall either";
  nic_verbs_rx_posted(ring.r, 1);
  EXPECT_FALSE(nic_verbs_rx_stall_due(ring.r));
  ASSERT_EQ(nic_verbs_rx_complete(ring.r, 1, 0), NIC_VERBS_RX_DELIVER);
  EXPECT_TRUE(nic_verbs_rx_stall_due(ring.r));
}

TEST(VerbsRxRing, AnErrorEndsReceivingOnceAndNothingIsPostedAfter) {
  Ring ring(4);
  ASSERT_EQ(nic_verbs_rx_init(ring.r, ring.block, ring.count), 0);
  ring.PostAll();
  ASSERT_EQ(nic_verbs_rx_complete(ring.r, 0, 0), NIC_VERBS_RX_DELIVER); // held by the program
  EXPECT_EQ(nic_verbs_rx_complete(ring.r, 1, -EMSGSIZE), NIC_VERBS_RX_FINAL);
  // The QP went to error: the rest are flushed, and none of it is said again.
  EXPECT_EQ(nic_verbs_rx_complete(ring.r, 2, -ECANCELED), NIC_VERBS_RX_NONE);
  EXPECT_EQ(nic_verbs_rx_complete(ring.r, 3, 0), NIC_VERBS_RX_NONE);
  EXPECT_FALSE(nic_verbs_rx_posted_any(ring.r));
  EXPECT_FALSE(nic_verbs_rx_stall_due(ring.r)) << "ended, not stalled";
  EXPECT_TRUE(nic_verbs_rx_out(ring.r));
  EXPECT_EQ(nic_verbs_rx_recycle(ring.r, 0), NIC_VERBS_RX_KEEP) << "not posted on a dead QP";
  EXPECT_FALSE(nic_verbs_rx_out(ring.r)) << "destroy may go ahead";
}

TEST(VerbsRxRing, ARepostRefusedWithNothingPostedEndsReceiving) {
  Ring ring(2);
  ASSERT_EQ(nic_verbs_rx_init(ring.r, ring.block, ring.count), 0);
  ring.PostAll();
  ASSERT_EQ(nic_verbs_rx_complete(ring.r, 0, 0), NIC_VERBS_RX_DELIVER);
  ASSERT_EQ(nic_verbs_rx_recycle(ring.r, 0), NIC_VERBS_RX_REPOST);
  EXPECT_EQ(nic_verbs_rx_repost_failed(ring.r, 0, -EINVAL), NIC_VERBS_RX_NONE)
      << "buffer 1 is still posted: its flush completion will end receiving";
  ASSERT_EQ(nic_verbs_rx_complete(ring.r, 1, 0), NIC_VERBS_RX_DELIVER);
  ASSERT_EQ(nic_verbs_rx_recycle(ring.r, 1), NIC_VERBS_RX_REPOST);
  EXPECT_EQ(nic_verbs_rx_repost_failed(ring.r, 1, -EINVAL), NIC_VERBS_RX_FINAL)
      << "no completion will come: this is the end";
  EXPECT_EQ(nic_verbs_rx_repost_failed(ring.r, 1, -EINVAL), NIC_VERBS_RX_NONE) << "said once";
  EXPECT_FALSE(nic_verbs_rx_out(ring.r));
  EXPECT_FALSE(nic_verbs_rx_posted_any(ring.r));
  // Kept for the receiver, with the refusal's status, and told once.
  unsigned i = 9;
  uint32_t len = 9;
  int status = 0;
  EXPECT_TRUE(nic_verbs_rx_news_due(ring.r));
  EXPECT_EQ(nic_verbs_rx_next(ring.r, &i, &len, &status), NIC_VERBS_RX_END);
  EXPECT_EQ(status, -EINVAL);
  EXPECT_FALSE(nic_verbs_rx_news_due(ring.r));
  EXPECT_EQ(nic_verbs_rx_next(ring.r, &i, &len, &status), NIC_VERBS_RX_NO_NEWS);
}

// What the receiver hears, in order: the messages in the order their completions came (whoever
// reaped them), then the end; or, with every buffer out and none posted, one stall.
TEST(VerbsRxRing, MessagesAreToldInTheOrderTheyCameThenTheEndOrAStall) {
  Ring ring(3);
  ASSERT_EQ(nic_verbs_rx_init(ring.r, ring.block, ring.count), 0);
  ring.PostAll();
  for (unsigned b : {2u, 0u, 1u}) {
    ASSERT_EQ(nic_verbs_rx_complete(ring.r, b, 0), NIC_VERBS_RX_DELIVER);
    nic_verbs_rx_queue(ring.r, b, 100 + b);
  }
  unsigned i = 0;
  uint32_t len = 0;
  int status = 1;
  for (unsigned b : {2u, 0u, 1u}) {
    EXPECT_TRUE(nic_verbs_rx_news_due(ring.r));
    ASSERT_EQ(nic_verbs_rx_next(ring.r, &i, &len, &status), NIC_VERBS_RX_MESSAGE);
    EXPECT_EQ(i, b);
    EXPECT_EQ(len, 100 + b);
    EXPECT_EQ(status, 0);
  }
  ASSERT_EQ(nic_verbs_rx_next(ring.r, &i, &len, &status), NIC_VERBS_RX_STALL)
      << "every buffer is out, none posted";
  EXPECT_EQ(status, -ENOBUFS);
  EXPECT_FALSE(nic_verbs_rx_news_due(ring.r)) << "a stall is told once";
  EXPECT_EQ(nic_verbs_rx_next(ring.r, &i, &len, &status), NIC_VERBS_RX_NO_NEWS);
  // Two back and posted, one message more, then an error: the message before the end.
  for (unsigned b : {0u, 1u}) {
    ASSERT_EQ(nic_verbs_rx_recycle(ring.r, b), NIC_VERBS_RX_REPOST);
    nic_verbs_rx_posted(ring.r, b);
  }
  ASSERT_EQ(nic_verbs_rx_complete(ring.r, 0, 0), NIC_VERBS_RX_DELIVER);
  nic_verbs_rx_queue(ring.r, 0, 7);
  EXPECT_EQ(nic_verbs_rx_complete(ring.r, 1, -EMSGSIZE), NIC_VERBS_RX_FINAL);
  ASSERT_EQ(nic_verbs_rx_next(ring.r, &i, &len, &status), NIC_VERBS_RX_MESSAGE);
  EXPECT_EQ(i, 0u);
  EXPECT_EQ(len, 7u);
  ASSERT_EQ(nic_verbs_rx_next(ring.r, &i, &len, &status), NIC_VERBS_RX_END);
  EXPECT_EQ(status, -EMSGSIZE);
  EXPECT_FALSE(nic_verbs_rx_news_due(ring.r)) << "nothing after the end, no stall either";
}

} // namespace
