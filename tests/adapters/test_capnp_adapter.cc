// include/nicmalloc/capnp.h end to end, through the public API on the run's backend (sim,
// io_uring over loopback TCP, the software verbs device, DPDK net_ring: wire.h), once per fence
// mode (tests/adapters.cmake): round trips of nested structs, lists and blobs of 0 B to 4 MiB,
// referenced where they lie or copied; builders destroyed, blobs freed and segments reused right
// after post; a message over the entry limit, one to an endpoint of another backend, one of more
// segments than capnp reads, one with no root; the stream reader's in-place and gathered paths.
// Every case checks that no posted byte was written before the NIC read it: no mismatch under
// NICMALLOC_FENCE=detect, no writer held under protect, and the bytes the receiver got.
#include "adapters_test.capnp.h"
#include "wire.h"

#include <nicmalloc/capnp.h>

#include <capnp/serialize.h>
#include <kj/io.h>

#include <sys/mman.h>

#include <map>
#include <memory>
#include <vector>

using namespace adapters_test;
namespace ncp = nicmalloc::capnp;

namespace {

// What a message carries: all of it follows from these.
struct Spec {
  uint64_t seq = 0;
  size_t blob = 0;       // bytes of Outer.blob
  bool reference = true; // blob referenced where it lies (else copied into the message)
  int items = 3;         // Outer.items
  int blobs = 0;         // Outer.blobs, each of `each` bytes, referenced
  size_t each = 0;
};

std::string TextOf(uint64_t seq, size_t n) {
  std::string s(n, 'a');
  for (size_t i = 0; i < n; i++)
    s[i] = static_cast<char>('a' + PatternByte(seq, i) % 26);
  return s;
}

// A blob on pages of its own: NICMALLOC_FENCE=protect holds a writer of any page that is being
// sent, and these suites count such writers (none may be held).
void *PageBlob(size_t n) {
  return nic_aligned_alloc(4096, (std::max<size_t>(n, 1) + 4095) / 4096 * 4096);
}

// Fills msg after spec; the blobs it references are nic_malloc'd into *owned (the caller frees).
void Build(ncp::MessageBuilder &msg, const Spec &spec, std::vector<void *> *owned) {
  auto root = msg.initRoot<Outer>();
  root.setSeq(spec.seq);
  auto inner = root.initInner();
  inner.setId(static_cast<uint32_t>(spec.seq * 3));
  inner.setName("inner " + std::to_string(spec.seq));
  auto tags = inner.initTags(2);
  tags.set(0, "t0");
  tags.set(1, TextOf(spec.seq, 40));
  auto items = root.initItems(spec.items);
  for (int i = 0; i < spec.items; i++) {
    items[i].setId(static_cast<uint32_t>(i));
    items[i].setName(TextOf(spec.seq + i, 10 + i));
  }
  auto numbers = root.initNumbers(100);
  for (uint32_t i = 0; i < 100; i++)
    numbers.set(i, static_cast<uint32_t>(spec.seq) * 1000 + i);
  root.setText(TextOf(spec.seq, spec.blob % 3000));
  if (spec.reference) {
    void *b = PageBlob(spec.blob);
    FillPattern(b, spec.blob, spec.seq);
    owned->push_back(b);
    root.adoptBlob(msg.referenceData(b, spec.blob));
  } else {
    auto b = root.initBlob(static_cast<unsigned>(spec.blob));
    FillPattern(b.begin(), spec.blob, spec.seq);
  }
  auto blobs = root.initBlobs(static_cast<unsigned>(spec.blobs));
  for (int i = 0; i < spec.blobs; i++) {
    void *b = PageBlob(spec.each);
    FillPattern(b, spec.each, spec.seq * 1000 + static_cast<uint64_t>(i));
    owned->push_back(b);
    blobs.adopt(static_cast<unsigned>(i), msg.referenceData(b, spec.each));
  }
}

void Check(Outer::Reader r, const Spec &spec) {
  ASSERT_EQ(r.getSeq(), spec.seq);
  EXPECT_EQ(r.getInner().getId(), spec.seq * 3);
  EXPECT_EQ(std::string(r.getInner().getName().cStr()), "inner " + std::to_string(spec.seq));
  ASSERT_EQ(r.getInner().getTags().size(), 2u);
  EXPECT_EQ(std::string(r.getInner().getTags()[1].cStr()), TextOf(spec.seq, 40));
  ASSERT_EQ(r.getItems().size(), static_cast<unsigned>(spec.items));
  for (int i = 0; i < spec.items; i++)
    EXPECT_EQ(std::string(r.getItems()[i].getName().cStr()), TextOf(spec.seq + i, 10 + i));
  ASSERT_EQ(r.getNumbers().size(), 100u);
  EXPECT_EQ(r.getNumbers()[99], static_cast<uint32_t>(spec.seq) * 1000 + 99);
  EXPECT_EQ(std::string(r.getText().cStr()), TextOf(spec.seq, spec.blob % 3000));
  ASSERT_EQ(r.getBlob().size(), spec.blob);
  EXPECT_EQ(PatternMismatch(r.getBlob().begin(), spec.blob, spec.seq), spec.blob)
      << "message " << spec.seq << ": blob of " << spec.blob << " bytes";
  ASSERT_EQ(r.getBlobs().size(), static_cast<unsigned>(spec.blobs));
  for (int i = 0; i < spec.blobs; i++) {
    auto b = r.getBlobs()[i];
    ASSERT_EQ(b.size(), spec.each);
    EXPECT_EQ(PatternMismatch(b.begin(), spec.each, spec.seq * 1000 + static_cast<uint64_t>(i)),
              spec.each)
        << "message " << spec.seq << ": blob " << i;
  }
}

class CapnpAdapter : public testing::Test {
protected:
  void SetUp() override {
    before_ = Stats();
    MakeWire(0);
    if (!wire_->Unavailable().empty()) GTEST_SKIP() << wire_->Unavailable();
    ASSERT_NE(wire_->tx(), nullptr);
  }
  // The wire of the run; on verbs its QP takes verbs_send_sge send entries (0: the device's).
  void MakeWire(unsigned verbs_send_sge) {
    wire_.reset();
    wire_ = std::make_unique<Wire>(
        [this](void *data, size_t len) {
          int rc = reader_.feed(data, len, [this](std::unique_ptr<ncp::ReceivedMessage> m) {
            got_.push_back(std::move(m));
          });
          if (rc) feed_errors_++;
        },
        verbs_send_sge);
  }
  void TearDown() override {
    got_.clear();
    wire_.reset();
    nic_stats after = Stats();
    EXPECT_EQ(feed_errors_, 0);
    EXPECT_EQ(after.fence_mismatches, before_.fence_mismatches)
        << "NICMALLOC_FENCE=detect: posted memory was written before the NIC read it";
    EXPECT_EQ(after.fence_held_writes, before_.fence_held_writes)
        << "NICMALLOC_FENCE=protect: a writer of posted memory had to be held";
    EXPECT_EQ(after.sga_errors, before_.sga_errors) << "the adapter made a call nicmalloc refused";
  }
  // Posts msg; the completion counts in done_.
  void Post(ncp::MessageBuilder &msg, unsigned max_entries = 0) {
    ASSERT_EQ(ncp::post(wire_->tx(), msg, Done::Fn, &done_, wire_->entries(max_entries)), 0);
    posted_++;
  }
  // Waits for the messages, checks them against specs by seq and drops them, then waits for
  // every completion: on dpdk a message read in place holds the sender's memory, whose post
  // completes only once the message is gone.
  void ReceiveAndCheck(const std::vector<Spec> &specs) {
    ASSERT_TRUE(wire_->PollUntil([&] { return got_.size() >= specs.size(); }))
        << got_.size() << " of " << specs.size() << " messages received, " << done_.calls.load()
        << " of " << posted_ << " posts done, receiving " << wire_->status();
    ASSERT_EQ(got_.size(), specs.size());
    for (size_t i = 0; i < specs.size(); i++)
      Check(got_[i]->getRoot<Outer>(), specs[i]);
    got_.clear();
    ASSERT_TRUE(wire_->PollUntil([&] { return done_.calls.load() == posted_; }))
        << done_.calls.load() << " of " << posted_ << " posts done";
    EXPECT_EQ(done_.failed.load(), 0);
  }

