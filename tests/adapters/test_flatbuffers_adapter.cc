// include/nicmalloc/flatbuffers.h end to end, through the public API on the run's backend (sim,
// io_uring over loopback TCP, the software verbs device, DPDK net_ring: wire.h), once per fence
// mode (tests/adapters.cmake): round trips of nested tables, lists and blobs of 0 B to 4 MiB,
// verified and read in place or gathered; builders cleared and reused, or destroyed, right after
// post; a buffer over more pin steps than the entry limit. Every case checks that no posted byte
// was written before the NIC read it: no mismatch under NICMALLOC_FENCE=detect, no writer held
// under protect, and the bytes the receiver got. A FlatBuffer is one contiguous buffer, an entry
// per pin step it covers.
#include "adapters_test_generated.h"
#include "wire.h"

#include <nicmalloc/flatbuffers.h>

#include <algorithm>
#include <memory>
#include <vector>

using namespace adapters_test;
namespace nfb = nicmalloc::flatbuffers;
namespace fbs = adapters_test::fb;

namespace {

std::string TextOf(uint64_t seq, size_t n) {
  std::string s(n, 'a');
  for (size_t i = 0; i < n; i++)
    s[i] = static_cast<char>('a' + PatternByte(seq, i) % 26);
  return s;
}

// Builds message seq with a blob of `blob` bytes, written in place (CreateUninitializedVector)
// or copied in (CreateVector), and finishes it size-prefixed.
void Build(flatbuffers::FlatBufferBuilder &fbb, uint64_t seq, size_t blob, bool in_place) {
  std::vector<flatbuffers::Offset<fbs::Inner>> items;
  for (int i = 0; i < 3; i++)
    items.push_back(fbs::CreateInner(fbb, static_cast<uint32_t>(i),
                                     fbb.CreateString(TextOf(seq + static_cast<uint64_t>(i), 10))));
  auto items_v = fbb.CreateVector(items);
  std::vector<uint32_t> numbers(100);
  for (uint32_t i = 0; i < 100; i++)
    numbers[i] = static_cast<uint32_t>(seq) * 1000 + i;
  auto numbers_v = fbb.CreateVector(numbers);
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> blob_v;
  if (in_place) {
    uint8_t *p = nullptr;
    blob_v = fbb.CreateUninitializedVector(blob, &p);
    FillPattern(p, blob, seq);
  } else {
    std::vector<uint8_t> b(blob);
    FillPattern(b.data(), blob, seq);
    blob_v = fbb.CreateVector(b);
  }
  auto text = fbb.CreateString(TextOf(seq, blob % 3000));
  std::vector<flatbuffers::Offset<flatbuffers::String>> tags = {fbb.CreateString("t0"),
                                                                fbb.CreateString(TextOf(seq, 40))};
  auto inner =
      fbs::CreateInner(fbb, static_cast<uint32_t>(seq * 3),
                       fbb.CreateString("inner " + std::to_string(seq)), fbb.CreateVector(tags));
  fbb.FinishSizePrefixed(fbs::CreateOuter(fbb, seq, inner, items_v, numbers_v, blob_v, text));
}

void Check(const fbs::Outer *r, uint64_t seq, size_t blob) {
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->seq(), seq);
  EXPECT_EQ(r->inner()->id(), seq * 3);
  EXPECT_EQ(r->inner()->name()->str(), "inner " + std::to_string(seq));
  ASSERT_EQ(r->inner()->tags()->size(), 2u);
  EXPECT_EQ(r->inner()->tags()->Get(1)->str(), TextOf(seq, 40));
  ASSERT_EQ(r->items()->size(), 3u);
  for (uint32_t i = 0; i < 3; i++)
    EXPECT_EQ(r->items()->Get(i)->name()->str(), TextOf(seq + i, 10));
  ASSERT_EQ(r->numbers()->size(), 100u);
  EXPECT_EQ(r->numbers()->Get(99), static_cast<uint32_t>(seq) * 1000 + 99);
  EXPECT_EQ(r->text()->str(), TextOf(seq, blob % 3000));
  ASSERT_EQ(r->blob()->size(), blob);
  EXPECT_EQ(PatternMismatch(r->blob()->data(), blob, seq), blob)
      << "message " << seq << ": blob of " << blob << " bytes";
}

