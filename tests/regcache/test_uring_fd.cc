// The endpoint's socket descriptor misused while posts are in flight: the program closes it
// and the number goes to another socket. The posts' bytes must reach the endpoint's own peer,
// never the connection that now has the number.
#include "uring_loopback.h"

using namespace uring_test;

TEST_F(UringTest, SocketClosedWithPostsInFlightNeverFeedsItsNumbersNextOwner) {
  Region mem(4 << 20, 21);
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  Reader reader(pair.rx, /*paused=*/true); // the posts stay in flight until it resumes
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  constexpr int kPosts = 4;
  std::vector<Done> done(kPosts);
  for (int i = 0; i < kPosts; i++) {
    nic_sge sge = Sge(r, size_t(i) << 20, 1 << 20);
    ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &done[i]), 0);
  }
  const int number = pair.tx;
  ASSERT_EQ(close(pair.tx), 0);
  pair.tx = -1;
  LoopbackPair other;
  ASSERT_EQ(dup2(other.tx, number), number); // the closed number is another connection now
  close(other.tx);
  other.tx = number;
  Reader stranger(other.rx);
  reader.Resume();
  ASSERT_TRUE(PollUntil(b, [&] {
    for (auto &d : done)
      if (!d.calls) return false;
    return true;
  }));
  for (int i = 0; i < kPosts; i++)
    EXPECT_EQ(done[i].status, 0) << i;
  ASSERT_TRUE(reader.WaitFor(mem.len))
      << "the endpoint's peer got " << reader.Size() << " bytes; the socket now at its number got "
      << stranger.Size();
  EXPECT_TRUE(reader.Data() == mem.Bytes(0, mem.len));
  EXPECT_EQ(stranger.Size(), 0u);
  EXPECT_EQ(b->dereg(b, &r), 0);
}
