// Cap'n Proto over nicmalloc (header-only, C++17): messages built in dataplane memory and posted
// as one scatter-gather message with no copy, and read where they landed on receive.
//
//   nicmalloc::capnp::SegmentPool pool;              // optional: reuses segments between messages
//   {
//     nicmalloc::capnp::MessageBuilder msg(&pool);   // segments are dataplane memory
//     auto root = msg.initRoot<Foo>();
//     root.adoptBlob(msg.referenceData(blob, len));  // large Data: sent from where it lies
//     nicmalloc::capnp::post(ep, msg, done, arg);    // segment table + segments, one message
//   }                                                // destroy (or build the next) at once
//
//   nicmalloc::capnp::StreamReader rd;               // in the endpoint's receive function:
//   rd.feed(data, len, [](std::unique_ptr<nicmalloc::capnp::ReceivedMessage> m) {
//     auto foo = m->getRoot<Foo>();                  // in place, or gathered (see feed)
//   });
//
// What is sent: the standard stream framing (the segment table, then the segments), so a peer
// without nicmalloc reads it with capnp::readMessage / FlatArrayMessageReader.
//
// Safe across post. nicmalloc defers the free of memory that is being sent, so a builder may be
// destroyed right after post. A segment handed back to a SegmentPool is given to a new builder,
// which must zero it, only once every post that sent it has completed (its done() ran, from
// nic_poll or nic_wait); until then the pool allocates a fresh segment, whatever the fence mode
// (a plain reuse of the first segment, as capnp::MallocMessageBuilder does with its scratch
// space, rewrites memory being sent unless NICMALLOC_FENCE=protect holds the writer).
//
// A builder and a stream reader each belong to one thread at a time; a pool is thread-safe
// (done() may run on another thread with NIC_EP_ENGINE_COMPLETIONS).
#ifndef NICMALLOC_CAPNP_H
#define NICMALLOC_CAPNP_H

#include <nicmalloc.h>
#include <nicmalloc/sg_post.h>
#include <nicmalloc/stream.h>

#include <capnp/message.h>
#include <capnp/orphan.h>
#include <capnp/serialize.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace nicmalloc {
namespace capnp {

// Segments are blocks of sg_post.h (dataplane memory, page-aligned whole pages) with room before
// each for the stream's segment table (up to 63 segments), so that the table and the first
// segment are one piece, written in the builder's own pages.
namespace detail {
using nicmalloc::detail::BlockRef;
using nicmalloc::detail::NewBlock;
using nicmalloc::detail::Piece;
using nicmalloc::detail::PostPieces;
constexpr size_t kTableBytes = 256;
// capnp's stream readers refuse a message of 512 segments or more (InputStreamMessageReader:
// "segmentCount < 512").
constexpr size_t kMaxSegments = 511;
inline ::capnp::word *Words(const BlockRef &b) {
  return reinterpret_cast<::capnp::word *>(b->base + kTableBytes);
}
} // namespace detail

// Segments kept between messages: a segment goes to a new builder only once every post that sent
// it has completed (sg_post.h).
using SegmentPool = BlockPool;

// A capnp::MessageBuilder whose segments are dataplane memory (from `pool` when given).
class MessageBuilder : public ::capnp::MessageBuilder {
public:
  // first_segment_words: size of the first segment; later ones grow as capnp's own builder's do.
  explicit MessageBuilder(SegmentPool *pool = nullptr, unsigned first_segment_words = 1024)
      : pool_(pool), next_words_(std::max(1u, first_segment_words)) {}
  ~MessageBuilder() noexcept(false) override {
    if (pool_)
      for (auto &s : segments_)
        pool_->Give(std::move(s));
  }

  kj::ArrayPtr<::capnp::word> allocateSegment(unsigned minimum_words) override {
    const size_t words = std::max<size_t>(minimum_words, next_words_);
    const size_t bytes = detail::kTableBytes + words * sizeof(::capnp::word);
    detail::BlockRef b;
    if (pool_) {
      b = pool_->Take(bytes, true);
    } else {
      b = detail::NewBlock(bytes);
      memset(b->base, 0, b->bytes); // capnp wants zeroed segments
    }
    segments_.push_back(b);
    // Grow heuristically, as capnp's own builder does, up to capnp's segment limit.
    next_words_ = std::min<size_t>(next_words_ + words, (1u << 29) - 1);
    const size_t got =
        std::min<size_t>((b->bytes - detail::kTableBytes) / sizeof(::capnp::word), (1u << 29) - 1);
    return kj::ArrayPtr<::capnp::word>(detail::Words(b), got);
  }

