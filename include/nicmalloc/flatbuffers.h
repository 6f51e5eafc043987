// FlatBuffers over nicmalloc (header-only, C++17): a builder whose buffer is dataplane memory, so
// that the finished buffer is posted with no copy, and received buffers verified and read where
// they landed.
//
//   nicmalloc::flatbuffers::Builder fbb;                  // a flatbuffers::FlatBufferBuilder
//   fbb.FinishSizePrefixed(CreateFoo(fbb, ...));          // size-prefixed on a stream
//   nicmalloc::flatbuffers::post(ep, fbb, done, arg);     // the buffer, where it lies
//   fbb.Clear();                                          // build the next at once
//
//   nicmalloc::flatbuffers::StreamReader rd;              // in the receive function:
//   rd.feed(data, len, [](nicmalloc::flatbuffers::ReceivedBuffer b) {
//     if (b.Verify<Foo>()) use(b.GetRoot<Foo>());         // in place, or gathered (stream.h)
//   });
//
// Safe across post: post() takes the finished buffer out of the builder (FlatBufferBuilder::
// Release) and keeps it until the post's done() has run, so the builder may be cleared, reused
// or destroyed at once without changing what is sent, and a buffer goes back to the allocator
// only once no post sends it. Clear() alone, without post() taking the buffer, would rewrite
// the memory being sent.
#ifndef NICMALLOC_FLATBUFFERS_H
#define NICMALLOC_FLATBUFFERS_H

#include <nicmalloc.h>
#include <nicmalloc/sg_post.h>
#include <nicmalloc/stream.h>

#include <flatbuffers/flatbuffers.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace nicmalloc {
namespace flatbuffers {

// Buffers of dataplane memory, page-aligned and whole pages (NICMALLOC_FENCE=protect holds a
// writer of any page being sent, so a buffer being built shares no page with one in flight).
// Keeps up to max_idle freed buffers for reuse. Thread-safe: a buffer may come back from a
// post's done() on another thread.
class Allocator : public ::flatbuffers::Allocator {
public:
  static constexpr size_t kPage = 4096;
  explicit Allocator(size_t max_idle = 16) : max_idle_(max_idle) {}
  ~Allocator() override {
    for (auto &b : idle_)
      free(b.first);
  }
  Allocator(const Allocator &) = delete;
  Allocator &operator=(const Allocator &) = delete;

  uint8_t *allocate(size_t size) override {
    const size_t bytes = Round(size);
    {
      std::lock_guard<std::mutex> g(mu_);
      for (size_t i = 0; i < idle_.size(); i++)
        if (idle_[i].second >= bytes && idle_[i].second <= 4 * bytes) {
          uint8_t *p = idle_[i].first;
          idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
          reused_++;
          return p;
        }
    }
    void *p = nic_aligned_alloc(kPage, bytes);
    if (!p) throw std::bad_alloc();
    return static_cast<uint8_t *>(p);
  }
  void deallocate(uint8_t *p, size_t size) override {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (idle_.size() < max_idle_) {
        idle_.emplace_back(p, Round(size));
        return;
      }
    }
    free(p);
  }
  // Buffers handed out again from the idle ones.
  uint64_t reused() const {
    std::lock_guard<std::mutex> g(mu_);
    return reused_;
  }

  // One for the process, never destroyed (done() may run late in exit), made anew in a child of
  // fork (sg_post.h).
  static Allocator &Default() { return nicmalloc::detail::ProcessWide<Allocator>::Get(); }

private:
  static size_t Round(size_t n) {
    if (n > SIZE_MAX - kPage) throw std::bad_alloc();
    return (std::max<size_t>(n, 1) + kPage - 1) / kPage * kPage;
  }
  size_t max_idle_;
  mutable std::mutex mu_;
  std::vector<std::pair<uint8_t *, size_t>> idle_;
  uint64_t reused_ = 0;
};

// A FlatBufferBuilder over dataplane buffers (the process's Allocator unless given one, which
// must then outlive every post of the builder's buffers).
class Builder : public ::flatbuffers::FlatBufferBuilder {
public:
  explicit Builder(size_t initial_size = 4096, Allocator *allocator = nullptr)
      : ::flatbuffers::FlatBufferBuilder(initial_size,
                                         allocator ? allocator : &Allocator::Default(), false) {}
};

namespace detail {
// Whether fbb's buffer is finished. FlatBufferBuilder checks that only by an assertion, compiled
// out under NDEBUG, where Release() of an unfinished builder hands over its partial bytes; its
// flag is protected, and a pointer to it may be formed in a derived class.
struct BuilderState : ::flatbuffers::FlatBufferBuilder {
  static bool IsFinished(const ::flatbuffers::FlatBufferBuilder &fbb) {
    return fbb.*(&BuilderState::finished);
  }
};
} // namespace detail

