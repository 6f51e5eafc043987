// Protocol Buffers over nicmalloc (header-only, C++17): arenas of dataplane memory, messages
// serialized into a scatter-gather message that sends large singular string and bytes fields
// where they lie, and received messages parsed from the receive buffers.
//
//   google::protobuf::Arena arena(nicmalloc::protobuf::DataplaneArenaOptions());
//   auto *req = google::protobuf::Arena::CreateMessage<Request>(&arena);
//   req->set_value(std::move(big));                          // >= 512 B: aliased, not copied
//   nicmalloc::protobuf::post(ep, *req, done, arg);          // varint length, then the message
//
//   nicmalloc::protobuf::StreamReader rd;                    // in the receive function:
//   rd.feed(data, len, [](nicmalloc::protobuf::ReceivedMessage m) {
//     Request r;
//     if (m.ParseInto(&r)) use(r);
//   });
//
// What is sent: each message length-delimited (a varint of its size, then its bytes), as
// writeDelimitedTo / ParseDelimitedFromZeroCopyStream have it.
//
// What is aliased: Protobuf 3.21's generated code writes singular (and oneof) string and bytes
// fields with WriteStringMaybeAliased / WriteBytesMaybeAliased, which alias a long one, but
// repeated ones with WriteString / WriteBytes, which copy: a repeated field's elements are copied
// into the scratch whatever their length (a long value in a repeated message field, such as
// `repeated Item items` whose Item has a long singular `bytes data`, is aliased).
//
// Safe across post. Scalars, tags and short fields are written into scratch blocks of dataplane
// memory that are reused only once every post that sent them has completed (sg_post.h). Long
// singular string and bytes fields are sent from the message itself: destroying or freeing the
// message right after post is safe (nicmalloc defers the frees), but changing such a field before
// the post's done() ran changes what is sent (unless NICMALLOC_FENCE=protect holds the writer). To
// change or reuse a message at once, hand it over: post(ep, std::shared_ptr<const Message>)
// keeps it until done(); or give OutputStream a window larger than any field, which copies every
// field.
#ifndef NICMALLOC_PROTOBUF_H
#define NICMALLOC_PROTOBUF_H

#include <nicmalloc.h>
#include <nicmalloc/sg_post.h>
#include <nicmalloc/stream.h>

#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/message_lite.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace nicmalloc {
namespace protobuf {

namespace detail {
using nicmalloc::detail::BlockRef;
using nicmalloc::detail::Piece;
using nicmalloc::detail::PostPieces;
inline void *ArenaBlockAlloc(size_t n) {
  void *p = nic_malloc(n);
  if (!p) throw std::bad_alloc();
  return p;
}
inline void ArenaBlockFree(void *p, size_t) {
  free(p);
}
struct ScratchBlocks : BlockPool {
  ScratchBlocks() : BlockPool(64) {}
};
} // namespace detail

// Arena options whose blocks are dataplane memory (ArenaOptions block_alloc/block_dealloc), so
// that what a message keeps in its arena (its fields, short strings) can be posted from there.
// Arena::Reset() right after a post is safe: the blocks' frees wait for the post, and new blocks
// are allocated. (An initial_block of your own would be reused in place: do not add one.)
inline google::protobuf::ArenaOptions DataplaneArenaOptions(size_t start_block_size = 4096,
                                                            size_t max_block_size = 1 << 20) {
  google::protobuf::ArenaOptions o;
  o.start_block_size = start_block_size;
  o.max_block_size = max_block_size;
  o.block_alloc = &detail::ArenaBlockAlloc;
  o.block_dealloc = &detail::ArenaBlockFree;
  return o;
}

// The process's pool of scratch blocks, never destroyed (done() may run late in exit), made anew
// in a child of fork (sg_post.h).
inline BlockPool &ScratchPool() {
  return nicmalloc::detail::ProcessWide<detail::ScratchBlocks>::Get();
}

// A ZeroCopyOutputStream that collects a message as scatter-gather pieces: what the coded stream
// writes goes to scratch blocks of dataplane memory, in windows of `window` bytes; a field the
// generated code writes "maybe aliased" (singular and oneof string and bytes fields: see above)
// that does not fit the rest of its window (with CodedOutputStream::EnableAliasing, which
// serialize() sets) is aliased: WriteAliasedRaw makes it a piece of its own, sent where it lies.
// So such fields of at least window + 16 bytes are always aliased, shorter ones copied unless
// they straddle a window's end; repeated string and bytes fields are always copied. post()
// sends the pieces and starts afresh. One thread at a time.
class OutputStream : public google::protobuf::io::ZeroCopyOutputStream {
public:
  // window: at least 16 (the coded stream's slop); 496 aliases every such field of 512 bytes and
  // up, NICMALLOC_COPY_THRESHOLD's default, below which an entry would be copied at post anyway.
  explicit OutputStream(BlockPool *pool = &ScratchPool(), size_t window = 496,
                        size_t block_bytes = 64 << 10)
      : pool_(pool), window_(std::max<size_t>(window, 16)),
        block_bytes_(std::max(block_bytes, window_)) {}
  ~OutputStream() override { Drop(); }
  OutputStream(const OutputStream &) = delete;
  OutputStream &operator=(const OutputStream &) = delete;

