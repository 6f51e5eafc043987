// Cutting received bytes into messages, for the serializer adapters (capnp.h, flatbuffers.h,
// protobuf.h; header-only C++17). An endpoint's receive function gets a stream of bytes in
// pieces (one receive buffer each); the framing of each serializer tells how long a message is
// from its first bytes. A message that lies whole in one piece, suitably aligned, is handed out
// in place: its receive buffer is held (nic_hold) while the message lives. Any other message
// (split over pieces, as a TCP stream or a post split past the entry limit delivers it, or
// misaligned) is gathered: copied, as its pieces arrive, into one dataplane block of its own. So
// no buffer is held for a message that is not complete, and a message larger than all of an
// endpoint's receive buffers together still arrives.
#ifndef NICMALLOC_STREAM_H
#define NICMALLOC_STREAM_H

#include <nicmalloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace nicmalloc {

// A received message's bytes, and what keeps them where they are: a hold on the receive buffer,
// or the gathered copy.
class ReceivedBytes {
public:
  ReceivedBytes(const void *data, size_t size, const void *held, void *owned)
      : data_(data), size_(size), held_(held), owned_(owned) {}
  ~ReceivedBytes() { Drop(); }
  ReceivedBytes(ReceivedBytes &&o) noexcept
      : data_(o.data_), size_(o.size_), held_(o.held_), owned_(o.owned_) {
    o.held_ = nullptr, o.owned_ = nullptr;
  }
  ReceivedBytes &operator=(ReceivedBytes &&o) noexcept {
    if (this != &o) {
      Drop();
      data_ = o.data_, size_ = o.size_, held_ = o.held_, owned_ = o.owned_;
      o.held_ = nullptr, o.owned_ = nullptr;
    }
    return *this;
  }
  ReceivedBytes(const ReceivedBytes &) = delete;
  ReceivedBytes &operator=(const ReceivedBytes &) = delete;

  const void *data() const { return data_; }
  size_t size() const { return size_; }
  // True when read where it was received; false when gathered from several pieces.
  bool in_place() const { return held_ != nullptr; }

private:
  void Drop() {
    if (held_) nic_release(held_);
    free(owned_);
    held_ = nullptr, owned_ = nullptr;
  }
  const void *data_;
  size_t size_;
  const void *held_;
  void *owned_;
};

// Framing: a type with
//   static constexpr size_t kMaxHeader;  // bytes that always suffice to know a message's size
//   int operator()(const void *p, size_t len, size_t max_bytes, size_t *total) const;
//     // from a message's first len bytes: 1 and its whole size in *total, 0 when more bytes
//     // are needed, or a negative errno (the stream is not framed so: it stops for good)
template <typename Framing> class FrameReader {
public:
  // align: a message is handed out in place only when it starts at a multiple of it.
  FrameReader(Framing framing, size_t max_message_bytes, size_t align)
      : framing_(std::move(framing)), max_bytes_(max_message_bytes), align_(align) {}
  ~FrameReader() { free(gather_); }
  FrameReader(const FrameReader &) = delete;
  FrameReader &operator=(const FrameReader &) = delete;

  // Feeds the bytes of one receive call (data, as the receive function got it); calls
  // on_frame(ReceivedBytes &&) for each message they complete. Returns 0; or the framing's
  // error, or -ENOMEM (no memory to gather a message into: the stream is cut), after which
  // every call returns it. An exception out of on_frame leaves the rest of the piece unread, so
  // the stream is cut there too: every later call returns -ECANCELED (and so does a call from
  // inside on_frame). data NULL (the end of the stream) returns 0 when no message was cut
  // short, else -EPIPE.
  template <typename F> int feed(const void *data, size_t len, F &&on_frame) {
    if (error_) return error_;
    if (!data) return pending() ? -EPIPE : 0;
    const char *p = static_cast<const char *>(data);
    while (len > 0) {
      if (gather_) { // completing a gathered message
        size_t n = std::min(len, total_ - have_);
        memcpy(static_cast<char *>(gather_) + have_, p, n);
        have_ += n, p += n, len -= n;
        if (have_ < total_) return 0;
        void *g = gather_;
        const size_t size = total_;
        gather_ = nullptr, have_ = total_ = 0;
        Hand(on_frame, ReceivedBytes(g, size, nullptr, g));
        continue;
      }
      size_t total = 0;
      if (header_.empty()) {
        int rc = framing_(p, len, max_bytes_, &total);
        if (rc > 0 && total == 0) rc = -EBADMSG; // the framing must count its own header
        if (rc < 0) return error_ = rc;
        if (rc == 0) { // not even the header: keep its bytes
          header_.assign(p, p + len);
          return 0;
        }
        // Receive buffers are dataplane memory; bytes fed from elsewhere (a copy, a test) are
        // gathered, without a nic_hold that would fail and be reported.
        if (len >= total && reinterpret_cast<uintptr_t>(p) % align_ == 0 &&
            nic_is_dataplane(data) && nic_hold(data) == 0) {
          Hand(on_frame, ReceivedBytes(p, total, data, nullptr)); // whole in this piece: in place
          p += total, len -= total;
          continue;
        }
      } else {
        // The header began in an earlier piece: look at it with this piece's first bytes.
        const size_t before = header_.size();
        header_.insert(header_.end(), p, p + std::min(len, Framing::kMaxHeader));
        int rc = framing_(header_.data(), header_.size(), max_bytes_, &total);
        header_.resize(before);
        if (rc > 0 && total <= before) rc = -EBADMSG;
        if (rc < 0) return error_ = rc;
        if (rc == 0) {
          header_.insert(header_.end(), p, p + len);
          return 0;
        }
      }
      // Gather: the earlier header bytes now, this piece's bytes at the top of the loop.
      gather_ = nic_malloc(std::max<size_t>(total, 1));
      if (!gather_) return error_ = -ENOMEM;
      total_ = total;
      // memcpy from an empty vector's data(), which may be NULL, is undefined even for 0 bytes.
      if (!header_.empty()) memcpy(gather_, header_.data(), header_.size());
      have_ = header_.size();
      header_.clear();
    }
    return 0;
  }

  // Bytes of a message begun and not yet complete.
  size_t pending() const { return gather_ ? have_ : header_.size(); }

private:
  // The stream counts as cut until on_frame returns: an exception out of it leaves it so.
  template <typename F> void Hand(F &on_frame, ReceivedBytes &&bytes) {
    error_ = -ECANCELED;
    on_frame(std::move(bytes));
    error_ = 0;
  }

  Framing framing_;
  size_t max_bytes_, align_;
  int error_ = 0;
  std::vector<char> header_; // the first bytes of a message whose size is not known yet
  void *gather_ = nullptr;   // the message being gathered: total_ bytes, have_ of them in
  size_t total_ = 0, have_ = 0;
};

} // namespace nicmalloc

#endif // NICMALLOC_STREAM_H