class FlatbuffersAdapter : public testing::Test {
protected:
  void SetUp() override {
    before_ = Stats();
    wire_ = std::make_unique<Wire>([this](void *data, size_t len) {
      int rc = reader_.feed(data, len, [this](nfb::ReceivedBuffer b) {
        if (!b.Verify<fbs::Outer>()) bad_++;
        got_.push_back(std::make_unique<nfb::ReceivedBuffer>(std::move(b)));
      });
      if (rc) feed_errors_++;
    });
    if (!wire_->Unavailable().empty()) GTEST_SKIP() << wire_->Unavailable();
    ASSERT_NE(wire_->tx(), nullptr);
  }
  void TearDown() override {
    got_.clear();
    wire_.reset();
    nic_stats after = Stats();
    EXPECT_EQ(feed_errors_, 0);
    EXPECT_EQ(bad_, 0) << "buffers that failed verification";
    EXPECT_EQ(after.fence_mismatches, before_.fence_mismatches)
        << "NICMALLOC_FENCE=detect: posted memory was written before the NIC read it";
    EXPECT_EQ(after.fence_held_writes, before_.fence_held_writes)
        << "NICMALLOC_FENCE=protect: a writer of posted memory had to be held";
    EXPECT_EQ(after.sga_errors, before_.sga_errors) << "the adapter made a call nicmalloc refused";
  }
  void Post(flatbuffers::FlatBufferBuilder &fbb, unsigned max_entries = 0) {
    ASSERT_EQ(nfb::post(wire_->tx(), fbb, Done::Fn, &done_, wire_->entries(max_entries)), 0);
    posted_++;
  }
  // Waits for the messages (seq, blob bytes), checks and drops them, then waits for every
  // completion: on dpdk a buffer read in place holds the sender's memory, whose post completes
  // only once the buffer is gone.
  void ReceiveAndCheck(const std::vector<std::pair<uint64_t, size_t>> &want) {
    ASSERT_TRUE(wire_->PollUntil([&] { return got_.size() >= want.size(); }))
        << got_.size() << " of " << want.size() << " messages received, " << done_.calls.load()
        << " of " << posted_ << " posts done, receiving " << wire_->status();
    ASSERT_EQ(got_.size(), want.size());
    for (size_t i = 0; i < want.size(); i++)
      Check(got_[i]->GetRoot<fbs::Outer>(), want[i].first, want[i].second);
    got_.clear();
    ASSERT_TRUE(wire_->PollUntil([&] { return done_.calls.load() == posted_; }))
        << done_.calls.load() << " of " << posted_ << " posts done";
    EXPECT_EQ(done_.failed.load(), 0);
  }

  nic_stats before_;
  std::unique_ptr<Wire> wire_;
  nfb::StreamReader reader_;
  std::vector<std::unique_ptr<nfb::ReceivedBuffer>> got_;
  Done done_;
  int posted_ = 0, feed_errors_ = 0, bad_ = 0;
};

TEST_F(FlatbuffersAdapter, BlobsOfZeroBytesToFourMiBRoundTrip) {
  const size_t sizes[] = {0, 1, 7, 8, 511, 512, 4096, 65537, 1 << 20, 4 << 20};
  std::vector<std::pair<uint64_t, size_t>> want;
  uint64_t seq = 0;
  for (size_t n : sizes)
    for (bool in_place : {true, false}) {
      nfb::Builder fbb;
      Build(fbb, seq, n, in_place);
      EXPECT_TRUE(nic_is_dataplane(fbb.GetBufferPointer())) << "the buffer is dataplane memory";
      Post(fbb);
      EXPECT_EQ(fbb.GetSize(), 0u) << "post takes the buffer";
      want.emplace_back(seq++, n);
    }
  ReceiveAndCheck(want);
}

