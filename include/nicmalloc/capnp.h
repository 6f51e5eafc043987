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
// Not thread-safe: a builder, a pool and a stream reader each belong to one thread at a time
// (done() may run on another thread with NIC_EP_ENGINE_COMPLETIONS: the pool allows that).
#ifndef NICMALLOC_CAPNP_H
#define NICMALLOC_CAPNP_H

#include <nicmalloc.h>
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

namespace detail {

// Segments start on a page and fill whole pages: NICMALLOC_FENCE=protect holds writers page by
// page, so a segment being built must share no page with memory that is being sent.
constexpr size_t kPage = 4096;
// Room before each segment for the stream's segment table (up to 63 segments), so that posting
// writes the table into the builder's own pages, not into a block that may share a page with
// something in flight.
constexpr size_t kTableBytes = 256;

// One segment of dataplane memory. `inflight` counts the posts sending it that have not
// completed; the memory is freed with the last reference (free() defers it past any post).
struct Segment {
  char *base = nullptr;
  ::capnp::word *words = nullptr;
  size_t size = 0; // in words
  std::atomic<int> inflight{0};
  Segment(char *b, size_t bytes)
      : base(b), words(reinterpret_cast<::capnp::word *>(b + kTableBytes)),
        size((bytes - kTableBytes) / sizeof(::capnp::word)) {}
  ~Segment() { free(base); }
  Segment(const Segment &) = delete;
  Segment &operator=(const Segment &) = delete;
  // Room for a table of `bytes` right before the segment, so that the two make one entry.
  uint32_t *table(size_t bytes) const {
    return reinterpret_cast<uint32_t *>(reinterpret_cast<char *>(words) - bytes);
  }
};
using SegmentRef = std::shared_ptr<Segment>;

inline SegmentRef NewSegment(size_t words) {
  if (words > (SIZE_MAX - kTableBytes - kPage) / sizeof(::capnp::word)) throw std::bad_alloc();
  const size_t bytes = (kTableBytes + words * sizeof(::capnp::word) + kPage - 1) / kPage * kPage;
  void *p = nic_aligned_alloc(kPage, bytes);
  if (!p) throw std::bad_alloc();
  memset(p, 0, bytes);
  try {
    return std::make_shared<Segment>(static_cast<char *>(p), bytes);
  } catch (...) {
    free(p);
    throw;
  }
}

} // namespace detail

// Segments kept between messages. A segment comes back when its builder is destroyed and goes
// to a new builder only once no post is sending it any more.
class SegmentPool {
public:
  // max_idle: segments kept; beyond it a returned segment is freed.
  explicit SegmentPool(size_t max_idle = 16) : max_idle_(max_idle) {}
  SegmentPool(const SegmentPool &) = delete;
  SegmentPool &operator=(const SegmentPool &) = delete;

  // A zeroed segment of at least `words` words: an idle one whose posts have all completed,
  // else a fresh one.
  detail::SegmentRef Take(size_t words) {
    for (size_t i = 0; i < idle_.size(); i++) {
      detail::Segment &s = *idle_[i];
      // acquire: the NIC's reads of the segment happened before its post's done() ran.
      if (s.size < words || s.inflight.load(std::memory_order_acquire) != 0) continue;
      detail::SegmentRef r = std::move(idle_[i]);
      idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
      memset(r->words, 0, r->size * sizeof(::capnp::word));
      reused_++;
      return r;
    }
    fresh_++;
    return detail::NewSegment(words);
  }
  void Give(detail::SegmentRef s) {
    if (idle_.size() < max_idle_) idle_.push_back(std::move(s));
  }
  size_t idle() const { return idle_.size(); }
  // Segments handed out again, and segments allocated because none idle was free to reuse.
  uint64_t reused() const { return reused_; }
  uint64_t fresh() const { return fresh_; }

private:
  size_t max_idle_;
  std::vector<detail::SegmentRef> idle_;
  uint64_t reused_ = 0, fresh_ = 0;
};

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
    size_t words = std::max<size_t>(minimum_words, next_words_);
    detail::SegmentRef s = pool_ ? pool_->Take(words) : detail::NewSegment(words);
    segments_.push_back(s);
    // Grow heuristically, as capnp's own builder does, up to capnp's segment limit.
    next_words_ = std::min<size_t>(next_words_ + words, (1u << 29) - 1);
    return kj::ArrayPtr<::capnp::word>(s->words, s->size);
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
  const std::vector<detail::SegmentRef> &segments() const { return segments_; }

private:
  SegmentPool *pool_;
  size_t next_words_;
  std::vector<detail::SegmentRef> segments_;
};

namespace detail {

// One message, posted in one or more parts: done() runs once every part has completed.
struct PostRecord {
  std::atomic<int> pending{1}; // parts posted, plus one for the poster until it is done
  std::atomic<int> status{0};
  nic_sga_done_fn done = nullptr;
  void *arg = nullptr;
  std::vector<SegmentRef> segments; // kept from reuse until the last part completes

