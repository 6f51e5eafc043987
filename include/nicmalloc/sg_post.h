// What the serializer adapters (capnp.h, flatbuffers.h, protobuf.h; header-only C++17) share on
// the sending side: blocks of dataplane memory that are reused only once no post sends them, and
// posting a message made of pieces as one scatter-gather message in parts the endpoint takes.
#ifndef NICMALLOC_SG_POST_H
#define NICMALLOC_SG_POST_H

#include <nicmalloc.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <pthread.h>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nicmalloc {
namespace detail {

// Blocks start on a page and fill whole pages: NICMALLOC_FENCE=protect holds writers page by
// page, so a block being written must share no page with memory that is being sent.
constexpr size_t kPage = 4096;

// A block of dataplane memory. `inflight` counts the posts sending it that have not completed;
// the memory is freed with the last reference (and free() defers it past any post anyway).
struct Block {
  char *base;
  size_t bytes;
  std::atomic<int> inflight{0};
  Block(char *b, size_t n) : base(b), bytes(n) {}
  ~Block() { free(base); }
  Block(const Block &) = delete;
  Block &operator=(const Block &) = delete;
};
using BlockRef = std::shared_ptr<Block>;

inline BlockRef NewBlock(size_t bytes) {
  if (bytes > SIZE_MAX - kPage) throw std::bad_alloc();
  bytes = (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  void *p = nic_aligned_alloc(kPage, bytes);
  if (!p) throw std::bad_alloc();
  try {
    return std::make_shared<Block>(static_cast<char *>(p), bytes);
  } catch (...) {
    free(p);
    throw;
  }
}

} // namespace detail

// Blocks kept between messages. A block comes back when its user is done with it and is handed
// out again only once every post that sent it has completed (its done() ran, from nic_poll or
// nic_wait); until then a fresh block is allocated, whatever the fence mode, so that nothing
// rewrites memory being sent and nothing waits. Thread-safe.
class BlockPool {
public:
  // max_idle: blocks kept; beyond it a returned block is freed.
  explicit BlockPool(size_t max_idle = 16) : max_idle_(max_idle) {}
  BlockPool(const BlockPool &) = delete;
  BlockPool &operator=(const BlockPool &) = delete;