// A builder with content but not finished is refused and left as it was: FlatBufferBuilder's own
// check is an assertion, compiled out in release builds, after which its partial bytes (no root
// offset) would have been posted. Finished afterwards, the same builder's message arrives whole.
TEST_F(FlatbuffersAdapter, AnUnfinishedBuilderIsRefusedAndKeepsItsContent) {
  nfb::Builder fbb;
  EXPECT_EQ(nfb::post(wire_->tx(), fbb, Done::Fn, &done_), -EINVAL) << "an empty builder";
  auto name = fbb.CreateString("inner 7");
  const std::vector<uint8_t> before(fbb.GetCurrentBufferPointer(),
                                    fbb.GetCurrentBufferPointer() + fbb.GetSize());
  ASSERT_FALSE(before.empty());
  EXPECT_EQ(nfb::post(wire_->tx(), fbb, Done::Fn, &done_), -EINVAL) << "a builder not finished";
  ASSERT_EQ(fbb.GetSize(), before.size()) << "the refused builder keeps its content";
  EXPECT_TRUE(std::equal(before.begin(), before.end(), fbb.GetCurrentBufferPointer()));
  fbb.FinishSizePrefixed(fbs::CreateOuter(fbb, 7, fbs::CreateInner(fbb, 21, name)));
  Post(fbb);
  ASSERT_TRUE(wire_->PollUntil([&] { return got_.size() == 1; })) << "the finished message";
  const fbs::Outer *r = got_[0]->GetRoot<fbs::Outer>();
  EXPECT_EQ(r->seq(), 7u);
  EXPECT_EQ(r->inner()->id(), 21u);
  EXPECT_EQ(r->inner()->name()->str(), "inner 7");
  got_.clear();
  ASSERT_TRUE(wire_->PollUntil([&] { return done_.calls.load() == posted_; }));
  EXPECT_EQ(done_.calls.load(), 1) << "the refused posts ran no done";
}

// One builder, cleared and reused right after each post, before any completion ran: the next
// message is built in another buffer, and each arrives as it was posted.
TEST_F(FlatbuffersAdapter, BuilderReusedRightAfterPostDoesNotRewriteWhatIsSent) {
  nfb::Allocator alloc;
  std::vector<std::pair<uint64_t, size_t>> want;
  {
    nfb::Builder fbb(1 << 16, &alloc);
    std::vector<std::pair<const uint8_t *, size_t>> sent;
    for (uint64_t seq = 0; seq < 8; seq++) {
      Build(fbb, seq, 20000 + seq, true);
      const uint8_t *p = fbb.GetBufferPointer();
      for (auto &s : sent)
        EXPECT_FALSE(p + fbb.GetSize() > s.first && p < s.first + s.second)
            << "message " << seq << " was built over a buffer still being sent (no nic_poll ran)";
      sent.emplace_back(p, fbb.GetSize());
      Post(fbb);
      fbb.Clear();
      want.emplace_back(seq, 20000 + seq);
    }
    EXPECT_EQ(alloc.reused(), 0u) << "no post has completed yet: no buffer may be reused";
    ReceiveAndCheck(want);
    Build(fbb, 100, 100, true);
    EXPECT_GT(alloc.reused(), 0u) << "buffers whose posts completed are reused";
  }
  got_.clear();
}

// Destroyed right after post: the buffer stays until the completion.
TEST_F(FlatbuffersAdapter, BuilderDestroyedRightAfterPost) {
  std::vector<std::pair<uint64_t, size_t>> want;
  for (uint64_t seq = 0; seq < 6; seq++) {
    {
      nfb::Builder fbb;
      Build(fbb, seq, 3000 << seq, seq % 2);
      Post(fbb);
    }
    want.emplace_back(seq, 3000 << seq);
  }
  ReceiveAndCheck(want);
}