  // A Data field's value referenced where it lies (Orphanage::referenceExternalData): it becomes
  // a segment of its own and is sent from there. [p, p+len) must stay valid and unchanged until
  // this builder is destroyed and every post of it completed (free() of nicmalloc memory waits
  // for the posts by itself); capnp reads and sends up to the next multiple of 8 bytes, so the
  // block must extend that far (malloc'd blocks do). A blob shorter than copy_below, or not
  // 8-byte aligned, is copied into the message instead: so short a blob would be copied at post
  // anyway (NICMALLOC_COPY_THRESHOLD, default 512).
  ::capnp::Orphan<::capnp::Data> referenceData(const void *p, size_t len, size_t copy_below = 512) {
    ::capnp::Data::Reader r(static_cast<const kj::byte *>(p), len);
    if (len < copy_below || reinterpret_cast<uintptr_t>(p) % sizeof(::capnp::word) != 0)
      return getOrphanage().newOrphanCopy(r);
    return getOrphanage().referenceExternalData(r);
  }

  // The segments this builder allocated (for the post's bookkeeping).
  const std::vector<detail::BlockRef> &segments() const { return segments_; }

private:
  SegmentPool *pool_;
  size_t next_words_;
  std::vector<detail::BlockRef> segments_;
};

// Posts the message in the stream framing (segment table, then the segments) to ep as one
// scatter-gather message: segments are sent where they lie (the table with the first, as one
// entry), short ones copied at post as every short entry is. A message with more pieces than
// the entry limit (max_entries; 0 = the endpoint's), or longer than ep's receiver takes in one
// message (both from nic_endpoint_limits; 64 KiB on verbs), is sent as several posts in a row
// rather than copied together, which a stream (TCP, sim and verbs through StreamReader) joins
// again; on a datagram socket each post is a datagram of its own, so keep such messages within the
// limits. Returns 0 and later runs done(arg, status) once (from nic_poll or nic_wait) when the NIC
// no longer reads any of it; or -EINVAL (msg has no root, so no segment: capnp's writeMessage
// refuses such a message too), -EMSGSIZE (more than 511 segments, which capnp's readers refuse),
// in both cases nothing sent and msg unchanged, -EAGAIN (ep has no room now: nothing sent; poll
// and post again), -EPIPE (ep's stream was cut: sg_post.h), or a negative errno of
// nic_endpoint_limits or nic_sga_init/add/post, and done() does not run. After an error in a later
// part, the earlier parts are on their way and the stream is cut. Works for any
// capnp::MessageBuilder; one of ours keeps its segments from reuse until done.
inline int post(nic_endpoint *ep, ::capnp::MessageBuilder &msg, nic_sga_done_fn done = nullptr,
                void *arg = nullptr, unsigned max_entries = 0) {
  auto segs = msg.getSegmentsForOutput();
  if (segs.size() == 0) return -EINVAL;
  if (segs.size() > detail::kMaxSegments) return -EMSGSIZE;
  auto *ours = dynamic_cast<MessageBuilder *>(&msg);
  // The table: segment count - 1, each size in words, padded to a word.
  const size_t table_bytes = (segs.size() / 2 + 1) * sizeof(::capnp::word);
  uint32_t local[detail::kTableBytes / 4] = {};
  const bool in_room = ours && !ours->segments().empty() &&
                       detail::Words(ours->segments()[0]) == segs[0].begin() &&
                       table_bytes <= detail::kTableBytes;
  std::vector<detail::BlockRef> blocks;
  if (ours) blocks = ours->segments();
  uint32_t *table = local;
  if (!in_room) { // on pages of its own, for the reason segments are
    blocks.push_back(detail::NewBlock(table_bytes));
    table = reinterpret_cast<uint32_t *>(blocks.back()->base);
    memset(table, 0, table_bytes);
  }
  table[0] = static_cast<uint32_t>(segs.size() - 1);
  for (size_t i = 0; i < segs.size(); i++)
    table[i + 1] = static_cast<uint32_t>(segs[i].size());
  std::vector<detail::Piece> pieces;
  pieces.reserve(segs.size() + 1);
  if (in_room) {
    // Right before the first segment, so that the two are one piece. A message posted again
    // writes it only if it changed (a write to a page in flight is held under protect).
    char *room = reinterpret_cast<char *>(detail::Words(ours->segments()[0])) - table_bytes;
    if (memcmp(room, local, table_bytes)) memcpy(room, local, table_bytes);
    pieces.push_back({room, table_bytes + segs[0].size() * sizeof(::capnp::word)});
  } else {
    pieces.push_back({table, table_bytes});
    pieces.push_back({segs[0].begin(), segs[0].size() * sizeof(::capnp::word)});
  }
  for (size_t i = 1; i < segs.size(); i++)
    pieces.push_back({segs[i].begin(), segs[i].size() * sizeof(::capnp::word)});
  return detail::PostPieces(ep, {pieces.data(), pieces.size(), std::move(blocks), nullptr}, done,
                            arg, max_entries);
}

// A received message: read it through reader() or getRoot<T>(). It keeps what it reads from (its
// receive buffer, held, or its gathered copy: stream.h) until it is destroyed. Keep messages
// only as long as needed: while all of an endpoint's buffers are held it stops receiving.
class ReceivedMessage {
public:
  ReceivedMessage(ReceivedBytes bytes, const ::capnp::ReaderOptions &opts)
      : bytes_(std::move(bytes)),
        reader_(kj::ArrayPtr<const ::capnp::word>(static_cast<const ::capnp::word *>(bytes_.data()),
                                                  bytes_.size() / sizeof(::capnp::word)),
                opts) {}
  ReceivedMessage(const ReceivedMessage &) = delete;
  ReceivedMessage &operator=(const ReceivedMessage &) = delete;