  // A block of at least `bytes` bytes (zeroed when asked).
  detail::BlockRef Take(size_t bytes, bool zero) {
    detail::BlockRef r;
    {
      std::lock_guard<std::mutex> g(mu_);
      for (size_t i = 0; i < idle_.size(); i++) {
        detail::Block &b = *idle_[i];
        // acquire: the NIC's reads of the block happened before its post's done() ran.
        if (b.bytes < bytes || b.inflight.load(std::memory_order_acquire) != 0) continue;
        r = std::move(idle_[i]);
        idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
        reused_++;
        break;
      }
      if (!r) fresh_++;
    }
    if (!r) {
      r = detail::NewBlock(bytes);
      if (zero) memset(r->base, 0, r->bytes);
    } else if (zero) {
      memset(r->base, 0, r->bytes);
    }
    return r;
  }
  void Give(detail::BlockRef b) {
    std::lock_guard<std::mutex> g(mu_);
    if (idle_.size() < max_idle_) idle_.push_back(std::move(b));
  }
  size_t idle() const {
    std::lock_guard<std::mutex> g(mu_);
    return idle_.size();
  }
  // Blocks handed out again, and blocks allocated because none idle was free to reuse.
  uint64_t reused() const {
    std::lock_guard<std::mutex> g(mu_);
    return reused_;
  }
  uint64_t fresh() const {
    std::lock_guard<std::mutex> g(mu_);
    return fresh_;
  }

private:
  size_t max_idle_;
  mutable std::mutex mu_;
  std::vector<detail::BlockRef> idle_;
  uint64_t reused_ = 0, fresh_ = 0;
};

namespace detail {

// One object of T for the process (default-constructed at its first use, never destroyed:
// done() may run late in exit) that a child of fork can use. The child has only the thread that
// forked: another thread may have held the object's mutex at that moment, or been changing it,
// and its first use in the child would wait forever. So the child gets a T made anew (the
// parent's is left as it is, never freed: a half-changed one could not be), which suits what
// these objects hold: the parent's posts never complete in the child, and its endpoints take no
// post there (nicmalloc.h). pthread_once rather than a static local: glibc runs again, in the
// child, a first use that another thread had under way, where a static local's guard would wait
// for that thread forever. pthread_atfork, from libc_nonshared.a, registers the handler with the
// program or shared library this is compiled into, and a dlclose of that library unregisters it.
template <typename T> class ProcessWide {
public:
  static T &Get() {
    pthread_once(&once_, Make);
    return *std::launder(reinterpret_cast<T *>(storage_));
  }

private:
  static void Make() {
    new (storage_) T;
    pthread_atfork(nullptr, nullptr, InChild); // without memory for it, fork is not handled
  }
  static void InChild() { new (storage_) T; }
  static inline pthread_once_t once_ = PTHREAD_ONCE_INIT;
  alignas(T) static inline unsigned char storage_[sizeof(T)];
};

// The messages posted to one endpoint make one stream of bytes, which the peer's reader cuts
// into messages by their framing (stream.h). A part that does not arrive while parts after it
// do leaves a hole no reader can frame past: the stream is cut, and the adapters post nothing
// more to it until the program starts it again (stream_restart). An endpoint's stream is listed
// from its first message on, for as long as the endpoint lives, so that a message only looks it
// up, once, and counts itself out without the list's lock.
struct Stream {
  std::atomic<int> cut{0};      // the error that cut it, or 0
  std::atomic<size_t> users{0}; // messages in flight: counted in under the list's lock
  uint64_t cut_at = 0;          // the first message that lost a part (under the list's lock)
  uint64_t next = 0;            // the number of the next message (under the list's lock)
};

// Whose stream: the endpoint's nic_endpoint_id, which no endpoint made after it is destroyed
// gets, even at its address, so that a cut stream never passes to a newcomer; the address only
// tells apart endpoints nicmalloc did not make (id 0).
struct StreamKey {
  uint64_t id;
  const nic_endpoint *ep;
  explicit StreamKey(const nic_endpoint *e) : id(nic_endpoint_id(e)), ep(e) {}
  bool operator==(const StreamKey &o) const { return id == o.id && ep == o.ep; }
  // Whether the endpoint is still the one listed (nicmalloc's, and not destroyed).
  bool Alive() const { return id != 0 && nic_endpoint_id(ep) == id; }
  struct Hash {
    size_t operator()(const StreamKey &k) const {
      return std::hash<uint64_t>()(k.id) ^ std::hash<const void *>()(k.ep);
    }
  };
};

// The streams of the process (ProcessWide<Streams>). nic_endpoint_id, which takes the endpoints'
// lock, is never asked under this one: done() functions take it (Cut, After), and the library
// may run them from under locks of its own.
class Streams {
public:
  static Streams &Get() { return ProcessWide<Streams>::Get(); }
  // ep's stream, one message more on it, numbered *seq; nullptr when there is no memory.
  Stream *Join(const nic_endpoint *ep, uint64_t *seq) {
    const StreamKey k(ep);
    Stream *s;
    bool sweep = false;
    {
      std::lock_guard<std::mutex> g(mu_);
      try {
        auto made = map_.try_emplace(k);
        s = &made.first->second;
        if (made.second && map_.size() >= sweep_at_) {
          sweep = true;
          sweep_at_ = SIZE_MAX; // one sweep at a time
        }
      } catch (const std::bad_alloc &) {
        return nullptr;
      }
      s->users.fetch_add(1, std::memory_order_relaxed);
      *seq = s->next++;
    }
    if (sweep) Sweep();
    return s;
  }
  // Message seq of s lost a part, with error why. The first error stays; the hole is where the
  // earliest such message is.
  void Cut(Stream *s, uint64_t seq, int why) {
    std::lock_guard<std::mutex> g(mu_);
    if (!s->cut.load(std::memory_order_relaxed) || seq < s->cut_at) s->cut_at = seq;
    int zero = 0;
    s->cut.compare_exchange_strong(zero, why);
  }
  // Whether message seq of s was posted after the hole (its bytes cannot be framed).
  bool After(Stream *s, uint64_t seq) {
    std::lock_guard<std::mutex> g(mu_);
    return s->cut.load(std::memory_order_relaxed) && seq > s->cut_at;
  }
  // One message of s fewer in flight: the last use of s by that message. release: a sweep that
  // then reads none in flight drops s after it.
  void Leave(Stream *s) { s->users.fetch_sub(1, std::memory_order_release); }
  int Error(const StreamKey &k) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = map_.find(k);
    return it == map_.end() ? 0 : it->second.cut.load(std::memory_order_relaxed);
  }
  void Restart(const StreamKey &k) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = map_.find(k);
    if (it != map_.end()) it->second.cut.store(0, std::memory_order_relaxed);
  }
  // Streams listed (for tests).
  size_t Listed() {
    std::lock_guard<std::mutex> g(mu_);
    return map_.size();
  }

private:
  // Drops the streams of endpoints destroyed since they were listed, cut or not (no endpoint
  // made later matches them), once none of their messages is in flight. Run whenever the list
  // has doubled since the last sweep, so that a message pays for it a constant on average and
  // the list holds at most twice the endpoints alive (and kMinSweep).
  void Sweep() {
    std::vector<StreamKey> idle;
    {
      std::lock_guard<std::mutex> g(mu_);
      try {
        for (auto &e : map_)
          if (e.second.users.load(std::memory_order_acquire) == 0) idle.push_back(e.first);
      } catch (const std::bad_alloc &) { // those gathered so far
      }
    }
    idle.erase(
        std::remove_if(idle.begin(), idle.end(), [](const StreamKey &k) { return k.Alive(); }),
        idle.end());
    std::lock_guard<std::mutex> g(mu_);
    for (const StreamKey &k : idle) {
      auto it = map_.find(k);
      if (it != map_.end() && it->second.users.load(std::memory_order_acquire) == 0) map_.erase(it);
    }
    sweep_at_ = std::max(kMinSweep, 2 * map_.size());
  }
  static constexpr size_t kMinSweep = 64;
  std::mutex mu_;
  std::unordered_map<StreamKey, Stream, StreamKey::Hash> map_; // nodes: a Stream never moves
  size_t sweep_at_ = kMinSweep;                                // the list's size that sweeps
};