// The buffer of a builder is an entry per pin step (4 MiB) it covers: one of more steps than the
// entry limit is posted in parts (one entry each on dpdk), the parts joined by the reader.
TEST_F(FlatbuffersAdapter, BufferOverTheEntryLimitTimesThePinStepArrivesWhole) {
  const size_t blob = 10 << 20; // 3 steps at least: over a limit of 2
  {
    nfb::Builder fbb(blob + (1 << 20));
    Build(fbb, 1, blob, true);
    ASSERT_TRUE(nic_is_dataplane(fbb.GetBufferPointer()));
    ASSERT_NO_FATAL_FAILURE(Post(fbb, 2));
  }
  ReceiveAndCheck({{1, blob}});
  EXPECT_EQ(done_.calls.load(), 1) << "one done() for the buffer, whatever its parts";
}

// On dpdk, a buffer posted while the port's tx queue and the backlog behind it are full, on
// verbs one posted while the QP's send CQ has no room (the soft device's 256 completions), is
// refused with -EAGAIN before any of it is sent: it stays in the builder, the stream stays whole,
// and once polls made room the same builder posts it, after those before it. The builder gave
// its buffer up before the first part was taken, so a refused buffer was lost with it.
TEST(FlatbuffersAdapterRoom, ABufferRefusedForWantOfRoomStaysInTheBuilder) {
  nfb::StreamReader reader;
  std::vector<uint64_t> seqs;
  int bad = 0, feed_errors = 0;
  Wire wire([&](void *data, size_t len) { // checked and dropped at once: nothing stays held
    feed_errors += reader.feed(data, len, [&](nfb::ReceivedBuffer b) {
      if (b.Verify<fbs::Outer>())
        seqs.push_back(b.GetRoot<fbs::Outer>()->seq());
      else
        bad++;
    }) != 0;
  });
  if (!wire.Unavailable().empty()) GTEST_SKIP() << wire.Unavailable();
  if (wire.backend() != "dpdk" && wire.backend() != "verbs")
    GTEST_SKIP() << "only a dpdk port or a verbs QP refuses a post for want of room";
  Done done;
  nfb::Builder fbb;
  int rc = 0;
  uint64_t taken = 0;
  for (; taken < 3 * NIC_DPDK_BACKLOG; taken++) { // no poll: the ring and the backlog fill
    Build(fbb, taken, 100, true);
    if ((rc = nfb::post(wire.tx(), fbb, Done::Fn, &done, 1)) != 0) break;
    fbb.Clear();
  }
  ASSERT_EQ(rc, -EAGAIN);
  ASSERT_GT(fbb.GetSize(), 0u) << "the refused buffer left the builder";
  EXPECT_EQ(nicmalloc::stream_error(wire.tx()), 0) << "nothing of it was sent: the stream is whole";
  ASSERT_TRUE(wire.PollUntil([&] { return seqs.size() == taken; })) << seqs.size();
  ASSERT_EQ(nfb::post(wire.tx(), fbb, Done::Fn, &done, 1), 0);
  ASSERT_TRUE(wire.PollUntil([&] { return seqs.size() == taken + 1; })) << seqs.size();
  ASSERT_TRUE(wire.PollUntil([&] { return done.calls.load() == static_cast<int>(taken + 1); }));
  size_t out_of_order = 0;
  for (uint64_t i = 0; i <= taken; i++)
    out_of_order += seqs[i] != i;
  EXPECT_EQ(out_of_order, 0u);
  EXPECT_EQ(done.failed.load(), 0);
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(feed_errors, 0);
}