  void Finish(int st) {
    int zero = 0;
    if (st) status.compare_exchange_strong(zero, st);
    if (pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    for (auto &s : segments)
      s->inflight.fetch_sub(1, std::memory_order_release);
    if (done) done(arg, status.load());
    delete this;
  }
  static void PartDone(void *a, int st) { static_cast<PostRecord *>(a)->Finish(st); }
};

// Adds [p, p+len) to *sga; when the array is full, posts it as one part and starts the next, so
// that nothing is copied to stay under the entry limit (nic_sga_add would copy neighbours up to
// 64 KiB together, and fail past that).
inline int AddSplitting(nic_sga *sga, nic_endpoint *ep, PostRecord *rec, unsigned max_entries,
                        const void *p, size_t len) {
  if (sga->count >= sga->max) {
    // Posts on one endpoint arrive in post order: the peer sees one stream of bytes.
    rec->pending.fetch_add(1, std::memory_order_relaxed);
    int rc = nic_sga_post(sga, ep, PostRecord::PartDone, rec);
    if (rc) {
      rec->pending.fetch_sub(1, std::memory_order_relaxed);
      return rc;
    }
    rc = nic_sga_init(sga, max_entries);
    if (rc) return rc;
  }
  // A segment is below 4 GiB (2^29 words), as an entry must be.
  return nic_sga_add(sga, p, len);
}

} // namespace detail

// Posts the message in the stream framing (segment table, then the segments) to ep as one
// scatter-gather message: segments are sent where they lie, short pieces (the table, a short
// last segment) are copied at post as every short entry is. A message with more pieces than
// the entry limit (max_entries; 0 = the backend's) that nicmalloc cannot coalesce is sent as
// several posts in a row, which a stream (TCP, sim through StreamReader) joins again; on a
// datagram socket each post is a datagram of its own, so keep such messages within the limit.
// Returns 0 and later runs done(arg, status) once (from nic_poll or nic_wait) when the NIC no
// longer reads any of it; or a negative errno of nic_sga_init/add/post, and done() does not run.
// After an error in a later part, the earlier parts are on their way (a stream is then cut).
// Works for any capnp::MessageBuilder; one of ours keeps its segments from reuse until done.
inline int post(nic_endpoint *ep, ::capnp::MessageBuilder &msg, nic_sga_done_fn done = nullptr,
                void *arg = nullptr, unsigned max_entries = 0) {
  auto segs = msg.getSegmentsForOutput();
  if (segs.size() == 0) return -EINVAL;
  auto *rec = new (std::nothrow) detail::PostRecord;
  if (!rec) return -ENOMEM;
  rec->done = done;
  rec->arg = arg;
  auto *ours = dynamic_cast<MessageBuilder *>(&msg);
  if (ours) {
    rec->segments = ours->segments();
    for (auto &s : rec->segments)
      s->inflight.fetch_add(1, std::memory_order_relaxed);
  }
  // The table: segment count - 1, each size in words, padded to a word. It goes in the room
  // before our first segment; a message posted again writes it only if it changed (a write to a
  // page in flight is held under NICMALLOC_FENCE=protect).
  const size_t table_words = segs.size() / 2 + 1;
  uint32_t local[detail::kTableBytes / 4] = {};
  uint32_t *table = local, *owned_table = nullptr;
  const bool in_room = ours && !ours->segments().empty() &&
                       ours->segments()[0]->words == segs[0].begin() &&
                       table_words * sizeof(::capnp::word) <= detail::kTableBytes;
  if (!in_room) {
    // On pages of its own, for the reason segments are.
    const size_t bytes =
        (table_words * sizeof(::capnp::word) + detail::kPage - 1) / detail::kPage * detail::kPage;
    owned_table = static_cast<uint32_t *>(nic_aligned_alloc(detail::kPage, bytes));
    if (!owned_table) {
      rec->done = nullptr;
      rec->Finish(0);
      return -ENOMEM;
    }
    memset(owned_table, 0, table_words * sizeof(::capnp::word));
    table = owned_table;
  }
  table[0] = static_cast<uint32_t>(segs.size() - 1);
  for (size_t i = 0; i < segs.size(); i++)
    table[i + 1] = static_cast<uint32_t>(segs[i].size());
  if (in_room) {
    uint32_t *room = ours->segments()[0]->table(table_words * sizeof(::capnp::word));
    if (memcmp(room, local, table_words * sizeof(::capnp::word)))
      memcpy(room, local, table_words * sizeof(::capnp::word));
    table = room;
  }
  nic_sga sga;
  int rc = nic_sga_init(&sga, max_entries);
  if (!rc) rc = detail::AddSplitting(&sga, ep, rec, max_entries, table, table_words * 8);
  for (size_t i = 0; !rc && i < segs.size(); i++)
    if (segs[i].size())
      rc = detail::AddSplitting(&sga, ep, rec, max_entries, segs[i].begin(),
                                segs[i].size() * sizeof(::capnp::word));
  if (!rc) {
    rec->pending.fetch_add(1, std::memory_order_relaxed);
    rc = nic_sga_post(&sga, ep, detail::PostRecord::PartDone, rec);
    if (rc) rec->pending.fetch_sub(1, std::memory_order_relaxed);
  }
  if (rc) {
    nic_sga_reset(&sga);
    rec->done = nullptr; // the caller hears of the error from the return value
  }
  // free() of memory being sent is deferred by nicmalloc until its post completes.
  free(owned_table);
  rec->Finish(0);
  return rc;
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
  static constexpr size_t kMaxSegments = 512; // capnp reads no more
  static constexpr size_t kMaxHeader = (kMaxSegments / 2 + 1) * 8;
  int operator()(const void *p, size_t len, size_t max_bytes, size_t *total) const {
    if (len < 4) return 0;
    uint32_t count;
    memcpy(&count, p, 4);
    if (count >= kMaxSegments) return -EBADMSG;
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
  // each message they complete. Returns 0; or -EBADMSG (a segment count over capnp's 512) or
  // -EMSGSIZE (over max_message_bytes), after which the stream is not framed as this reader
  // expects and every later call returns the same error; or -ENOMEM. data NULL (the end of the
  // stream) returns 0 when no message was cut short, else -EPIPE. Catch exceptions inside
  // on_message (capnp throws for a message it refuses): one that escapes loses the rest of the
  // piece, and the stream is cut.
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
