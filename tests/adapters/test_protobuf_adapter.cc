// include/nicmalloc/protobuf.h end to end, through the public API on the run's backend (sim,
// io_uring over loopback TCP, the software verbs device, DPDK net_ring: wire.h), once per fence
// mode (tests/adapters.cmake): round trips of nested messages, repeated fields and blobs of 0 B
// to 4 MiB, built on dataplane arenas, long fields aliased; messages destroyed, arenas reset and
// scratch reused right after post; a message over the entry limit; what a post keeps, after a
// part failed; the stream reader in place and gathered, and cut by an exception. Every case
// checks that no posted byte was written before the NIC read it: no mismatch under
// NICMALLOC_FENCE=detect, no writer held under protect, and the bytes the receiver got.
#include "adapters_test.pb.h"
#include "adapters_test_required.pb.h"
#include "wire.h"

#include <nicmalloc/protobuf.h>

#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

using namespace adapters_test;
namespace npb = nicmalloc::protobuf;
namespace pb = adapters_test::pb;

namespace {

struct Spec {
  uint64_t seq = 0;
  size_t blob = 0;
  int blobs = 0;
  size_t each = 0;
  int items = 3;
  size_t name = 10; // bytes of each item's name
};

std::string TextOf(uint64_t seq, size_t n) {
  std::string s(n, 'a');
  for (size_t i = 0; i < n; i++)
    s[i] = static_cast<char>('a' + PatternByte(seq, i) % 26);
  return s;
}
std::string BlobOf(uint64_t seed, size_t n) {
  std::string s(n, '\0');
  FillPattern(s.data(), n, seed);
  return s;
}

// Fills m after spec. The long fields are made in dataplane memory (nic_dataplane_begin), on
// pages of their own (NICMALLOC_FENCE=protect holds any writer of a page being sent, and the
// suite counts such writers: none may be held).
void Build(pb::Outer *m, const Spec &s) {
  m->set_seq(s.seq);
  auto *inner = m->mutable_inner();
  inner->set_id(static_cast<uint32_t>(s.seq * 3));
  inner->set_name("inner " + std::to_string(s.seq));
  inner->add_tags("t0");
  inner->add_tags(TextOf(s.seq, 40));
  for (int i = 0; i < s.items; i++) {
    auto *it = m->add_items();
    it->set_id(static_cast<uint32_t>(i));
    it->set_name(TextOf(s.seq + static_cast<uint64_t>(i), s.name));
  }
  for (uint32_t i = 0; i < 100; i++)
    m->add_numbers(static_cast<uint32_t>(s.seq) * 1000 + i);
  m->set_text(TextOf(s.seq, s.blob % 3000));
  std::string blob;
  blob.reserve((s.blob + 4096) / 4096 * 4096); // whole pages: a large block starts on a page
  blob = BlobOf(s.seq, s.blob);
  m->set_blob(std::move(blob));
  for (int i = 0; i < s.blobs; i++) {
    std::string b;
    b.reserve((s.each + 4096) / 4096 * 4096);
    b = BlobOf(s.seq * 1000 + static_cast<uint64_t>(i), s.each);
    m->add_blobs(std::move(b));
  }
}

void Check(const pb::Outer &r, const Spec &s) {
  ASSERT_EQ(r.seq(), s.seq);
  EXPECT_EQ(r.inner().id(), s.seq * 3);
  EXPECT_EQ(r.inner().name(), "inner " + std::to_string(s.seq));
  ASSERT_EQ(r.inner().tags_size(), 2);
  EXPECT_EQ(r.inner().tags(1), TextOf(s.seq, 40));
  ASSERT_EQ(r.items_size(), s.items);
  for (int i = 0; i < s.items; i++)
    EXPECT_EQ(r.items(i).name(), TextOf(s.seq + static_cast<uint64_t>(i), s.name));
  ASSERT_EQ(r.numbers_size(), 100);
  EXPECT_EQ(r.numbers(99), static_cast<uint32_t>(s.seq) * 1000 + 99);
  EXPECT_EQ(r.text(), TextOf(s.seq, s.blob % 3000));
  ASSERT_EQ(r.blob().size(), s.blob);
  EXPECT_EQ(PatternMismatch(r.blob().data(), s.blob, s.seq), s.blob)
      << "message " << s.seq << ": blob of " << s.blob << " bytes";
  ASSERT_EQ(r.blobs_size(), s.blobs);
  for (int i = 0; i < s.blobs; i++)
    EXPECT_EQ(PatternMismatch(r.blobs(i).data(), s.each, s.seq * 1000 + static_cast<uint64_t>(i)),
              s.each)
        << "message " << s.seq << ": blob " << i;
}

class ProtobufAdapter : public testing::Test {
protected:
  void SetUp() override {
    before_ = Stats();
    wire_ = std::make_unique<Wire>([this](void *data, size_t len) {
      int rc = reader_.feed(data, len, [this](npb::ReceivedMessage m) {
        auto r = std::make_unique<pb::Outer>();
        if (!m.ParseInto(r.get())) bad_++;
        in_place_ += m.in_place();
        got_.push_back(std::move(r));
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
    EXPECT_EQ(bad_, 0) << "messages that did not parse";
    EXPECT_EQ(after.fence_mismatches, before_.fence_mismatches)
        << "NICMALLOC_FENCE=detect: posted memory was written before the NIC read it";
    if (adapter_writes_only_) {
      EXPECT_EQ(after.fence_held_writes, before_.fence_held_writes)
          << "NICMALLOC_FENCE=protect: a writer of posted memory had to be held";
    }
    EXPECT_EQ(after.fence_bypasses, before_.fence_bypasses)
        << "NICMALLOC_FENCE=protect: a writer of posted memory was let through";
    EXPECT_EQ(after.sga_errors, before_.sga_errors) << "the adapter made a call nicmalloc refused";
  }
  void Posted(int rc) {
    ASSERT_EQ(rc, 0);
    posted_++;
  }
  void ReceiveAndCheck(const std::vector<Spec> &specs) {
    ASSERT_TRUE(wire_->PollUntil([&] {
      return done_.calls.load() == posted_ && got_.size() >= specs.size();
    })) << done_.calls.load()
        << " of " << posted_ << " posts done, " << got_.size() << " of " << specs.size()
        << " messages received, receiving " << wire_->status();
    EXPECT_EQ(done_.failed.load(), 0);
    ASSERT_EQ(got_.size(), specs.size());
    for (size_t i = 0; i < specs.size(); i++)
      Check(*got_[i], specs[i]);
  }

  nic_stats before_;
  std::unique_ptr<Wire> wire_;
  npb::StreamReader reader_;
  std::vector<std::unique_ptr<pb::Outer>> got_;
  Done done_;
  int posted_ = 0, feed_errors_ = 0, bad_ = 0, in_place_ = 0;
  // Aliased fields are sent from the message's own heap blocks, which share pages with other
  // blocks the test goes on writing (new messages, strings): under NICMALLOC_FENCE=protect those
  // writers are held until the post completes, as they must be. Cases that alias set this false;
  // the adapter's own writes (scratch blocks, page-exclusive) are never held.
  bool adapter_writes_only_ = true;
};

TEST_F(ProtobufAdapter, BlobsOfZeroBytesToFourMiBRoundTripFromDataplaneArenas) {
  adapter_writes_only_ = false;
  const size_t sizes[] = {0, 1, 7, 8, 511, 512, 4096, 65537, 1 << 20, 4 << 20};
  std::vector<Spec> specs;
  google::protobuf::Arena arena(npb::DataplaneArenaOptions());
  nic_dataplane_begin();
  for (size_t n : sizes) {
    Spec s;
    s.seq = specs.size();
    s.blob = n;
    specs.push_back(s);
    auto *m = google::protobuf::Arena::CreateMessage<pb::Outer>(&arena);
    Build(m, s);
    EXPECT_TRUE(nic_is_dataplane(m)) << "the message lies in its arena's dataplane blocks";
    npb::OutputStream out;
    ASSERT_TRUE(npb::serialize(*m, &out));
    if (n >= 512) {
      EXPECT_GE(out.aliased_bytes(), n) << "a blob of " << n << " bytes is sent where it lies";
    }
    Posted(out.post(wire_->tx(), Done::Fn, &done_, wire_->entries()));
  }
  nic_dataplane_end();
  ReceiveAndCheck(specs);
}

// A proto2 message missing a required field is refused before anything is sent: the receiver's
// parse would refuse it, and protobuf's own SerializeToString aborts the program there (Debian's
// libprotobuf keeps its debug checks). With the field set, the same message arrives.
TEST_F(ProtobufAdapter, AMessageMissingARequiredFieldIsRefused) {
  adapter_writes_only_ = false; // the blob is sent from the message's own heap block
  adapters_test::pb2::Required m;
  m.set_blob(std::string(4096, 'r'));
  EXPECT_EQ(npb::post(wire_->tx(), m, Done::Fn, &done_, wire_->entries()), -EINVAL);
  npb::OutputStream out;
  EXPECT_FALSE(npb::serialize(m, &out));
  EXPECT_EQ(out.pieces(), 0u) << "nothing written";
  m.set_seq(5);
  Posted(npb::post(wire_->tx(), m, Done::Fn, &done_, wire_->entries()));
  ASSERT_TRUE(wire_->PollUntil([&] { return done_.calls.load() == posted_ && got_.size() == 1; }))
      << got_.size() << " messages received, " << done_.calls.load() << " posts done";
  EXPECT_EQ(got_[0]->seq(), 5u);
  EXPECT_EQ(got_[0]->blob(), m.blob());
  EXPECT_EQ(done_.calls.load(), 1) << "the refused post ran no done";
}

// Messages destroyed and arenas reset right after post, new ones built at once in their place:
// nothing sent may change.
TEST_F(ProtobufAdapter, DestroyedAndResetRightAfterPost) {
  adapter_writes_only_ = false;
  std::vector<Spec> specs;
  google::protobuf::Arena arena(npb::DataplaneArenaOptions());
  nic_dataplane_begin();
  for (uint64_t seq = 0; seq < 8; seq++) {
    Spec s;
    s.seq = seq;
    s.blob = 4096 << (seq % 6);
    s.blobs = 3;
    s.each = 6000;
    specs.push_back(s);
    if (seq % 2) {
      auto m = std::make_unique<pb::Outer>();
      Build(m.get(), s);
      Posted(npb::post(wire_->tx(), *m, Done::Fn, &done_, wire_->entries()));
    } else {
      auto *m = google::protobuf::Arena::CreateMessage<pb::Outer>(&arena);
      Build(m, s);
      Posted(npb::post(wire_->tx(), *m, Done::Fn, &done_, wire_->entries()));
      arena.Reset();
    }
  }
  // Handed over: kept until done().
  for (uint64_t seq = 8; seq < 12; seq++) {
    Spec s;
    s.seq = seq;
    s.blob = 30000;
    specs.push_back(s);
    auto m = std::make_shared<pb::Outer>();
    Build(m.get(), s);
    Posted(npb::post(wire_->tx(), std::shared_ptr<const pb::Outer>(m), Done::Fn, &done_,
                     wire_->entries()));
  }
  nic_dataplane_end();
  ReceiveAndCheck(specs);
}

// A pool hands a scratch block out again only once the posts that sent it are done: until then
// the next message is written into a fresh one, and what was posted stays as it was.
TEST_F(ProtobufAdapter, ScratchReusedRightAfterPostIsNotRewrittenWhileSent) {
  nicmalloc::BlockPool pool;
  std::vector<Spec> specs;
  for (uint64_t seq = 0; seq < 6; seq++) {
    Spec s;
    s.seq = seq;
    s.blob = 300;  // copied into the scratch
    s.items = 300; // kilobytes of scratch: sent from there, not copied at post
    specs.push_back(s);
    pb::Outer m;
    Build(&m, s);
    npb::OutputStream out(&pool);
    ASSERT_TRUE(npb::serialize(m, &out));
    Posted(out.post(wire_->tx(), Done::Fn, &done_, wire_->entries()));
  }
  EXPECT_EQ(pool.reused(), 0u) << "no post has completed yet (no nic_poll ran): nothing may be "
                                  "reused";
  ReceiveAndCheck(specs);
  pb::Outer m;
  Build(&m, specs[0]);
  npb::OutputStream out(&pool);
  ASSERT_TRUE(npb::serialize(m, &out));
  EXPECT_GT(pool.reused(), 0u) << "blocks whose posts completed are reused";
}

// More pieces than the entry limit: sent as several posts in a row, joined by the reader. The
// aliased pieces are the items' names, singular fields of a repeated message; the repeated bytes
// beside them are copied into the scratch (Protobuf 3.21 writes repeated string and bytes fields
// with WriteString / WriteBytes, never aliased).
TEST_F(ProtobufAdapter, MessageOverTheEntryLimitArrivesWhole) {
  adapter_writes_only_ = false;
  std::vector<Spec> specs;
  nic_dataplane_begin();
  for (unsigned max_entries : {0u, 4u}) {
    Spec s;
    s.seq = specs.size();
    s.blob = 100000;
    s.items = 100; // 100 aliased pieces, each too big to copy
    s.name = 40000;
    s.blobs = 3; // copied
    s.each = 40000;
    specs.push_back(s);
    pb::Outer m;
    Build(&m, s);
    npb::OutputStream out;
    ASSERT_TRUE(npb::serialize(m, &out));
    EXPECT_GT(out.pieces(), static_cast<size_t>(NIC_SGA_CAPACITY));
    EXPECT_EQ(out.aliased_bytes(), s.blob + s.blob % 3000 + s.items * s.name)
        << "the blob, the text and the names are aliased, the repeated blobs copied";
    Posted(out.post(wire_->tx(), Done::Fn, &done_, wire_->entries(max_entries)));
  }
  nic_dataplane_end();
  ReceiveAndCheck(specs);
  EXPECT_EQ(done_.calls.load(), 2) << "one done() per message, whatever its parts";
}

// A message of more pieces than a DPDK port's tx ring and the backlog behind it hold (on dpdk a
// piece is a packet: net_ring0's ring takes 1023, the backlog NIC_DPDK_BACKLOG), or of more parts
// than a verbs QP's send CQ has room for (the soft device's 256, its 32 receives taking them in
// turn), arrives byte for byte, and so does the message after it: a part the endpoint has no room
// for is posted once polls made room, after the parts before it. Its middle parts completed
// unsent with -EAGAIN while the later ones went out, and the reader joined the bytes of other
// messages; on verbs, the stream was cut.
TEST_F(ProtobufAdapter, AMessageOfMorePiecesThanTheTxRingArrivesByteForByte) {
  adapter_writes_only_ = false;
  std::vector<Spec> specs(2);
  specs[0].items = 2000; // 2000 aliased names, each a piece between two pieces of scratch
  specs[0].name = 1024;
  specs[1].seq = 1;
  pb::Outer m[2];
  nic_dataplane_begin();
  for (int i = 0; i < 2; i++) {
    Build(&m[i], specs[i]);
    npb::OutputStream out;
    ASSERT_TRUE(npb::serialize(m[i], &out));
    if (i == 0) {
      EXPECT_GT(out.pieces(), size_t{1023 + NIC_DPDK_BACKLOG});
    }
    Posted(out.post(wire_->tx(), Done::Fn, &done_, wire_->entries()));
  }
  nic_dataplane_end();
  ReceiveAndCheck(specs);
  for (int i = 0; i < 2 && i < static_cast<int>(got_.size()); i++)
    EXPECT_EQ(got_[i]->SerializeAsString(), m[i].SerializeAsString()) << "message " << i;
  EXPECT_EQ(nicmalloc::stream_error(wire_->tx()), 0);
}

// What a post keeps (post(std::shared_ptr) hands the message so) lives while a part posted
// before a later part failed is sent: that part reads the message's aliased fields.
TEST_F(ProtobufAdapter, WhatAPostKeepsOutlivesItsPartsAfterALaterPartFails) {
  const size_t field = 40000, gone_len = 8192;
  char *sent = static_cast<char *>(nic_aligned_alloc(4096, field)); // a page of its own
  FillPattern(sent, field, 9);
  // No access, as a NIC's registration finds it (and reserved: nothing is mapped there meanwhile).
  void *gone = mmap(nullptr, gone_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  // A message of one bytes field (5), its value in two aliased pieces, the second unreadable: the
  // first part (the header and the first piece) is posted, then the second piece is refused.
  npb::OutputStream out;
  {
    google::protobuf::io::CodedOutputStream cos(&out);
    cos.EnableAliasing(true);
    const uint32_t value = static_cast<uint32_t>(field + gone_len);
    cos.WriteVarint32(static_cast<uint32_t>(1 + cos.VarintSize32(value) + value));
    cos.WriteTag(5 << 3 | 2);
    cos.WriteVarint32(value);
    cos.WriteRawMaybeAliased(sent, static_cast<int>(field));
    cos.WriteRawMaybeAliased(gone, static_cast<int>(gone_len));
  }
  ASSERT_EQ(out.aliased_bytes(), field + gone_len);
  auto keep = std::make_shared<int>(0);
  std::weak_ptr<int> kept = keep;
  const uint64_t errors = Stats().sga_errors;
  EXPECT_EQ(out.post(wire_->tx(), Done::Fn, &done_, wire_->entries(2), std::move(keep)), -EFAULT);
  EXPECT_EQ(Stats().sga_errors, errors + 1) << "the unreadable piece was refused";
  EXPECT_EQ(nicmalloc::stream_error(wire_->tx()), -EFAULT) << "the message was cut short";
  before_.sga_errors = errors + 1;
  // Completions run from nic_poll only, and none ran yet.
  EXPECT_FALSE(kept.expired()) << "released while the first part is sent";
  ASSERT_TRUE(wire_->PollUntil([&] { return kept.expired(); })) << "never released";
  EXPECT_EQ(done_.calls.load(), 0) << "a failed post runs no done()";
  free(sent);
  munmap(gone, gone_len);
}

// A part that completes with an error cuts the stream: the peer lost bytes in the middle of it
// and cannot frame what follows. Run on sim under NICMALLOC_ON_PIN_FAIL=fail (its own run,
// tests/adapters.cmake), where a part longer than a chunk finds no receive buffer and completes
// with -ENOMEM. The message's done() gets that error, a message posted after it that completes
// once the hole is known gets -EPIPE, and later posts are refused with -EPIPE, nothing sent,
// until stream_restart. The posts after the hole were taken and sent, each completing with 0,
// and the reader framed whatever followed the hole.
TEST(ProtobufAdapterFaulty, APartThatCompletesWithAnErrorCutsTheStream) {
  const char *policy = getenv("NICMALLOC_ON_PIN_FAIL");
  std::mutex mu;
  std::unique_ptr<npb::StreamReader> reader = std::make_unique<npb::StreamReader>();
  std::vector<std::string> got;
  Wire wire([&](void *data, size_t len) {
    std::lock_guard<std::mutex> g(mu);
    reader->feed(data, len, [&](npb::ReceivedMessage m) {
      got.emplace_back(static_cast<const char *>(m.data()), m.size());
    });
  });
  if (wire.backend() != "sim" || !policy || strcmp(policy, "fail") != 0)
    GTEST_SKIP() << "needs the sim and NICMALLOC_ON_PIN_FAIL=fail (tests/adapters.cmake)";
  nic_endpoint *ep = wire.tx();
  ASSERT_NE(ep, nullptr);
  // The blob, past a chunk, is a part of its own between two of scratch (one entry a part).
  pb::Outer holed, after, later;
  holed.set_seq(1);
  holed.set_blob(std::string(Stats().chunk_size + 4096, 'b'));
  holed.set_text(std::string(100, 't'));
  after.set_seq(2);
  later.set_seq(3);
  Done first, second, third;
  ASSERT_EQ(npb::post(ep, holed, Done::Fn, &first, 1), 0);
  ASSERT_EQ(npb::post(ep, after, Done::Fn, &second, 1), 0) << "posted before the hole is known";
  ASSERT_TRUE(wire.PollUntil([&] { return first.calls && second.calls; }));
  EXPECT_EQ(first.failed.load(), 1);
  EXPECT_EQ(second.failed.load(), 1) << "a message after the hole completed as if it arrived";
  EXPECT_EQ(nicmalloc::stream_error(ep), -ENOMEM);
  EXPECT_EQ(npb::post(ep, later, Done::Fn, &third, 1), -EPIPE) << "posted after the hole";
  nic_wait(50);
  EXPECT_EQ(third.calls.load(), 0) << "a refused post ran done()";
  // Started again, with a reader of its own: the stream carries messages again.
  nicmalloc::stream_restart(ep);
  {
    std::lock_guard<std::mutex> g(mu);
    reader = std::make_unique<npb::StreamReader>();
    got.clear();
  }
  ASSERT_EQ(npb::post(ep, later, Done::Fn, &third, 1), 0);
  ASSERT_TRUE(wire.PollUntil([&] { return third.calls && !got.empty(); }));
  EXPECT_EQ(third.failed.load(), 0);
  EXPECT_EQ(got[0], later.SerializeAsString());
  EXPECT_EQ(nicmalloc::stream_error(ep), 0);
}

// A cut stream is its endpoint's, not its address's: an endpoint destroyed while its stream is
// cut (no stream_restart) and one made after it at the same address (the sim hands a destroyed
// endpoint's node out again) starts whole and posts. The streams were listed by address: every
// post to the newcomer returned -EPIPE, for good. Own run as above: a part longer than a chunk
// completes with -ENOMEM and cuts the stream.
TEST(ProtobufAdapterFaulty, AnEndpointMadeAtACutOnesAddressPostsNormally) {
  const char *policy = getenv("NICMALLOC_ON_PIN_FAIL");
  const char *backend = getenv("NICMALLOC_BACKEND");
  if (!backend || strcmp(backend, "sim") != 0 || !policy || strcmp(policy, "fail") != 0)
    GTEST_SKIP() << "needs the sim and NICMALLOC_ON_PIN_FAIL=fail (tests/adapters.cmake)";
  struct Rx {
    std::mutex mu;
    npb::StreamReader reader;
    std::vector<std::string> got;
    static void Fn(void *arg, void *data, size_t len) {
      auto *rx = static_cast<Rx *>(arg);
      std::lock_guard<std::mutex> g(rx->mu);
      if (data)
        rx->reader.feed(data, len, [&](npb::ReceivedMessage m) {
          rx->got.emplace_back(static_cast<const char *>(m.data()), m.size());
        });
    }
  };
  auto until = [](const std::function<bool()> &pred) {
    for (auto end = std::chrono::steady_clock::now() + Wire::kLimit; !pred(); nic_wait(10))
      if (std::chrono::steady_clock::now() > end) return false;
    return true;
  };
  auto destroy = [&](nic_endpoint *ep) {
    int rc;
    EXPECT_TRUE(until([&] { return (rc = nic_sim_endpoint_destroy(ep)) != -EBUSY; }));
    EXPECT_EQ(rc, 0);
  };
  Rx first_rx;
  nic_endpoint *cut = nic_sim_endpoint_create(Rx::Fn, &first_rx, 0);
  ASSERT_NE(cut, nullptr) << strerror(errno);
  const uint64_t cut_id = nic_endpoint_id(cut);
  pb::Outer holed, later;
  holed.set_seq(1);
  holed.set_blob(std::string(Stats().chunk_size + 4096, 'b')); // a part of its own, dropped
  later.set_seq(2);
  Done holed_done, later_done;
  ASSERT_EQ(npb::post(cut, holed, Done::Fn, &holed_done, 1), 0);
  ASSERT_TRUE(until([&] { return holed_done.calls.load() == 1; }));
  ASSERT_EQ(nicmalloc::stream_error(cut), -ENOMEM);
  ASSERT_EQ(npb::post(cut, later, Done::Fn, &later_done, 1), -EPIPE);
  destroy(cut); // the program forgot stream_restart

  // Made until one lands where the cut one was: at once on the sim, whose pool gives the node
  // destroyed last out first.
  Rx rx;
  std::vector<nic_endpoint *> elsewhere;
  nic_endpoint *fresh = nullptr;
  while (!fresh && elsewhere.size() < 64) {
    nic_endpoint *ep = nic_sim_endpoint_create(Rx::Fn, &rx, 0);
    ASSERT_NE(ep, nullptr) << strerror(errno);
    if (ep == cut)
      fresh = ep;
    else
      elsewhere.push_back(ep);
  }
  for (nic_endpoint *ep : elsewhere)
    destroy(ep);
  ASSERT_EQ(fresh, cut) << "no endpoint was made at the destroyed one's address";
  EXPECT_NE(nic_endpoint_id(fresh), cut_id);
  EXPECT_EQ(nicmalloc::stream_error(fresh), 0) << "the newcomer inherited a cut stream";
  EXPECT_EQ(npb::post(fresh, later, Done::Fn, &later_done, 1), 0);
  EXPECT_TRUE(until([&] {
    std::lock_guard<std::mutex> g(rx.mu);
    return later_done.calls.load() == 1 && !rx.got.empty();
  }));
  EXPECT_EQ(later_done.failed.load(), 0);
  {
    std::lock_guard<std::mutex> g(rx.mu);
    ASSERT_EQ(rx.got.size(), 1u);
    EXPECT_EQ(rx.got[0], later.SerializeAsString());
  }
  destroy(fresh);
}

std::string Delimited(const pb::Outer &m) {
  std::string body = m.SerializeAsString();
  std::string out;
  uint64_t n = body.size();
  do {
    out.push_back(static_cast<char>((n & 0x7f) | (n > 0x7f ? 0x80 : 0)));
    n >>= 7;
  } while (n);
  return out + body;
}

TEST(ProtobufStreamReader, InPlaceWhenWholeGatheredWhenSplit) {
  pb::Outer a, b;
  Spec sa, sb;
  sa.seq = 1, sa.blob = 200, sb.seq = 2, sb.blob = 70000;
  Build(&a, sa);
  Build(&b, sb);
  const std::string stream = Delimited(a) + Delimited(b);
  char *buf = static_cast<char *>(nic_malloc(stream.size()));
  memcpy(buf, stream.data(), stream.size());
  std::vector<npb::ReceivedMessage> got;
  auto keep = [&](npb::ReceivedMessage m) { got.push_back(std::move(m)); };
  const uint64_t holds = Stats().holds;
  npb::StreamReader rd;
  ASSERT_EQ(rd.feed(buf, stream.size(), keep), 0);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].in_place());
  EXPECT_EQ(Stats().holds, holds + 2) << "each message holds its buffer";
  pb::Outer r;
  ASSERT_TRUE(got[0].ParseInto(&r));
  Check(r, sa);
  ASSERT_TRUE(got[1].ParseInto(&r));
  Check(r, sb);
  got.clear();
  EXPECT_EQ(Stats().holds, holds);
  for (size_t cut :
       {size_t{1}, size_t{2}, size_t{100}, Delimited(a).size() + 1, Delimited(a).size() + 2}) {
    npb::StreamReader r2;
    ASSERT_EQ(r2.feed(buf, cut, keep), 0);
    ASSERT_EQ(r2.feed(buf + cut, stream.size() - cut, keep), 0);
    ASSERT_EQ(got.size(), 2u) << "cut at " << cut;
    ASSERT_TRUE(got[0].ParseInto(&r));
    Check(r, sa);
    ASSERT_TRUE(got[1].ParseInto(&r));
    Check(r, sb);
    EXPECT_EQ(got[1].in_place(), cut <= Delimited(a).size())
        << "the second message is gathered when split, else read in place";
    got.clear();
    EXPECT_EQ(r2.feed(nullptr, 0, keep), 0);
  }
  free(buf);
}

// An exception out of the callback leaves the rest of its piece unread: the
// stream is cut, and the next piece, which starts inside a message, is refused
// rather than framed anew.
TEST(ProtobufStreamReader, AnExceptionOutOfTheCallbackCutsTheStream) {
  pb::Outer a, b, c;
  a.set_seq(1);
  b.set_seq(2);
  b.set_text(std::string(300, 'x'));
  c.set_seq(3);
  const std::string stream = Delimited(a) + Delimited(b) + Delimited(c);
  const size_t cut = Delimited(a).size() + 50; // inside b
  npb::StreamReader rd;
  int calls = 0;
  EXPECT_THROW(rd.feed(stream.data(), cut,
                       [&](npb::ReceivedMessage) {
                         calls++;
                         throw std::runtime_error("the program's callback failed");
                       }),
               std::runtime_error);
  EXPECT_EQ(calls, 1);
  auto none = [](npb::ReceivedMessage) { ADD_FAILURE() << "no message after the cut"; };
  EXPECT_EQ(rd.feed(stream.data() + cut, stream.size() - cut, none), -ECANCELED);
  EXPECT_EQ(rd.feed(stream.data(), stream.size(), none), -ECANCELED) << "the stream stays cut";
  EXPECT_EQ(rd.feed(nullptr, 0, none), -ECANCELED);
}

TEST(ProtobufStreamReader, GarbageAndCutShortStreamsAreErrors) {
  auto none = [](npb::ReceivedMessage) { ADD_FAILURE() << "no message"; };
  npb::StreamReader rd;
  const unsigned char bad[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  EXPECT_EQ(rd.feed(bad, sizeof bad, none), -EBADMSG);
  EXPECT_EQ(rd.feed(bad, sizeof bad, none), -EBADMSG) << "the stream stays refused";
  npb::StreamReader small(1000);
  const unsigned char big[2] = {0xe9, 0x07}; // 1001
  EXPECT_EQ(small.feed(big, sizeof big, none), -EMSGSIZE);
  npb::StreamReader cut;
  const unsigned char part[3] = {10, 1, 2};
  EXPECT_EQ(cut.feed(part, sizeof part, none), 0);
  EXPECT_EQ(cut.feed(nullptr, 0, none), -EPIPE);
  const unsigned char junk[3] = {2, 0xff, 0xff}; // a message of 2 bytes that does not parse
  npb::StreamReader j;
  int seen = 0;
  EXPECT_EQ(j.feed(junk, sizeof junk,
                   [&](npb::ReceivedMessage m) {
                     pb::Outer o;
                     EXPECT_FALSE(m.ParseInto(&o));
                     seen++;
                   }),
            0);
  EXPECT_EQ(seen, 1);
}

} // namespace