  nic_stats before_;
  std::unique_ptr<Wire> wire_;
  ncp::StreamReader reader_;
  std::vector<std::unique_ptr<ncp::ReceivedMessage>> got_;
  Done done_;
  int posted_ = 0, feed_errors_ = 0;
};

TEST_F(CapnpAdapter, BlobsOfZeroBytesToFourMiBRoundTrip) {
  const size_t sizes[] = {0, 1, 7, 8, 511, 512, 4096, 65537, 1 << 20, 4 << 20};
  std::vector<Spec> specs;
  std::vector<void *> owned;
  uint64_t seq = 0;
  for (size_t n : sizes)
    for (bool reference : {true, false}) {
      Spec s;
      s.seq = seq++;
      s.blob = n;
      s.reference = reference;
      specs.push_back(s);
      ncp::MessageBuilder msg;
      Build(msg, s, &owned);
      if (reference && n >= 512) {
        // Sent from where it lies: the blob is a segment of its own, not a copy.
        bool found = false;
        for (auto seg : msg.getSegmentsForOutput())
          found |= static_cast<const void *>(seg.begin()) == owned.back();
        EXPECT_TRUE(found) << n << " bytes";
      }
      for (auto seg : msg.getSegmentsForOutput())
        if (seg.size() > 0) {
          EXPECT_TRUE(nic_is_dataplane(seg.begin())) << "segments are dataplane memory";
        }
      Post(msg);
    }
  ReceiveAndCheck(specs);
  for (void *p : owned)
    free(p);
}

// The builder and its blobs go right after post, and new blocks are written at once: nothing
// that is sent may change (nicmalloc defers the frees until the posts complete).
TEST_F(CapnpAdapter, DestroyedAndFreedRightAfterPost) {
  std::vector<Spec> specs;
  for (uint64_t seq = 0; seq < 8; seq++) {
    Spec s;
    s.seq = seq;
    s.blob = 4096 << seq;
    s.blobs = 3;
    s.each = 6000;
    specs.push_back(s);
    std::vector<void *> owned;
    {
      ncp::MessageBuilder msg;
      Build(msg, s, &owned);
      Post(msg);
    }
    for (void *p : owned)
      free(p);
    // New blocks of the same sizes, written: were the freed ones reused, this would show.
    for (int i = 0; i < 4; i++) {
      void *p = PageBlob(s.blob);
      memset(p, 0xEE, s.blob);
      free(p);
    }
  }
  ReceiveAndCheck(specs);
}

// A pool hands a segment to the next builder only once the posts that sent it are done; until
// then the next builder gets fresh segments, and what was posted stays as it was.
TEST_F(CapnpAdapter, SegmentsReusedRightAfterPostAreNotRewrittenWhileSent) {
  ncp::SegmentPool pool;
  std::vector<Spec> specs;
  std::vector<void *> owned;
  std::vector<const void *> sent_first; // each message's first segment
  for (uint64_t seq = 0; seq < 6; seq++) {
    Spec s;
    s.seq = seq;
    s.blob = 20000 + seq;
    s.reference = false; // in the builder's segments, which the pool reuses
    s.items = 50;
    specs.push_back(s);
    ncp::MessageBuilder msg(&pool, 512);
    Build(msg, s, &owned);
    const void *first = msg.getSegmentsForOutput()[0].begin();
    for (const void *earlier : sent_first)
      EXPECT_NE(first, earlier) << "message " << seq
                                << " was built in a segment still being sent (no nic_poll ran)";
    sent_first.push_back(first);
    Post(msg);
  }
  EXPECT_EQ(pool.reused(), 0u) << "no post has completed yet: nothing may be reused";
  ReceiveAndCheck(specs);
  // Every post is done: now the pool reuses.
  {
    ncp::MessageBuilder msg(&pool, 512);
    Spec s;
    s.seq = 100;
    Build(msg, s, &owned);
    EXPECT_GT(pool.reused(), 0u) << "segments whose posts completed are reused";
  }
  for (void *p : owned)
    free(p);
}

// More pieces than the entry limit: sent as several posts in a row, joined by the reader. On
// verbs the QP takes 2 send entries, fewer than its device (8): nic_endpoint_limits says so,
// and the parts are cut to it, with no post refused.
TEST_F(CapnpAdapter, MessageOverTheEntryLimitArrivesWhole) {
  const bool narrow = wire_->backend() == "verbs";
  if (narrow) MakeWire(2);
  ASSERT_NE(wire_->tx(), nullptr);
  if (narrow) {
    unsigned entries = 0;
    ASSERT_EQ(nic_endpoint_limits(wire_->tx(), &entries, nullptr), 0);
    EXPECT_EQ(entries, 2u) << "the QP's own max_send_sge";
  }
  const uint64_t refused = Stats().sga_errors;
  std::vector<Spec> specs;
  std::vector<void *> owned;
  for (unsigned max_entries : {0u, 4u}) {
    Spec s;
    s.seq = specs.size();
    s.blob = 100000;
    s.blobs =
        100; // 100 segments of their own, each too big to copy (the copy rule stops at 64 KiB)
    s.each = 40000;
    specs.push_back(s);
    ncp::MessageBuilder msg;
    Build(msg, s, &owned);
    EXPECT_GT(msg.getSegmentsForOutput().size(), static_cast<size_t>(NIC_SGA_CAPACITY));
    Post(msg, max_entries);
  }
  ReceiveAndCheck(specs);
  EXPECT_EQ(done_.calls.load(), 2) << "one done() per message, whatever its parts";
  // max_entries 4 is held to the QP's 2 as well.
  EXPECT_EQ(Stats().sga_errors - refused, 0u) << "no part was refused as too many entries";
  for (void *p : owned)
    free(p);
}

// A message to an endpoint of another backend than the default one (a sim endpoint beside the
// run's uring, verbs or dpdk): the array takes no more entries than that endpoint's backend does
// (sim: 32, uring and dpdk: 64).
TEST_F(CapnpAdapter, MessageToAnEndpointOfAnotherBackendArrivesWhole) {
  // Fed on the sim engine's thread: read once `arrived` says so.
  ncp::StreamReader reader;
  std::vector<std::unique_ptr<ncp::ReceivedMessage>> got;
  std::atomic<int> arrived{0}, errors{0};
  auto receive = [&](void *data, size_t len) {
    if (!data) return;
    errors += reader.feed(data, len, [&](std::unique_ptr<ncp::ReceivedMessage> m) {
      got.push_back(std::move(m));
      arrived++;
    }) != 0;
  };
  using Receive = decltype(receive);
  nic_endpoint *sim = nic_sim_endpoint_create(
      [](void *arg, void *data, size_t len) { (*static_cast<Receive *>(arg))(data, len); },
      &receive, 0);
  ASSERT_NE(sim, nullptr) << strerror(errno);
  unsigned entries = 0;
  ASSERT_EQ(nic_endpoint_limits(sim, &entries, nullptr), 0);
  nic_sga probe;
  ASSERT_EQ(nic_sga_init(&probe, 0), 0);
  EXPECT_EQ(entries, std::min(32u, probe.max)) << "the sim's limit, within the default backend's";
  Spec s;
  s.seq = 41;
  s.blobs = 40; // 41 segments and more, each too big to copy
  s.each = 1024;
  std::vector<void *> owned;
  {
    ncp::MessageBuilder msg;
    Build(msg, s, &owned);
    EXPECT_GT(msg.getSegmentsForOutput().size(), 32u);
    ASSERT_EQ(ncp::post(sim, msg, Done::Fn, &done_), 0);
  }
  ASSERT_TRUE(wire_->PollUntil([&] { return arrived.load() == 1 && done_.calls.load() == 1; }))
      << arrived.load() << " messages received, " << done_.calls.load() << " posts done";
  Check(got[0]->getRoot<Outer>(), s);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(done_.failed.load(), 0);
  got.clear();
  for (auto end = std::chrono::steady_clock::now() + Wire::kLimit;
       nic_sim_endpoint_destroy(sim) == -EBUSY && std::chrono::steady_clock::now() < end;)
    nic_wait(10);
  for (void *p : owned)
    free(p);
}

// Whether capnp's own stream reader (capnp::readMessage's) takes msg.
bool CapnpReads(ncp::MessageBuilder &msg) {
  auto flat = capnp::messageToFlatArray(msg);
  kj::ArrayInputStream in(flat.asBytes());
  try {
    capnp::InputStreamMessageReader reader(in);
    return reader.getRoot<Outer>().getBlobs().size() > 0;
  } catch (const kj::Exception &) {
    return false;
  }
}

// capnp's readers refuse a message of 512 segments or more: post refuses it too, sending
// nothing, and the stream goes on; 511 segments arrive.
TEST_F(CapnpAdapter, MessageOfMoreSegmentsThanCapnpReadsIsRefused) {
  std::vector<void *> owned;
  Spec big;
  big.seq = 600;
  big.blobs = 600;
  big.each = 1024;
  {
    ncp::MessageBuilder msg;
    Build(msg, big, &owned);
    EXPECT_GE(msg.getSegmentsForOutput().size(), 512u);
    EXPECT_FALSE(CapnpReads(msg));
    EXPECT_EQ(ncp::post(wire_->tx(), msg, Done::Fn, &done_, wire_->entries()), -EMSGSIZE);
  }
  // 511 segments: the blobs' own, and the root's (one or more, as capnp lays it out).
  Spec edge;
  edge.seq = 511;
  edge.each = 1024;
  for (int blobs = 510;;) {
    ncp::MessageBuilder msg;
    edge.blobs = blobs;
    std::vector<void *> mine;
    Build(msg, edge, &mine);
    owned.insert(owned.end(), mine.begin(), mine.end());
    const int over = static_cast<int>(msg.getSegmentsForOutput().size()) - 511;
    if (over == 0) {
      EXPECT_TRUE(CapnpReads(msg));
      Post(msg);
      break;
    }
    ASSERT_LT(blobs - over, blobs) << "capnp lays out fewer segments than blobs";
    blobs -= over;
  }
  Spec after;
  after.seq = 1;
  {
    ncp::MessageBuilder msg;
    Build(msg, after, &owned);
    Post(msg);
  }
  ReceiveAndCheck({edge, after});
  EXPECT_EQ(done_.calls.load(), 2) << "the refused post ran no done()";
  for (void *p : owned)
    free(p);
}

// A builder whose root was never set has no segment: there is no message to frame, and capnp's own
// writers refuse it ("Tried to serialize uninitialized message"). post refuses it too, ours or any
// capnp::MessageBuilder, with nothing sent and no done(); the next message arrives alone.
TEST_F(CapnpAdapter, MessageWithNoRootIsRefused) {
  {
    ncp::MessageBuilder ours;
    capnp::MallocMessageBuilder theirs;
    for (capnp::MessageBuilder *msg : {static_cast<capnp::MessageBuilder *>(&ours),
                                       static_cast<capnp::MessageBuilder *>(&theirs)}) {
      EXPECT_ANY_THROW(capnp::messageToFlatArray(*msg));
      EXPECT_EQ(ncp::post(wire_->tx(), *msg, Done::Fn, &done_, wire_->entries()), -EINVAL);
    }
  }
  std::vector<void *> owned;
  Spec after;
  after.seq = 7;
  {
    ncp::MessageBuilder msg;
    Build(msg, after, &owned);
    Post(msg);
  }
  ReceiveAndCheck({after});
  EXPECT_EQ(done_.calls.load(), 1) << "the refused posts ran no done()";
  for (void *p : owned)
    free(p);
}

// What one post to the run's endpoint may carry (nic_endpoint_limits), which the adapters post
// within: the entries of its backend, the default one here; on verbs no more bytes than the
// receive buffers' 64 KiB, on io_uring than one send takes, on dpdk than a packet's length.
TEST_F(CapnpAdapter, EndpointLimitsAreItsBackends) {
  unsigned entries = 0;
  size_t bytes = 0;
  ASSERT_EQ(nic_endpoint_limits(wire_->tx(), &entries, &bytes), 0);
  nic_sga probe;
  ASSERT_EQ(nic_sga_init(&probe, 0), 0);
  EXPECT_EQ(entries, probe.max);
  const std::string kind = wire_->backend();
  EXPECT_EQ(bytes, kind == "verbs"   ? size_t{64} << 10
                   : kind == "uring" ? size_t{0x7ffff000}
                   : kind == "dpdk"  ? size_t{UINT32_MAX}
                                     : SIZE_MAX);
  EXPECT_EQ(nic_endpoint_limits(wire_->tx(), nullptr, nullptr), 0);
  EXPECT_EQ(nic_endpoint_limits(nullptr, &entries, &bytes), -EINVAL);
}

// The reader alone, fed by hand.
kj::Array<capnp::word> Flat(const Spec &s, std::vector<void *> *owned) {
  ncp::MessageBuilder msg;
  Build(msg, s, owned);
  return capnp::messageToFlatArray(msg);
}

TEST(CapnpStreamReader, MessageWholeInADataplaneBufferIsReadInPlaceAndHeld) {
  std::vector<void *> owned;
  Spec s;
  s.blob = 3000;
  auto flat = Flat(s, &owned);
  const size_t n = flat.asBytes().size();
  char *buf = static_cast<char *>(nic_malloc(2 * n));
  memcpy(buf, flat.begin(), n);
  memcpy(buf + n, flat.begin(), n);
  const uint64_t holds = Stats().holds;
  ncp::StreamReader rd;
  std::vector<std::unique_ptr<ncp::ReceivedMessage>> got;
  ASSERT_EQ(rd.feed(buf, 2 * n,
                    [&](std::unique_ptr<ncp::ReceivedMessage> m) { got.push_back(std::move(m)); }),
            0);
  ASSERT_EQ(got.size(), 2u);
  for (auto &m : got) {
    EXPECT_TRUE(m->in_place());
    Check(m->getRoot<Outer>(), s);
  }
  EXPECT_EQ(got[0]->getRoot<Outer>().getBlob().begin() >= reinterpret_cast<unsigned char *>(buf),
            true);
  EXPECT_EQ(Stats().holds, holds + 2) << "each message holds its buffer";
  got.clear();
  EXPECT_EQ(Stats().holds, holds);
  free(buf);
  for (void *p : owned)
    free(p);
}

TEST(CapnpStreamReader, MessageSplitAnywhereIsGathered) {
  std::vector<void *> owned;
  Spec a, b;
  a.seq = 1, a.blob = 5000, b.seq = 2, b.blob = 70000;
  auto fa = Flat(a, &owned), fb = Flat(b, &owned);
  std::string stream(fa.asChars().begin(), fa.asChars().size());
  stream.append(fb.asChars().begin(), fb.asChars().size());
  // Cut at every split point in the first 64 bytes (inside the table), then in pieces of 1000.
  for (size_t cut = 1; cut < 64; cut++) {
    ncp::StreamReader rd;
    std::vector<std::unique_ptr<ncp::ReceivedMessage>> got;
    auto keep = [&](std::unique_ptr<ncp::ReceivedMessage> m) { got.push_back(std::move(m)); };
    for (size_t off = 0; off < stream.size();) {
      size_t len = std::min(off == 0 ? cut : size_t{1000}, stream.size() - off);
      ASSERT_EQ(rd.feed(stream.data() + off, len, keep), 0);
      off += len;
    }
    ASSERT_EQ(got.size(), 2u) << "cut at " << cut;
    EXPECT_FALSE(got[0]->in_place());
    EXPECT_TRUE(nic_is_dataplane(got[0]->getRoot<Outer>().getBlob().begin()))
        << "gathered into dataplane memory";
    Check(got[0]->getRoot<Outer>(), a);
    Check(got[1]->getRoot<Outer>(), b);
    EXPECT_EQ(rd.pending(), 0u);
    EXPECT_EQ(rd.feed(nullptr, 0, keep), 0) << "the stream ended between messages";
  }
  for (void *p : owned)
    free(p);
}

// Bytes from outside nicmalloc's memory (a copy the program made, a file mapped) are read from
// a gathered copy, without a nic_hold that would fail and be reported.
TEST(CapnpStreamReader, BytesFromOutsideNicmallocAreGatheredWithoutHolding) {
  std::vector<void *> owned;
  Spec s;
  s.blob = 3000;
  auto flat = Flat(s, &owned);
  const size_t n = flat.asBytes().size();
  void *m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  memcpy(m, flat.begin(), n);
  const nic_stats before = Stats();
  ncp::StreamReader rd;
  std::vector<std::unique_ptr<ncp::ReceivedMessage>> got;
  ASSERT_EQ(
      rd.feed(m, n,
              [&](std::unique_ptr<ncp::ReceivedMessage> msg) { got.push_back(std::move(msg)); }),
      0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0]->in_place());
  Check(got[0]->getRoot<Outer>(), s);
  EXPECT_EQ(Stats().hold_errors, before.hold_errors) << "no nic_hold of memory nicmalloc has not";
  got.clear();
  munmap(m, n);
  for (void *p : owned)
    free(p);
}