// The same with the endpoint's own entry limit, in a chunk large enough for a dataplane buffer of
// 200 MiB, over 32 steps: ctest runs it alone (flatbuffers_adapter_large), on sim.
class FlatbuffersAdapterLarge : public FlatbuffersAdapter {};
TEST_F(FlatbuffersAdapterLarge, TwoHundredMiBBufferArrivesWhole) {
  const size_t blob = 200 << 20;
  nic_sga array; // the sim endpoint's limit is its backend's, the default one
  ASSERT_EQ(nic_sga_init(&array, 0), 0);
  {
    nfb::Builder fbb(blob + (1 << 20));
    Build(fbb, 2, blob, true);
    nic_region_ref step;
    ASSERT_EQ(nic_translate(fbb.GetBufferPointer(), 1, &step), 0)
        << "a dataplane buffer (NICMALLOC_CHUNK_SIZE=512M)";
    ASSERT_GT(fbb.GetSize(), size_t{array.max} * step.region_len) << "more steps than entries";
    ASSERT_NO_FATAL_FAILURE(Post(fbb));
  }
  ReceiveAndCheck({{2, blob}});
}

TEST(FlatbuffersStreamReader, WholeInOneBufferInPlaceSplitGathered) {
  nfb::Builder fbb;
  Build(fbb, 5, 9000, true);
  const size_t n = fbb.GetSize();
  char *buf = static_cast<char *>(nic_aligned_alloc(4096, 2 * n));
  memcpy(buf, fbb.GetBufferPointer(), n);
  memcpy(buf + n, fbb.GetBufferPointer(), n);
  std::vector<nfb::ReceivedBuffer> got;
  auto keep = [&](nfb::ReceivedBuffer b) { got.push_back(std::move(b)); };
  const uint64_t holds = Stats().holds;
  nfb::StreamReader rd;
  ASSERT_EQ(rd.feed(buf, 2 * n, keep), 0);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].in_place());
  EXPECT_EQ(got[0].data(), reinterpret_cast<uint8_t *>(buf)) << "read where it lies";
  EXPECT_EQ(Stats().holds, holds + (got[1].in_place() ? 2 : 1));
  for (auto &b : got) {
    EXPECT_TRUE(b.Verify<fbs::Outer>());
    Check(b.GetRoot<fbs::Outer>(), 5, 9000);
  }
  got.clear();
  EXPECT_EQ(Stats().holds, holds);
  // Cut anywhere: gathered.
  for (size_t cut : {1, 3, 4, 5, 100, 4097}) {
    nfb::StreamReader r2;
    ASSERT_EQ(r2.feed(buf, cut, keep), 0);
    ASSERT_EQ(r2.feed(buf + cut, 2 * n - cut, keep), 0);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_FALSE(got[0].in_place());
    for (auto &b : got) {
      EXPECT_TRUE(b.Verify<fbs::Outer>());
      Check(b.GetRoot<fbs::Outer>(), 5, 9000);
    }
    got.clear();
  }
  free(buf);
}

TEST(FlatbuffersStreamReader, BadBuffersFailVerificationAndCutStreamsAreErrors) {
  nfb::Builder fbb;
  Build(fbb, 1, 100, true);
  std::vector<uint8_t> bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  bytes[8] ^= 0x7f; // the root offset
  nfb::StreamReader rd;
  int seen = 0;
  ASSERT_EQ(rd.feed(bytes.data(), bytes.size(),
                    [&](nfb::ReceivedBuffer b) {
                      seen++;
                      EXPECT_FALSE(b.Verify<fbs::Outer>());
                    }),
            0);
  EXPECT_EQ(seen, 1);
  nfb::StreamReader small(1024);
  const uint32_t big = 5000;
  EXPECT_EQ(small.feed(&big, 4, [](nfb::ReceivedBuffer) { ADD_FAILURE(); }), -EMSGSIZE);
  nfb::StreamReader cut;
  EXPECT_EQ(cut.feed(bytes.data(), 10, [](nfb::ReceivedBuffer) { ADD_FAILURE(); }), 0);
  EXPECT_EQ(cut.feed(nullptr, 0, [](nfb::ReceivedBuffer) {}), -EPIPE);
}

} // namespace