// Posts the finished buffer of fbb ([GetBufferPointer(), +GetSize()), sent where it lies) to ep,
// and takes it out of fbb, which is left empty (as after Clear()) and may be reused or destroyed
// at once. The buffer is an entry per pin step it covers; past the entry limit (max_entries;
// 0 = the endpoint's), or past what ep's receiver takes in one message (both from
// nic_endpoint_limits; 64 KiB on verbs), it is sent as several posts in a row, which a stream (TCP,
// sim and verbs through StreamReader) joins again; on a datagram socket each post is a datagram of
// its own. Returns 0 and later runs done(arg, status) once (from nic_poll or nic_wait) when the NIC
// no longer reads any of it; or -EINVAL (fbb not finished, or finished and then cleared or posted:
// it is unchanged), or a negative errno of nic_endpoint_limits or nic_sga_init/add/post before
// anything was posted (fbb is then unchanged: -EAGAIN, ep has no room now, may be posted again
// after nic_poll; -EPIPE, ep's stream was cut: sg_post.h), or of a later part (the buffer is then
// dropped, once the parts posted before the error completed: fbb is empty).
// Works with any FlatBufferBuilder; one of ours sends dataplane memory, another's buffer goes
// through the registration cache. Use FinishSizePrefixed on a stream, so that StreamReader can
// find where each buffer ends.
inline int post(nic_endpoint *ep, ::flatbuffers::FlatBufferBuilder &fbb,
                nic_sga_done_fn done = nullptr, void *arg = nullptr, unsigned max_entries = 0) {
  if (!detail::BuilderState::IsFinished(fbb) || fbb.GetSize() == 0) return -EINVAL;
  std::shared_ptr<::flatbuffers::DetachedBuffer> kept;
  try {
    kept = std::make_shared<::flatbuffers::DetachedBuffer>(); // given back after the completion
  } catch (const std::bad_alloc &) {
    return -ENOMEM;
  }
  const nicmalloc::detail::Piece piece{fbb.GetBufferPointer(), fbb.GetSize()};
  return nicmalloc::detail::PostPieces(ep, {&piece, 1, {}, kept}, done, arg, max_entries, [&] {
    *kept = fbb.Release(); // the same memory: the posted entries point into it
    fbb.Clear();           // no buffer now: only the builder's state
  });
}

// A received, size-prefixed buffer: GetRoot<T>() reads it in place (after Verify<T>() for bytes
// you do not trust). It keeps its receive buffer held, or its gathered copy, until destroyed.
class ReceivedBuffer {
public:
  explicit ReceivedBuffer(ReceivedBytes bytes) : bytes_(std::move(bytes)) {}
  ReceivedBuffer(ReceivedBuffer &&) = default;
  ReceivedBuffer &operator=(ReceivedBuffer &&) = default;

  template <typename T> bool Verify(const char *identifier = nullptr) const {
    ::flatbuffers::Verifier v(data(), size());
    return v.VerifySizePrefixedBuffer<T>(identifier);
  }
  template <typename T> const T *GetRoot() const {
    return ::flatbuffers::GetSizePrefixedRoot<T>(data());
  }
  // The whole buffer, its 4-byte size prefix included.
  const uint8_t *data() const { return static_cast<const uint8_t *>(bytes_.data()); }
  size_t size() const { return bytes_.size(); }
  // True when read where it was received; false when gathered from several receive buffers.
  bool in_place() const { return bytes_.in_place(); }

private:
  ReceivedBytes bytes_;
};

namespace detail {
// FinishSizePrefixed's framing: a 32-bit little-endian length, then that many bytes.
struct Framing {
  static constexpr size_t kMaxHeader = 4;
  int operator()(const void *p, size_t len, size_t max_bytes, size_t *total) const {
    if (len < 4) return 0;
    const uint8_t *b = static_cast<const uint8_t *>(p);
    const size_t n = size_t{b[0]} | size_t{b[1]} << 8 | size_t{b[2]} << 16 | size_t{b[3]} << 24;
    if (max_bytes < 4 || n > max_bytes - 4 || n >= FLATBUFFERS_MAX_BUFFER_SIZE) return -EMSGSIZE;
    *total = 4 + n;
    return 1;
  }
};
} // namespace detail

// Cuts a stream of received bytes into size-prefixed buffers (stream.h): one lying whole in one
// receive buffer, 8-byte aligned, is read in place and holds its buffer; any other is gathered
// into one dataplane block as it arrives.
class StreamReader {
public:
  explicit StreamReader(size_t max_message_bytes = size_t{1} << 30)
      : frames_(detail::Framing(), max_message_bytes, alignof(::flatbuffers::largest_scalar_t)) {}

  // Feeds the bytes of one receive call; calls on_buffer(ReceivedBuffer) for each buffer they
  // complete. Returns 0; -EMSGSIZE (a length over max_message_bytes: every later call returns
  // it); -ENOMEM (likewise); -ECANCELED once an exception escaped on_buffer (the rest of its
  // piece went unread: the stream is cut); for data NULL (the end of the stream) 0, or -EPIPE
  // when a buffer was cut short.
  template <typename F> int feed(const void *data, size_t len, F &&on_buffer) {
    return frames_.feed(
        data, len, [&](ReceivedBytes &&bytes) { on_buffer(ReceivedBuffer(std::move(bytes))); });
  }
  size_t pending() const { return frames_.pending(); }

private:
  FrameReader<detail::Framing> frames_;
};

} // namespace flatbuffers
} // namespace nicmalloc

#endif // NICMALLOC_FLATBUFFERS_H