TEST(CapnpStreamReader, GarbageAndCutShortStreamsAreErrors) {
  auto ignore = [](std::unique_ptr<ncp::ReceivedMessage>) { ADD_FAILURE() << "no message"; };
  ncp::StreamReader rd;
  const uint32_t bad[2] = {100000, 1};
  EXPECT_EQ(rd.feed(bad, sizeof bad, ignore), -EBADMSG);
  EXPECT_EQ(rd.feed(bad, sizeof bad, ignore), -EBADMSG) << "the stream stays refused";
  // capnp::InputStreamMessageReader takes up to 511 segments: the table counts them less one.
  ncp::StreamReader most, over;
  const uint32_t segments511[2] = {510, 1}, segments512[2] = {511, 1};
  EXPECT_EQ(most.feed(segments511, sizeof segments511, ignore), 0) << "the table goes on";
  EXPECT_EQ(over.feed(segments512, sizeof segments512, ignore), -EBADMSG);

  ncp::StreamReader small(capnp::ReaderOptions(), 1024);
  const uint32_t big[2] = {0, 1000}; // one segment of 8000 bytes
  EXPECT_EQ(small.feed(big, sizeof big, ignore), -EMSGSIZE);

  ncp::StreamReader cut;
  const uint32_t part[4] = {0, 10, 0, 0}; // a message of 88 bytes, 16 of them here
  EXPECT_EQ(cut.feed(part, sizeof part, ignore), 0);
  EXPECT_EQ(cut.pending(), sizeof part);
  EXPECT_EQ(cut.feed(nullptr, 0, ignore), -EPIPE);
}

} // namespace