  ::capnp::MessageReader &reader() { return reader_; }
  template <typename T> typename T::Reader getRoot() { return reader_.getRoot<T>(); }
  // True when read where it was received; false when gathered from several receive buffers.
  bool in_place() const { return bytes_.in_place(); }

private:
  ReceivedBytes bytes_;
  ::capnp::FlatArrayMessageReader reader_;
};

namespace detail {
// The stream framing: segment count - 1, each segment's size in words, padded to a word.
struct Framing {
  static constexpr size_t kMaxHeader = (kMaxSegments / 2 + 1) * 8;
  int operator()(const void *p, size_t len, size_t max_bytes, size_t *total) const {
    if (len < 4) return 0;
    uint32_t count;
    memcpy(&count, p, 4);
    if (count >= kMaxSegments) return -EBADMSG; // the table counts segments less one
    const size_t n = size_t{count} + 1, table = (n / 2 + 1) * 8;
    if (len < 4 + 4 * n) return 0;
    size_t words = 0;
    for (size_t i = 0; i < n; i++) {
      uint32_t w;
      memcpy(&w, static_cast<const char *>(p) + 4 + 4 * i, 4);
      words += w;
    }
    if (table > max_bytes || words > (max_bytes - table) / 8) return -EMSGSIZE;
    *total = table + words * 8;
    return 1;
  }
};
} // namespace detail

// Cuts a stream of received bytes (what an endpoint's receive function gets, in order) into
// messages (stream.h): one lying whole in one receive buffer, 8-byte aligned, is read in place
// and holds its buffer; any other is gathered into one dataplane block as it arrives.
class StreamReader {
public:
  // max_message_bytes: a larger framing is taken for garbage (-EMSGSIZE).
  explicit StreamReader(::capnp::ReaderOptions opts = ::capnp::ReaderOptions(),
                        size_t max_message_bytes = size_t{1} << 30)
      : opts_(opts), frames_(detail::Framing(), max_message_bytes, sizeof(::capnp::word)) {}

  // Feeds the bytes of one receive call; calls on_message(std::unique_ptr<ReceivedMessage>) for
  // each message they complete. Returns 0; or -EBADMSG (512 segments or more, which capnp
  // refuses) or -EMSGSIZE (over max_message_bytes), after which the stream is not framed as this
  // reader expects and every later call returns the same error; or -ENOMEM (likewise). data NULL
  // (the end of the stream) returns 0 when no message was cut short, else -EPIPE. Catch exceptions
  // inside on_message (capnp throws for a message it refuses): one that escapes loses the rest of
  // the piece, and the stream is cut: every later call returns -ECANCELED.
  template <typename F> int feed(const void *data, size_t len, F &&on_message) {
    return frames_.feed(data, len, [&](ReceivedBytes &&bytes) {
      on_message(std::make_unique<ReceivedMessage>(std::move(bytes), opts_));
    });
  }
  // Bytes of a message begun and not yet complete.
  size_t pending() const { return frames_.pending(); }

private:
  ::capnp::ReaderOptions opts_;
  FrameReader<detail::Framing> frames_;
};

} // namespace capnp
} // namespace nicmalloc

#endif // NICMALLOC_CAPNP_H