  bool Next(void **data, int *size) override {
    if (cur_ == end_) {
      detail::BlockRef b;
      try {
        b = pool_->Take(block_bytes_, false);
      } catch (const std::bad_alloc &) {
        return false;
      }
      cur_ = b->base, end_ = b->base + b->bytes;
      blocks_.push_back(std::move(b));
    }
    const size_t n = std::min<size_t>(window_, static_cast<size_t>(end_ - cur_));
    if (!pieces_.empty() && !aliased_last_ &&
        static_cast<const char *>(pieces_.back().p) + pieces_.back().len == cur_)
      pieces_.back().len += n; // adjacent scratch: one piece
    else
      pieces_.push_back({cur_, n});
    aliased_last_ = false;
    *data = cur_;
    *size = static_cast<int>(n);
    cur_ += n, bytes_ += n;
    return true;
  }
  void BackUp(int count) override { // right after Next, whose window it shortens
    cur_ -= count, bytes_ -= count;
    pieces_.back().len -= static_cast<size_t>(count);
  }
  int64_t ByteCount() const override { return static_cast<int64_t>(bytes_); }
  bool AllowsAliasing() const override { return true; }
  bool WriteAliasedRaw(const void *data, int size) override {
    if (size <= 0) return true;
    pieces_.push_back({data, static_cast<size_t>(size)});
    aliased_last_ = true;
    bytes_ += static_cast<size_t>(size), aliased_bytes_ += static_cast<size_t>(size);
    return true;
  }

  // Posts what was written as one scatter-gather message (in parts the endpoint takes, as
  // capnp.h's post is: sg_post.h) and starts afresh. Returns 0 and later runs done(arg, status)
  // once, from nic_poll or nic_wait; or a negative errno (-EINVAL: nothing written), and done()
  // does not run. Either way the stream is empty again. keep (what aliased pieces lie in) is
  // released after the last posted part completed, even when a later part failed.
  int post(nic_endpoint *ep, nic_sga_done_fn done = nullptr, void *arg = nullptr,
           unsigned max_entries = 0, std::shared_ptr<const void> keep = nullptr) {
    int rc = detail::PostPieces(ep, {pieces_.data(), pieces_.size(), blocks_, std::move(keep)},
                                done, arg, max_entries);
    Drop();
    return rc;
  }
  // Bytes to be sent where they lie (aliased) since the last post.
  size_t aliased_bytes() const { return aliased_bytes_; }
  // Pieces (scratch runs and aliased fields) since the last post.
  size_t pieces() const { return pieces_.size(); }

private:
  // The blocks go back to the pool, which reuses them once no post sends them; the rest of the
  // current block is not written again, as it shares pages with what was posted.
  void Drop() {
    for (auto &b : blocks_)
      pool_->Give(std::move(b));
    blocks_.clear(), pieces_.clear();
    cur_ = end_ = nullptr;
    bytes_ = aliased_bytes_ = 0;
    aliased_last_ = false;
  }
  BlockPool *pool_;
  size_t window_, block_bytes_;
  std::vector<detail::BlockRef> blocks_;
  std::vector<detail::Piece> pieces_;
  char *cur_ = nullptr, *end_ = nullptr;
  size_t bytes_ = 0, aliased_bytes_ = 0;
  bool aliased_last_ = false;
};

namespace detail {
// size: msg.ByteSizeLong(), just computed (it walks the whole message, and leaves the cached
// sizes SerializeWithCachedSizes reads).
inline bool SerializeSized(const google::protobuf::MessageLite &msg, size_t size,
                           OutputStream *out) {
  google::protobuf::io::CodedOutputStream cos(out); // trims its last window when destroyed
  cos.EnableAliasing(true);
  cos.WriteVarint32(static_cast<uint32_t>(size));
  msg.SerializeWithCachedSizes(&cos);
  return !cos.HadError();
}
} // namespace detail

// Writes msg length-delimited into out (a varint of its size, then the message), aliasing long
// fields. False when a required field is missing (a receiver's parse would refuse it; protobuf's
// own serializers abort the program there, in a library built with its debug checks such as
// Debian's), when the message is over 2 GiB, or when the stream failed (no memory).
inline bool serialize(const google::protobuf::MessageLite &msg, OutputStream *out) {
  if (!msg.IsInitialized()) return false;
  const size_t size = msg.ByteSizeLong();
  return size <= INT_MAX && detail::SerializeSized(msg, size, out);
}

namespace detail {
inline int PostMessage(nic_endpoint *ep, const google::protobuf::MessageLite &msg,
                       nic_sga_done_fn done, void *arg, unsigned max_entries,
                       std::shared_ptr<const void> keep) {
  if (!msg.IsInitialized()) return -EINVAL;
  const size_t size = msg.ByteSizeLong();
  if (size > INT_MAX) return -EMSGSIZE;
  OutputStream out;
  if (!SerializeSized(msg, size, &out)) return -ENOMEM;
  return out.post(ep, done, arg, max_entries, std::move(keep));
}
} // namespace detail

// Posts msg, length-delimited, to ep as one scatter-gather message: singular string and bytes
// fields of 512 bytes and up are sent from the message itself, which must stay unchanged until
// done() ran (it may be destroyed at once). Returns 0 and later runs done(arg, status) once; or
// -EINVAL (a required field is missing), -EMSGSIZE (over 2 GiB), -ENOMEM, -EAGAIN (ep has no
// room now: nothing sent; poll and post again), -EPIPE (ep's stream was cut: sg_post.h), or a
// negative errno of nic_endpoint_limits or nic_sga_init/add/post, and done() does not run.
inline int post(nic_endpoint *ep, const google::protobuf::MessageLite &msg,
                nic_sga_done_fn done = nullptr, void *arg = nullptr, unsigned max_entries = 0) {
  return detail::PostMessage(ep, msg, done, arg, max_entries, nullptr);
}

// The same, keeping the message until done() ran: the caller may reuse its own references to
// other messages, or drop this one, at once. After an error (done() does not run) the message
// is kept while parts posted before the error still send its fields.
inline int post(nic_endpoint *ep, std::shared_ptr<const google::protobuf::MessageLite> msg,
                nic_sga_done_fn done = nullptr, void *arg = nullptr, unsigned max_entries = 0) {
  if (!msg) return -EINVAL;
  const google::protobuf::MessageLite &m = *msg;
  return detail::PostMessage(ep, m, done, arg, max_entries, std::move(msg));
}

// A received message's bytes (without its length), in its receive buffer (held) or gathered.
class ReceivedMessage {
public:
  ReceivedMessage(ReceivedBytes bytes, size_t header) : bytes_(std::move(bytes)), header_(header) {}
  ReceivedMessage(ReceivedMessage &&) = default;
  ReceivedMessage &operator=(ReceivedMessage &&) = default;