// One message, posted in one or more parts: done() runs once every part has completed, after
// the blocks it sent are marked free of this post; what it keeps goes after done(). A part that
// completes with an error cuts the stream, and done() gets the error; a message posted after
// the hole whose done() runs once it is known gets -EPIPE.
struct PostRecord {
  std::atomic<int> pending{1}; // parts posted, plus one for the poster until it is done
  std::atomic<int> status{0};
  nic_sga_done_fn done = nullptr;
  void *arg = nullptr;
  std::vector<BlockRef> blocks;     // kept from reuse until the last part completes
  std::shared_ptr<const void> keep; // what the pieces lie in, released then
  Stream *stream = nullptr;
  uint64_t seq = 0; // the message's number in its stream

  void Finish(int st) {
    int zero = 0;
    if (st) {
      status.compare_exchange_strong(zero, st);
      Streams::Get().Cut(stream, seq, st);
    }
    if (pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    for (auto &b : blocks)
      b->inflight.fetch_sub(1, std::memory_order_release);
    int final_status = status.load();
    if (!final_status && done && stream->cut.load(std::memory_order_relaxed) &&
        Streams::Get().After(stream, seq))
      final_status = -EPIPE;
    if (done) done(arg, final_status);
    Streams::Get().Leave(stream);
    delete this;
  }
  static void PartDone(void *a, int st) { static_cast<PostRecord *>(a)->Finish(st); }
};

// How long a part after a message's first waits for room on its endpoint (nic_sga_post's
// -EAGAIN: a dpdk port's tx queue and backlog full, a verbs QP's send queue or send CQ full), as
// long as NICMALLOC_FENCE_TIMEOUT_MS's default: past it the message stays cut short, and so does
// the stream.
constexpr std::chrono::milliseconds kRoomWait{5000};

// Posts a part after a message's first that ep had no room for: the parts before it are on
// their way, so it must follow them. Polls (nic_wait: completions reaped free room, and on dpdk
// polls send the backlog) and posts it again. 0; -EPIPE when the stream was cut meanwhile (a part
// completed with an error); -ETIMEDOUT after kRoomWait; or another error of nic_sga_post.
inline int PostWhenRoom(nic_sga *sga, nic_endpoint *ep, PostRecord *rec) {
  const auto end = std::chrono::steady_clock::now() + kRoomWait;
  for (;;) {
    nic_wait(1);
    if (rec->stream->cut.load(std::memory_order_relaxed)) return -EPIPE;
    const int rc = nic_sga_post(sga, ep, PostRecord::PartDone, rec);
    if (rc != -EAGAIN) return rc;
    if (std::chrono::steady_clock::now() >= end) return -ETIMEDOUT;
  }
}

struct Piece {
  const void *p;
  size_t len;
};

// What a message's posts send, and what they keep until the last of them completes (even when
// a later part failed: the earlier ones still read it).
struct Outgoing {
  const Piece *pieces;
  size_t n;
  std::vector<BlockRef> blocks;     // marked in flight: a BlockPool does not hand them out
  std::shared_ptr<const void> keep; // released after done() (a message, a buffer)
};

// How much of [p, p + len) lies in the registered region p is in (a dataplane step): all of it
// for memory that is not dataplane (the registration cache registers a range whole).
inline size_t InOneRegion(const void *p, size_t len) {
  nic_region_ref ref;
  if (nic_translate(p, 1, &ref) != 0 || ref.region_len <= ref.offset) return len;
  const size_t left = ref.region_len - ref.offset;
  return len < left ? len : left;
}

struct NoHook {
  void operator()() const {}
};

// Posts the pieces, in order, to ep as one scatter-gather message, in parts that ep takes
// (nic_endpoint_limits): at most max_entries entries (0: ep's limit; a larger one is held to
// it) and at most the bytes ep's receiver takes in one message (64 KiB on verbs). A full part
// is posted and the next one begun (posts on one endpoint arrive in post order, so a stream
// peer sees one run of bytes, which the stream readers join), so that nothing is copied to stay
// under the entry limit (nic_sga_add would copy neighbours up to 64 KiB together, and fail past
// that). A part ep refuses as too many entries (-E2BIG: a dpdk port, where an entry over 64 KiB
// is several segments; nothing was posted) is built again with half as many, and so are the
// parts after it. A part after the first that ep has no room for (-EAGAIN) is posted once there
// is (PostWhenRoom), the parts before it being sent already. Empty pieces are skipped.
// after_first_post() runs once, right after the first part was taken (not when an error comes
// first). Returns 0 and later runs done(arg, status) once, when every part completed; or
// -EPIPE (ep's stream was cut: nothing posted), or a negative errno of nic_endpoint_limits or
// nic_sga_init/add/post, and done() does not run. An error before any part was taken leaves the
// stream as it was (-EAGAIN: ep has no room now; poll and post again); one after cuts it (parts
// posted before the error are on their way, and out.blocks and out.keep are kept until they
// complete).
template <typename Hook = NoHook>
inline int PostPieces(nic_endpoint *ep, Outgoing out, nic_sga_done_fn done, void *arg,
                      unsigned max_entries, Hook &&after_first_post = Hook()) {
  unsigned entries;
  size_t max_bytes;
  int rc = nic_endpoint_limits(ep, &entries, &max_bytes);
  if (rc) return rc;
  if (max_entries && max_entries < entries) entries = max_entries;
  auto *rec = new (std::nothrow) PostRecord;
  if (!rec) return -ENOMEM;
  rec->stream = Streams::Get().Join(ep, &rec->seq);
  if (!rec->stream) {
    delete rec;
    return -ENOMEM;
  }
  rec->done = done;
  rec->arg = arg;
  rec->blocks = std::move(out.blocks);
  rec->keep = std::move(out.keep);
  for (auto &b : rec->blocks)
    b->inflight.fetch_add(1, std::memory_order_relaxed);
  const Piece *const pieces = out.pieces;
  const size_t n = out.n;
  nic_sga sga;
  rc = rec->stream->cut.load(std::memory_order_relaxed) ? -EPIPE : nic_sga_init(&sga, entries);
  bool live = rc == 0; // sga initialised: holds entries of ours, or none
  bool posted = false;
  // The next byte to add (piece i, offset off), where the array's part began, and its bytes.
  size_t i = 0, off = 0, part_i = 0, part_off = 0, part_bytes = 0;
  while (!rc) {
    while (i < n && off >= pieces[i].len)
      i++, off = 0;
    const bool end = i == n;
    if (end || sga.count >= sga.max || part_bytes >= max_bytes) {
      if (sga.count == 0) { // nothing left, or nothing at all to send
        if (!posted) rc = -EINVAL;
        break;
      }
      // A part of this message or an earlier one failed meanwhile: the rest would follow a hole.
      if (posted && rec->stream->cut.load(std::memory_order_relaxed)) {
        rc = -EPIPE;
        break;
      }
      rec->pending.fetch_add(1, std::memory_order_relaxed);
      rc = nic_sga_post(&sga, ep, PostRecord::PartDone, rec);
      if (rc == -EAGAIN && posted) rc = PostWhenRoom(&sga, ep, rec);
      if (rc) rec->pending.fetch_sub(1, std::memory_order_relaxed);
      if (rc == -E2BIG && sga.count > 1) { // the same part again, in smaller ones
        entries = sga.count / 2;
        nic_sga_reset(&sga);
        i = part_i, off = part_off, part_bytes = 0;
        rc = nic_sga_init(&sga, entries);
        live = rc == 0;
        continue;
      }
      if (rc) break;
      if (!posted) after_first_post();
      posted = true;
      if (end) break;
      part_i = i, part_off = off, part_bytes = 0;
      continue; // the array is empty again
    }
    // A piece one registered region (dataplane step) at a time: a piece across a step end takes
    // an entry per step, so an array with one entry left could not take it whole.
    const char *at = static_cast<const char *>(pieces[i].p) + off;
    const size_t len = std::min(InOneRegion(at, pieces[i].len - off), max_bytes - part_bytes);
    rc = nic_sga_add(&sga, at, len);
    if (!rc) off += len, part_bytes += len;
  }
  if (rc) {
    if (live) nic_sga_reset(&sga);
    if (posted) Streams::Get().Cut(rec->stream, rec->seq, rc); // the message is cut short
    rec->done = nullptr; // the caller hears of the error from the return value
  }
  rec->Finish(0);
  return rc;
}

} // namespace detail

// The error that cut the stream of messages the adapters post to ep, or 0: a part of a message
// completed with it (done() got it), or could not be posted after the parts before it
// (post returned it). From then on every post to ep returns -EPIPE, nothing sent: the peer's
// reader has lost bytes in the middle of the stream and cannot frame what follows. The stream
// is ep's own (nic_endpoint_id): an endpoint made after ep is destroyed starts whole, even at
// ep's address. A child of fork starts with no stream cut: the parent's endpoints take no post
// there.
inline int stream_error(const nic_endpoint *ep) {
  return detail::Streams::Get().Error(detail::StreamKey(ep));
}
// Takes posts to ep again after its stream was cut: for a peer that starts reading afresh (a
// new StreamReader on a new connection). Call it once the posts on ep have completed.
inline void stream_restart(const nic_endpoint *ep) {
  detail::Streams::Get().Restart(detail::StreamKey(ep));
}

} // namespace nicmalloc

#endif // NICMALLOC_SG_POST_H
