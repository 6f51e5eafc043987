// Receiving on a verbs endpoint through the public calls, as an application does
// (nic_verbs_endpoint_create, nic_endpoint_receive, nic_hold / nic_release, the statistics), on
// the software device of tests/regcache/soft_verbs.h: ctest runs this program with
// NICMALLOC_BACKEND=verbs and a copy of libnicmalloc.so whose neighbouring verbs plugin is built
// against that device, which this program holds and exports (tests/plugins.cmake). It covers
// what the plugin suites play themselves: the dataplane memory libnicmalloc hands the plugin
// (safety/endpoint_verbs.c) and the hold bookkeeping (safety/receive.c).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "nicmalloc.h"
#include "soft_verbs.h"

namespace {

nic_stats Stats() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

struct Rx {
  std::vector<std::string> msgs;
  std::vector<void *> kept;
  int dataplane = 0, aligned = 0, ends = 0;
  bool hold = false;
  static void Fn(void *arg, void *data, size_t len) {
    auto *r = static_cast<Rx *>(arg);
    if (!data) {
      r->ends++;
      return;
    }
    r->msgs.emplace_back(static_cast<char *>(data), len);
    r->dataplane += nic_is_dataplane(data);
    r->aligned += reinterpret_cast<uintptr_t>(data) % 4096 == 0;
    if (r->hold) {
      EXPECT_EQ(nic_hold(data), 0);
      r->kept.push_back(data);
    }
  }
};

int Sent = 0;
void Send(nic_endpoint *ep, const std::string &text) {
  char *p = static_cast<char *>(nic_malloc(text.size()));
  memcpy(p, text.data(), text.size());
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_EQ(nic_sga_add(&sga, p, text.size()), 0);
  ASSERT_EQ(nic_sga_post(
                &sga, ep, [](void *, int status) { Sent += status == 0; }, nullptr),
            0);
  free(p); // deferred until the send completed
}

void Drain() {
  while (nic_poll(0) > 0) {
  }
}

// An RC QP of the software device with CQs of its own, in RTS and connected to itself (what it
// sends, it receives); freed with the object.
struct SoftQp {
  ibv_cq *scq, *rcq;
  ibv_qp *qp;
  SoftQp(ibv_pd *pd, uint32_t max_recv_wr, uint32_t max_send_sge = 8)
      : scq(soft_verbs_cq(pd->context)), rcq(soft_verbs_cq(pd->context)),
        qp(soft_verbs_qp(pd, scq, rcq, IBV_QPT_RC, max_recv_wr, nullptr)) {
    soft_verbs_qp_send_sge(qp, max_send_sge);
    for (ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
      ibv_qp_attr a{};
      a.qp_state = s;
      EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    }
  }
  SoftQp(const SoftQp &) = delete;
  SoftQp &operator=(const SoftQp &) = delete;
  ~SoftQp() {
    for (void *p : {static_cast<void *>(qp), static_cast<void *>(scq), static_cast<void *>(rcq)})
      soft_verbs_free(p);
  }
};

// Destroys a receiving endpoint: the destroy moves its QP to the error state to get the posted
// buffers back, and is -EBUSY until polls have reaped them.
int DestroyOncePolled(nic_endpoint *ep) {
  int rc = nic_verbs_endpoint_destroy(ep);
  for (int i = 0; rc == -EBUSY && i < 100; i++) {
    Drain();
    rc = nic_verbs_endpoint_destroy(ep);
  }
  return rc;
}

TEST(VerbsSoftPublic, ReceivesIntoDataplaneBuffersHeldOnesComeBackAtRelease) {
  nic_sga probe;
  nic_sga_init(&probe, 0); // opens the backend
  ASSERT_STREQ(Stats().backend, "verbs")
      << "the verbs plugin beside libnicmalloc.so (LD_LIBRARY_PATH) did not open";
  auto *pd = static_cast<ibv_pd *>(nic_verbs_get_pd());
  ASSERT_NE(pd, nullptr);
  SoftQp q(pd, 8);
  ibv_qp *qp = q.qp;
  nic_endpoint *ep = nic_verbs_endpoint_create(qp);
  ASSERT_NE(ep, nullptr);
  Rx rx;
  const nic_stats before = Stats();
  ASSERT_EQ(nic_endpoint_receive(ep, Rx::Fn, &rx), 0);
  EXPECT_EQ(soft_verbs_rq_posted(qp), 8u);
  EXPECT_EQ(nic_endpoint_receive(ep, Rx::Fn, &rx), 0) << "the same receiver again is no error";
  Send(ep, "hello over verbs");
  Drain();
  ASSERT_EQ(rx.msgs.size(), 1u);
  EXPECT_EQ(rx.msgs[0], "hello over verbs");
  EXPECT_EQ(soft_verbs_rq_posted(qp), 8u) << "the buffer went back when receive returned";
  // Hold every buffer: the endpoint stalls (once) and the next message waits in the sender.
  rx.hold = true;
  for (int i = 0; i < 8; i++)
    Send(ep, "held " + std::to_string(i));
  Drain();
  ASSERT_EQ(rx.kept.size(), 8u);
  nic_stats s = Stats();
  EXPECT_EQ(s.recv_held_buffers - before.recv_held_buffers, 8u);
  EXPECT_EQ(s.recv_stalls - before.recv_stalls, 1u);
  rx.hold = false;
  Send(ep, "after the release");
  Drain();
  EXPECT_EQ(rx.msgs.size(), 9u) << "arrived while every buffer was held";
  EXPECT_EQ(soft_verbs_sends_waiting(qp), 1u);
  EXPECT_EQ(nic_verbs_endpoint_destroy(ep), -EBUSY) << "buffers are held";
  EXPECT_EQ(rx.ends, 0);
  for (void *p : rx.kept)
    EXPECT_EQ(nic_release(p), 0);
  EXPECT_EQ(Stats().recv_held_buffers, before.recv_held_buffers);
  Drain();
  ASSERT_EQ(rx.msgs.size(), 10u);
  EXPECT_EQ(rx.msgs.back(), "after the release");
  EXPECT_EQ(rx.dataplane, 10);
  EXPECT_EQ(rx.aligned, 10);
  EXPECT_EQ(Sent, 10);
  s = Stats();
  EXPECT_EQ(s.recv_messages - before.recv_messages, 10u);
  EXPECT_EQ(s.recv_stalls - before.recv_stalls, 1u);
  // Receiving ends once, then the endpoint goes.
  EXPECT_EQ(DestroyOncePolled(ep), 0);
  EXPECT_EQ(rx.ends, 1);
}

// A queue pair the NIC moved to the error state (a protection error, say) flushes every work
// request: the posts waiting in it and those made after complete with an error, letting their
// buffers go, and once the held buffers are given back (their receives flush)
// nic_endpoint_status says receiving ended. Each completion in error is counted in
// verbs_completion_errors, and their status said once.
TEST(VerbsSoftPublic, AQueuePairInErrorEndsEveryPostWithAnErrorAndTheEndpointSaysSo) {
  nic_sga probe;
  nic_sga_init(&probe, 0);
  auto *pd = static_cast<ibv_pd *>(nic_verbs_get_pd());
  ASSERT_NE(pd, nullptr);
  SoftQp q(pd, 2);
  nic_endpoint *ep = nic_verbs_endpoint_create(q.qp);
  ASSERT_NE(ep, nullptr);
  Rx rx;
  rx.hold = true;
  ASSERT_EQ(nic_endpoint_receive(ep, Rx::Fn, &rx), 0);
  const nic_stats before = Stats();
  testing::internal::CaptureStderr();
  struct Ends {
    int ok = 0, failed = 0, status = 0;
  } ends;
  auto post = [&](const char *text) {
    const size_t len = strlen(text);
    char *p = static_cast<char *>(nic_malloc(len));
    memcpy(p, text, len);
    nic_sga sga;
    ASSERT_EQ(nic_sga_init(&sga, 0), 0);
    ASSERT_EQ(nic_sga_add(&sga, p, len), 0);
    auto done = [](void *arg, int status) {
      auto *e = static_cast<Ends *>(arg);
      (status ? e->failed : e->ok)++;
      if (status) e->status = status;
    };
    ASSERT_EQ(nic_sga_post(&sga, ep, done, &ends), 0);
    free(p); // deferred until the post completed
  };
  for (const char *text : {"one", "two", "three", "four"})
    post(text);
  Drain();
  ASSERT_EQ(rx.kept.size(), 2u);
  EXPECT_EQ(soft_verbs_sends_waiting(q.qp), 2u) << "every buffer held: two wait";
  EXPECT_EQ(Stats().inflight_posts - before.inflight_posts, 2u);
  soft_verbs_qp_fatal(q.qp);
  post("after the error");
  Drain();
  EXPECT_EQ(ends.ok, 2);
  EXPECT_EQ(ends.failed, 3) << "the waiting posts and the one after the error";
  EXPECT_EQ(ends.status, -ECANCELED);
  EXPECT_EQ(Stats().inflight_posts, before.inflight_posts) << "their buffers were let go";
  EXPECT_EQ(nic_endpoint_status(ep), 0) << "receiving has not heard of it yet";
  for (void *p : rx.kept)
    EXPECT_EQ(nic_release(p), 0);
  Drain();
  EXPECT_EQ(rx.ends, 1);
  EXPECT_LT(nic_endpoint_status(ep), 0) << "the endpoint says its queue pair broke";
  // Three sends and two receives flushed: counted, and said once.
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(Stats().verbs_completion_errors - before.verbs_completion_errors, 5u);
  size_t said = 0;
  for (size_t at = 0; (at = err.find("a work completion in error", at)) != std::string::npos; at++)
    said++;
  EXPECT_EQ(said, 1u) << err;
  EXPECT_EQ(DestroyOncePolled(ep), 0);
}

// Each receiving endpoint takes one block of 32 buffers of 64 KiB (2 MiB). A block across a pin
// step's end (4 MiB steps by default) got a registration of its own rather than its step's, was
// refused, and came back at the same place on every try: every endpoint after the first could
// never receive (-ENOMEM).
TEST(VerbsSoftPublic, EveryEndpointReceivesWithFullBlocks) {
  nic_sga probe;
  nic_sga_init(&probe, 0);
  auto *pd = static_cast<ibv_pd *>(nic_verbs_get_pd());
  ASSERT_NE(pd, nullptr);
  constexpr int kEndpoints = 6;
  std::vector<std::unique_ptr<SoftQp>> qps;
  std::vector<nic_endpoint *> eps;
  Rx rx;
  for (int i = 0; i < kEndpoints; i++) {
    qps.push_back(std::make_unique<SoftQp>(pd, 32));
    nic_endpoint *ep = nic_verbs_endpoint_create(qps.back()->qp);
    ASSERT_NE(ep, nullptr);
    eps.push_back(ep);
    EXPECT_EQ(nic_endpoint_receive(ep, Rx::Fn, &rx), 0) << "endpoint " << i;
    EXPECT_EQ(soft_verbs_rq_posted(qps.back()->qp), 32u) << "endpoint " << i;
  }
  for (size_t i = 0; i < eps.size(); i++)
    Send(eps[i], "to endpoint " + std::to_string(i));
  Drain();
  EXPECT_EQ(rx.msgs.size(), eps.size());
  EXPECT_EQ(rx.dataplane, static_cast<int>(eps.size()));
  for (nic_endpoint *ep : eps)
    EXPECT_EQ(DestroyOncePolled(ep), 0);
}

// A QP made with fewer send entries than the device takes: the endpoint's limit is the QP's, below
// the backend's caps.max_sge (the array's). A post over it is -E2BIG, as nicmalloc.h says, and
// leaves the array as it was.
TEST(VerbsSoftPublic, PostOverTheQueuePairsSendEntriesIsE2big) {
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  auto *pd = static_cast<ibv_pd *>(nic_verbs_get_pd());
  ASSERT_NE(pd, nullptr);
  SoftQp q(pd, 8, 2);
  nic_endpoint *ep = nic_verbs_endpoint_create(q.qp);
  ASSERT_NE(ep, nullptr);
  Rx rx;
  ASSERT_EQ(nic_endpoint_receive(ep, Rx::Fn, &rx), 0);
  ASSERT_GT(sga.max, 2u) << "the device takes more entries than this QP";
  std::vector<char *> blocks;
  for (int i = 0; i < 5; i++) {
    blocks.push_back(static_cast<char *>(nic_malloc(8192)));
    memset(blocks.back(), 'a' + i, 8192);
  }
  for (int i : {0, 2, 4}) // every other block: neighbours would coalesce into one entry
    ASSERT_EQ(nic_sga_add(&sga, blocks[i], 8192), 0);
  ASSERT_EQ(sga.count, 3u);
  int calls = 0;
  auto done = [](void *arg, int) { ++*static_cast<int *>(arg); };
  EXPECT_EQ(nic_sga_post(&sga, ep, done, &calls), -E2BIG);
  EXPECT_EQ(sga.count, 3u) << "nothing was posted";
  nic_sga_reset(&sga);
  ASSERT_EQ(nic_sga_add(&sga, blocks[0], 8192), 0);
  ASSERT_EQ(nic_sga_add(&sga, blocks[2], 8192), 0);
  ASSERT_EQ(nic_sga_post(&sga, ep, done, &calls), 0) << "as many as the QP takes";
  Drain();
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(rx.msgs.size(), 1u);
  EXPECT_EQ(rx.msgs[0], std::string(8192, 'a') + std::string(8192, 'c'));
  for (char *p : blocks)
    free(p);
  EXPECT_EQ(DestroyOncePolled(ep), 0);
}

// Memory the registration cache keeps is registered with local write where the process may write
// it, so that the pin takes each page as the process's own: an MR pinned for reading only keeps
// a page still shared copy-on-write (the zero page of memory never written, a page shared with a
// child of fork), and the process's next write moves to a copy the NIC never reads. What the
// device is handed is what a kernel would pin (ibv_reg_mr's flags).
TEST(VerbsSoftPublic, CachedMemoryIsPinnedForWritingWhereTheProcessMayWriteIt) {
  nic_sga probe;
  nic_sga_init(&probe, 0); // opens the backend
  ASSERT_STREQ(Stats().backend, "verbs");
  constexpr size_t kPage = 4096;
  // A page never written (the zero page), then a read-only one.
  char *pages = static_cast<char *>(
      mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(pages, MAP_FAILED);
  ASSERT_EQ(mprotect(pages + kPage, kPage, PROT_READ), 0);
  char *never_written = pages, *read_only = pages + kPage;
  nic_region_ref ref;
  ASSERT_EQ(nic_register(never_written, kPage, NIC_REG_LOCAL, &ref), 0);
  const int flags = soft_verbs_mr_access(ref.lkey);
  nic_unregister(&ref);
  EXPECT_EQ(flags, IBV_ACCESS_LOCAL_WRITE) << "ibv_reg_mr's flags";
  EXPECT_EQ(soft_verbs_mr_access(ref.lkey), flags) << "cached: the MR stays";
  // Read-only memory cannot be pinned for writing: registered for the request alone.
  ASSERT_EQ(nic_register(read_only, kPage, NIC_REG_LOCAL, &ref), 0);
  EXPECT_EQ(soft_verbs_mr_access(ref.lkey), 0);
  nic_unregister(&ref);
  EXPECT_EQ(soft_verbs_mr_access(ref.lkey), -1) << "a read-only pin was kept";
  munmap(pages, 2 * kPage);
}

} // namespace