  // Parses the bytes where they lie, through a ZeroCopyInputStream over them (string and bytes
  // fields are copied into msg, as protobuf always does). False for bytes that do not parse.
  bool ParseInto(google::protobuf::MessageLite *msg) const {
    google::protobuf::io::ArrayInputStream in(data(), static_cast<int>(size()));
    return msg->ParseFromZeroCopyStream(&in);
  }
  const void *data() const { return static_cast<const char *>(bytes_.data()) + header_; }
  size_t size() const { return bytes_.size() - header_; }
  // True when read where it was received; false when gathered from several receive buffers.
  bool in_place() const { return bytes_.in_place(); }

private:
  ReceivedBytes bytes_;
  size_t header_;
};

namespace detail {
// Length-delimited framing: a varint of the message's size (at most 2 GiB), then the message.
struct Framing {
  static constexpr size_t kMaxHeader = 5;
  static int Varint(const void *p, size_t len, uint64_t *value, size_t *bytes) {
    const uint8_t *b = static_cast<const uint8_t *>(p);
    uint64_t v = 0;
    for (size_t i = 0; i < kMaxHeader; i++) {
      if (i == len) return 0;
      v |= uint64_t{b[i] & 0x7fu} << (7 * i);
      if (!(b[i] & 0x80)) {
        *value = v, *bytes = i + 1;
        return 1;
      }
    }
    return -EBADMSG;
  }
  int operator()(const void *p, size_t len, size_t max_bytes, size_t *total) const {
    uint64_t n;
    size_t h;
    int rc = Varint(p, len, &n, &h);
    if (rc <= 0) return rc;
    if (n > INT_MAX || n > max_bytes) return -EMSGSIZE;
    *total = h + static_cast<size_t>(n);
    return 1;
  }
};
} // namespace detail

// Cuts a stream of received bytes into length-delimited messages (stream.h): one lying whole in
// one receive buffer is parsed in place and holds its buffer while the ReceivedMessage lives;
// any other is gathered into one dataplane block as it arrives (not parsed piecewise over the
// buffers: a message of many buffers would hold them all).
class StreamReader {
public:
  explicit StreamReader(size_t max_message_bytes = size_t{1} << 30)
      : frames_(detail::Framing(), max_message_bytes, 1) {}

  // Feeds the bytes of one receive call; calls on_message(ReceivedMessage) for each message
  // they complete. Returns 0; -EBADMSG (a length of more than 5 bytes) or -EMSGSIZE (over
  // max_message_bytes) or -ENOMEM: every later call returns it; -ECANCELED likewise once an
  // exception escaped on_message (the rest of its piece went unread: the stream is cut); for
  // data NULL (the end of the stream) 0, or -EPIPE when a message was cut short.
  template <typename F> int feed(const void *data, size_t len, F &&on_message) {
    return frames_.feed(data, len, [&](ReceivedBytes &&bytes) {
      uint64_t n;
      size_t h = 0;
      detail::Framing::Varint(bytes.data(), bytes.size(), &n, &h);
      on_message(ReceivedMessage(std::move(bytes), h));
    });
  }
  size_t pending() const { return frames_.pending(); }

private:
  FrameReader<detail::Framing> frames_;
};

} // namespace protobuf
} // namespace nicmalloc

#endif // NICMALLOC_PROTOBUF_H
