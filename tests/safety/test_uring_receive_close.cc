// Closing a receiving io_uring endpoint (regcache/uring/uring_recv.c, nic_uring_rx_stop_locked):
// the close lets go of the backend's lock while it waits for the cancelled receive to end, and a
// post may come then. The destroy must then say -EBUSY and leave the endpoint receiving as
// before. The stop's test hook runs in that window every time, where the race alone meets it
// now and then.
#include "uring_loopback.h"

#include <liburing.h> // here, not in extern "C" through uring_internal.h: it has templates
extern "C" {
#include "uring_internal.h"
}

using namespace uring_test;

namespace {

struct Bytes {
  static void Fn(void *arg, void *data, size_t len) {
    auto *b = static_cast<Bytes *>(arg);
    std::lock_guard<std::mutex> l(b->mu);
    if (data) b->data.append(static_cast<char *>(data), len);
  }
  std::string Data() {
    std::lock_guard<std::mutex> l(mu);
    return data;
  }
  std::mutex mu;
  std::string data;
};

constexpr size_t kPost = 4 << 20; // more than the socket buffers hold

// What the hook does, on a thread of its own as another thread of the program would.
struct InTheWindow {
  int tx = -1;
  void *msg = nullptr;
  Done done;
  int post_rc = 1, calls = 0;
  static InTheWindow *now;
  static void Hook(nic_endpoint *ep) {
    InTheWindow *w = now;
    if (!w || w->calls++) return;
    std::thread([w, ep] {
      // Bytes that reach the socket while the receive is being cancelled.
      if (send(w->tx, "b", 1, 0) != 1) ADD_FAILURE() << strerror(errno);
      w->post_rc = PostParts(ep, {{w->msg, kPost}}, &w->done);
    }).join();
  }
};
InTheWindow *InTheWindow::now;

using UringReceiveClose = UringSgaTest;

TEST_F(UringReceiveClose, APostWhileTheCloseWaitsMakesItBusyAndTheEndpointGoesOnReceiving) {
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  // Paused, with small socket buffers, it keeps the endpoint's post (larger than they hold) in
  // flight until the close has looked; resumed, it lets the post complete.
  Reader reader(pair.tx, true);
  Bytes got;
  nic_endpoint *ep = Endpoint(pair.rx);
  ASSERT_NE(ep, nullptr);
  ASSERT_EQ(nic_endpoint_receive(ep, Bytes::Fn, &got), 0);
  ASSERT_EQ(send(pair.tx, "a", 1, 0), 1);
  ASSERT_TRUE(NicPollUntil([&] { return got.Data().size() == 1; }));

  InTheWindow w;
  w.tx = pair.tx;
  w.msg = nic_malloc(kPost);
  ASSERT_NE(w.msg, nullptr);
  memset(w.msg, 'p', kPost);
  InTheWindow::now = &w;
  nic_uring_rx_stop_hook = InTheWindow::Hook;
  const int rc = nic_uring_endpoint_destroy(ep);
  nic_uring_rx_stop_hook = nullptr;
  InTheWindow::now = nullptr;
  ASSERT_EQ(w.calls, 1) << "the close never waited for its cancel";
  ASSERT_EQ(w.post_rc, 0);
  EXPECT_EQ(rc, -EBUSY) << "closed with a post in flight";
  reader.Resume();
  EXPECT_TRUE(NicPollUntil([&] { return w.done.calls.load() == 1; }));
  EXPECT_EQ(w.done.failed.load(), 0);
  EXPECT_TRUE(reader.WaitFor(kPost));

  ASSERT_EQ(send(pair.tx, "0123456789", 10, 0), 10);
  EXPECT_TRUE(NicPollUntil([&] { return got.Data().size() >= 12; }))
      << "the endpoint received nothing after the busy destroy: " << got.Data();
  EXPECT_EQ(got.Data(), "ab0123456789");
  EXPECT_EQ(nic_endpoint_status(ep), 0);
  free(w.msg); // the post is done; TearDown destroys the endpoint, which must succeed now
}

} // namespace
