// The transport experiments of bench/serialize (README.md), through nicmalloc's C API only:
//
//   ser_net throughput TRANSPORT MODE SIZES MESSAGES   Figure 3: one buffer per message
//   ser_net entries TRANSPORT MODE COUNTS MESSAGES     1 KiB in COUNTS entries, round trips
//   ser_net echo SERIALIZER SIZES CLIENTS SECONDS      Figure 2: echo server over io_uring TCP
//
// TRANSPORT is sim, uring or dpdk and must match NICMALLOC_BACKEND (dpdk: NICMALLOC_DPDK_VDEV=
// net_ring0). MODE names what NICMALLOC_COPY_THRESHOLD was set to by the caller: zero-copy (the
// entries are sent from where they lie) or copy-out (every entry is copied into a bounce
// buffer); each row checks it against the bytes nicmalloc copied and says "mode-mismatch"
// otherwise. SERIALIZER is sg, protobuf, capnp or flatbuffers. Lists are comma-separated.
// Every row is one CSV line on stdout; its header is printed first.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "echo.capnp.h"
#include "echo.pb.h"
#include "echo_generated.h"
#include "nicmalloc.h"

namespace {

uint64_t NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
}

std::vector<size_t> List(const char *s) {
  std::vector<size_t> v;
  for (const char *p = s; *p;) {
    char *end;
    v.push_back(strtoull(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break;
  }
  return v;
}

[[noreturn]] void Die(const char *what) {
  fprintf(stderr, "ser_net: %s\n", what);
  exit(2);
}

nic_stats Stats() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

double Pct(std::vector<uint64_t> &v, double q) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(i), v.end());
  return static_cast<double>(v[i]);
}

// Waits for work: the io_uring and sim backends have an event descriptor to block on; DPDK is
// polled (nic_wait would sleep a millisecond between polls).
bool g_spin = false;
void Progress() {
  if (g_spin || nic_poll(0) > 0) {
    if (g_spin) nic_poll(0);
    return;
  }
  nic_wait(10);
}

// Two connected TCP sockets on 127.0.0.1 (an ephemeral port).
void TcpPair(int *a, int *b) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (l < 0 || bind(l, reinterpret_cast<sockaddr *>(&addr), sizeof addr) || listen(l, 64) ||
      getsockname(l, reinterpret_cast<sockaddr *>(&addr), &len))
    Die("loopback listener");
  *a = socket(AF_INET, SOCK_STREAM, 0);
  if (*a < 0 || connect(*a, reinterpret_cast<sockaddr *>(&addr), sizeof addr)) Die("connect");
  *b = accept(l, nullptr, nullptr);
  if (*b < 0) Die("accept");
  const int one = 1;
  setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  close(l);
}

// ---- One sender and one receiver on a transport ----
struct Sink {
  uint64_t bytes = 0, messages = 0;
  uint64_t last_ns = 0;
  static void Fn(void *arg, void *data, size_t len) {
    auto *s = static_cast<Sink *>(arg);
    if (!data) return;
    s->bytes += len;
    s->messages++;
    s->last_ns = NowNs();
  }
};

struct Link {
  std::string transport;
  nic_endpoint *tx = nullptr, *rx = nullptr;
  int fds[2] = {-1, -1};
  Sink sink;
};

void Open(Link &l, const std::string &transport) {
  l.transport = transport;
  if (transport == "sim") {
    // Posting to a sim endpoint delivers to its own receive function.
    l.tx = l.rx = nic_sim_endpoint_create(Sink::Fn, &l.sink, 0);
    if (!l.tx) Die("nic_sim_endpoint_create (NICMALLOC_BACKEND=sim?)");
    return;
  }
  if (transport == "uring") {
    TcpPair(&l.fds[0], &l.fds[1]);
    l.tx = nic_uring_endpoint_create(l.fds[0]);
    l.rx = nic_uring_endpoint_create(l.fds[1]);
    if (!l.tx || !l.rx) Die("nic_uring_endpoint_create (NICMALLOC_BACKEND=uring?)");
  } else if (transport == "dpdk") {
    // net_ring0 loops back to itself: the receiver is handed the sender's very mbufs.
    l.tx = l.rx = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
    if (!l.tx)
      Die("nic_dpdk_endpoint_create (NICMALLOC_BACKEND=dpdk, NICMALLOC_DPDK_VDEV=net_ring0?)");
    g_spin = true;
  } else {
    Die("transport is sim, uring or dpdk");
  }
  const int rc = nic_endpoint_receive(l.rx, Sink::Fn, &l.sink);
  if (rc) Die("nic_endpoint_receive");
}

void Close(Link &l) {
  for (nic_endpoint *ep : {l.tx, l.rx}) {
    if (!ep) continue;
    int (*destroy)(nic_endpoint *) = l.transport == "sim"     ? nic_sim_endpoint_destroy
                                     : l.transport == "uring" ? nic_uring_endpoint_destroy
                                                              : nic_dpdk_endpoint_destroy;
    const uint64_t until = NowNs() + 10000000000ull;
    while (destroy(ep) == -EBUSY && NowNs() < until)
      nic_poll(0);
    if (l.rx == l.tx) break;
  }
  for (int fd : l.fds)
    if (fd >= 0) close(fd);
}

struct Done {
  int *free_slots; // the free list a completion gives its slot back to, cap entries deep
  int cap;
  int *nfree;
  int slot;
  int status;
  uint64_t *completed;
  static void Fn(void *arg, int status) {
    auto *d = static_cast<Done *>(arg);
    if (status) d->status = status;
    if (*d->nfree >= d->cap) Die("a completion with its slot already free");
    d->free_slots[(*d->nfree)++] = d->slot;
    (*d->completed)++;
  }
};

// What the row's bytes copied say about its mode.
const char *ModeCheck(const std::string &mode, uint64_t copied, uint64_t payload) {
  if (mode == "zero-copy") return copied == 0 ? "ok" : "mode-mismatch";
  if (mode == "copy-out") return copied >= payload ? "ok" : "mode-mismatch";
  return "mode-mismatch";
}

// Figure 3: MESSAGES messages of SIZE bytes, each one dataplane buffer posted as one entry, with
// kWindow of them in flight; throughput counted at the receiver.
int Throughput(const std::string &transport, const std::string &mode, const char *sizes,
               uint64_t messages) {
  constexpr int kWindow = 32;
  Link l;
  Open(l, transport);
  printf("transport,mode,size,messages,seconds,msgs_per_s,mb_per_s,copied_per_msg,status\n");
  for (size_t size : List(sizes)) {
    std::vector<uint8_t *> bufs(kWindow);
    for (auto &b : bufs) {
      b = static_cast<uint8_t *>(nic_malloc(size));
      if (!b) Die("nic_malloc");
      memset(b, static_cast<int>(size), size);
    }
    int free_slots[kWindow], nfree = 0;
    uint64_t completed = 0;
    std::vector<Done> done(kWindow);
    for (int i = 0; i < kWindow; i++) {
      free_slots[nfree++] = i;
      done[i] = {free_slots, kWindow, &nfree, i, 0, &completed};
    }
    // A tenth of the messages warm up (chunk registration, bounce slabs, sockets), then the run.
    const uint64_t warm = messages / 10 + 1;
    uint64_t posted = 0, errors = 0;
    uint64_t t0 = 0, sink0 = 0;
    const uint64_t base = l.sink.bytes; // what earlier sizes delivered
    nic_stats s0{};
    const uint64_t limit = NowNs() + 120000000000ull;
    while ((completed < warm + messages || l.sink.bytes - base < (warm + messages) * size) &&
           NowNs() < limit) {
      if (posted == warm && completed == warm && l.sink.bytes - base == warm * size && !t0) {
        t0 = NowNs();
        sink0 = l.sink.bytes;
        s0 = Stats();
      }
      while (nfree && posted < warm + messages && (posted < warm || t0)) {
        const int slot = free_slots[--nfree];
        nic_sga sga;
        int rc = nic_sga_init(&sga, 0);
        if (!rc) rc = nic_sga_add(&sga, bufs[slot], size);
        if (!rc) rc = nic_sga_post(&sga, l.tx, Done::Fn, &done[slot]);
        if (rc) {
          nic_sga_reset(&sga);
          free_slots[nfree++] = slot;
          errors++;
          break;
        }
        posted++;
      }
      Progress();
    }
    const nic_stats s1 = Stats();
    const uint64_t t1 = l.sink.last_ns; // the last message's arrival
    const double secs = t0 ? static_cast<double>(t1 - t0) / 1e9 : 0;
    const uint64_t got = t0 ? (l.sink.bytes - sink0) / size : 0;
    const uint64_t copied = t0 ? s1.bounce_bytes - s0.bounce_bytes : 0;
    bool bad_status = false;
    for (auto &d : done)
      bad_status |= d.status != 0;
    const char *status = !t0 || got != messages ? "incomplete"
                         : errors || bad_status ? "post-errors"
                                                : ModeCheck(mode, copied, messages * size);
    printf("%s,%s,%zu,%llu,%.6f,%.0f,%.2f,%.1f,%s\n", transport.c_str(), mode.c_str(), size,
           static_cast<unsigned long long>(got), secs, secs > 0 ? got / secs : 0,
           secs > 0 ? got * size / secs / 1e6 : 0, got ? static_cast<double>(copied) / got : 0,
           status);
    fflush(stdout);
    for (auto &b : bufs)
      free(b);
  }
  Close(l);
  return 0;
}

// 1 KiB in COUNT entries: pieces 4 KiB apart in one dataplane block (never adjacent, so never
// coalesced), one message at a time; post cost (init + adds + post) and round trip (post to
// received and completed) per message.
int Entries(const std::string &transport, const std::string &mode, const char *counts,
            uint64_t messages) {
  constexpr size_t kTotal = 1024, kStride = 4096;
  Link l;
  Open(l, transport);
  auto *block = static_cast<uint8_t *>(nic_aligned_alloc(4096, kStride * 32));
  if (!block) Die("nic_aligned_alloc");
  memset(block, 0x5a, kStride * 32);
  printf("transport,mode,entries,messages,entries_posted,post_ns_p50,rtt_us_p50,rtt_us_p99,"
         "rtt_us_p999,copied_per_msg,modeled_misses_per_msg,status\n");
  for (size_t k : List(counts)) {
    if (!k || k > 32 || kTotal % k) Die("entries: 1..32, dividing 1024");
    const size_t piece = kTotal / k;
    std::vector<uint64_t> post_ns, rtt_ns;
    post_ns.reserve(messages);
    rtt_ns.reserve(messages);
    const uint64_t warm = messages / 10 + 1;
    uint64_t completed = 0, errors = 0, copied = 0, misses = 0;
    uint32_t posted_entries = 0;
    int free_slot[1], nfree = 0; // Done's free list, one slot deep
    Done d = {free_slot, 1, &nfree, 0, 0, &completed};
    nic_stats s0{};
    for (uint64_t i = 0; i < warm + messages; i++) {
      if (i == warm) s0 = Stats();
      const uint64_t want_bytes = l.sink.bytes + kTotal, want_done = completed + 1;
      const uint64_t t0 = NowNs();
      nic_sga sga;
      int rc = nic_sga_init(&sga, 0);
      for (size_t e = 0; e < k && !rc; e++)
        rc = nic_sga_add(&sga, block + e * kStride, piece);
      const uint32_t n = sga.count;
      if (!rc) rc = nic_sga_post(&sga, l.tx, Done::Fn, &d);
      const uint64_t t1 = NowNs();
      if (rc) {
        nic_sga_reset(&sga);
        errors++;
        continue;
      }
      const uint64_t limit = t1 + 10000000000ull;
      while ((l.sink.bytes < want_bytes || completed < want_done) && NowNs() < limit)
        nic_poll(0); // a round trip is measured spinning, whatever the transport
      const uint64_t t2 = NowNs();
      nfree = 0; // one message at a time: its completion gave back the one slot
      if (completed < want_done) {
        errors++;
        break;
      }
      if (i >= warm) {
        post_ns.push_back(t1 - t0);
        rtt_ns.push_back(t2 - t0);
        posted_entries = n;
      }
    }
    const nic_stats s1 = Stats();
    copied = s1.bounce_bytes - s0.bounce_bytes;
    misses = s1.nic_modeled_misses - s0.nic_modeled_misses;
    const uint64_t got = rtt_ns.size();
    const char *status = got != messages      ? "incomplete"
                         : errors || d.status ? "post-errors"
                                              : ModeCheck(mode, copied, messages * kTotal);
    printf("%s,%s,%zu,%llu,%u,%.0f,%.2f,%.2f,%.2f,%.1f,%.3f,%s\n", transport.c_str(), mode.c_str(),
           k, static_cast<unsigned long long>(got), posted_entries, Pct(post_ns, 0.5),
           Pct(rtt_ns, 0.5) / 1e3, Pct(rtt_ns, 0.99) / 1e3, Pct(rtt_ns, 0.999) / 1e3,
           got ? static_cast<double>(copied) / got : 0, got ? static_cast<double>(misses) / got : 0,
           status);
    fflush(stdout);
  }
  free(block);
  Close(l);
  return 0;
}

// ---- Figure 2: the echo server ----
// A frame on the stream: this header, then the message the serializer made.
struct Frame {
  uint32_t len;
  uint32_t magic;
};
constexpr uint32_t kMagic = 0x45434831;

enum class Ser { kSg, kProtobuf, kCapnp, kFlatbuffers };

Ser ParseSer(const std::string &s) {
  if (s == "sg") return Ser::kSg;
  if (s == "protobuf") return Ser::kProtobuf;
  if (s == "capnp") return Ser::kCapnp;
  if (s == "flatbuffers") return Ser::kFlatbuffers;
  Die("serializer is sg, protobuf, capnp or flatbuffers");
}

// Words of a Cap'n Proto first segment that holds the root and a payload of size bytes.
size_t CapnpWords(size_t size) {
  return size / sizeof(capnp::word) + 16;
}

// The message each serializer makes for payload p (the client's request and the reply the
// server must send back, byte for byte: all three encodings are deterministic).
std::vector<uint8_t> Encode(Ser ser, const uint8_t *p, size_t n) {
  std::vector<uint8_t> out;
  switch (ser) {
  case Ser::kSg:
    out.assign(p, p + n);
    break;
  case Ser::kProtobuf: {
    serbench::Echo m;
    m.set_payload(p, n);
    out.resize(m.ByteSizeLong());
    m.SerializeWithCachedSizesToArray(out.data());
    break;
  }
  case Ser::kCapnp: {
    std::vector<capnp::word> seg(CapnpWords(n), capnp::word{});
    capnp::MallocMessageBuilder b(kj::arrayPtr(seg.data(), seg.size()));
    b.initRoot<Echo>().setPayload(capnp::Data::Reader(p, n));
    auto flat = capnp::messageToFlatArray(b);
    auto bytes = flat.asBytes();
    out.assign(bytes.begin(), bytes.end());
    break;
  }
  case Ser::kFlatbuffers: {
    flatbuffers::FlatBufferBuilder fbb(n + 64);
    serbench::fb::FinishEchoBuffer(fbb, serbench::fb::CreateEcho(fbb, fbb.CreateVector(p, n)));
    out.assign(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
    break;
  }
  }
  std::vector<uint8_t> framed(sizeof(Frame) + out.size());
  const Frame f = {static_cast<uint32_t>(out.size()), kMagic};
  memcpy(framed.data(), &f, sizeof f);
  memcpy(framed.data() + sizeof f, out.data(), out.size());
  return framed;
}

// FlatBuffers' buffer in dataplane memory, so the finished message is posted where it lies.
struct DataplaneAllocator : flatbuffers::Allocator {
  uint8_t *allocate(size_t n) override {
    auto *p = static_cast<uint8_t *>(nic_malloc(n));
    if (!p) throw std::bad_alloc();
    return p;
  }
  void deallocate(uint8_t *p, size_t) override { free(p); }
};

// One reply in flight: what its completion lets go of.
struct Reply {
  Frame frame;
  uint8_t table[8];           // Cap'n Proto's segment table (one segment)
  const void *held = nullptr; // a receive buffer, nic_hold()ed (sg)
  void *block = nullptr;      // a dataplane block the reply was written into
  capnp::MallocMessageBuilder *capnp = nullptr;
  DataplaneAllocator fb_alloc;
  flatbuffers::FlatBufferBuilder *fbb = nullptr;
  static void Fn(void *arg, int status);
};

std::atomic<uint64_t> g_replies_done{0}, g_post_errors{0}, g_bad_requests{0};

void Reply::Fn(void *arg, int status) {
  auto *r = static_cast<Reply *>(arg);
  if (status) g_post_errors++;
  if (r->held) nic_release(r->held);
  delete r->capnp;
  delete r->fbb;
  free(r->block);
  delete r;
  g_replies_done++;
}

struct Conn {
  Ser ser;
  int fd = -1;
  nic_endpoint *ep = nullptr;
  std::vector<uint64_t> pending; // a frame split over receive buffers, gathered (8-aligned)
  size_t pending_len = 0;
  bool ended = false;
};

// Decodes the request in body[0, len) and posts the reply; in_buffer: body lies in a receive
// buffer (which a zero-copy reply may hold), not in the gather area.
void Serve(Conn &c, const uint8_t *body, size_t len, bool in_buffer) {
  auto *r = new Reply;
  nic_sga sga;
  int rc = nic_sga_init(&sga, 0);
  switch (c.ser) {
  case Ser::kSg: { // the payload is the message: sent back from where it landed
    r->frame = {static_cast<uint32_t>(len), kMagic};
    const uint8_t *src = body;
    if (!in_buffer || nic_hold(body) != 0) { // gathered: reply from a copy
      r->block = nic_malloc(len);
      memcpy(r->block, body, len);
      src = static_cast<uint8_t *>(r->block);
    } else {
      r->held = body;
    }
    if (!rc) rc = nic_sga_add(&sga, &r->frame, sizeof r->frame);
    if (!rc) rc = nic_sga_add(&sga, src, len);
    break;
  }
  case Ser::kProtobuf: {
    serbench::Echo req, rep;
    if (!req.ParseFromArray(body, static_cast<int>(len))) {
      rc = -EINVAL;
      break;
    }
    rep.set_payload(req.payload());
    const size_t n = rep.ByteSizeLong();
    r->block = nic_malloc(sizeof(Frame) + n);
    auto *out = static_cast<uint8_t *>(r->block);
    const Frame f = {static_cast<uint32_t>(n), kMagic};
    memcpy(out, &f, sizeof f);
    rep.SerializeWithCachedSizesToArray(out + sizeof f);
    if (!rc) rc = nic_sga_add(&sga, out, sizeof f + n);
    break;
  }
  case Ser::kCapnp: {
    if (len % sizeof(capnp::word) || reinterpret_cast<uintptr_t>(body) % sizeof(capnp::word)) {
      rc = -EINVAL;
      break;
    }
    capnp::FlatArrayMessageReader reader(
        kj::arrayPtr(reinterpret_cast<const capnp::word *>(body), len / sizeof(capnp::word)));
    auto payload = reader.getRoot<Echo>().getPayload();
    // The reply's first segment is dataplane memory (zeroed, as the builder wants it).
    const size_t words = CapnpWords(payload.size());
    r->block = nic_calloc(words, sizeof(capnp::word));
    r->capnp =
        new capnp::MallocMessageBuilder(kj::arrayPtr(static_cast<capnp::word *>(r->block), words));
    r->capnp->initRoot<Echo>().setPayload(payload);
    auto segs = r->capnp->getSegmentsForOutput();
    if (segs.size() != 1) { // sized for one segment; more would need a longer table
      rc = -E2BIG;
      break;
    }
    const uint32_t table[2] = {0, static_cast<uint32_t>(segs[0].size())};
    memcpy(r->table, table, sizeof table);
    const size_t seg_bytes = segs[0].size() * sizeof(capnp::word);
    r->frame = {static_cast<uint32_t>(sizeof table + seg_bytes), kMagic};
    if (!rc) rc = nic_sga_add(&sga, &r->frame, sizeof r->frame);
    if (!rc) rc = nic_sga_add(&sga, r->table, sizeof table);
    if (!rc) rc = nic_sga_add(&sga, segs[0].begin(), seg_bytes);
    break;
  }
  case Ser::kFlatbuffers: {
    flatbuffers::Verifier v(body, len);
    if (!serbench::fb::VerifyEchoBuffer(v)) {
      rc = -EINVAL;
      break;
    }
    auto *payload = serbench::fb::GetEcho(body)->payload();
    r->fbb = new flatbuffers::FlatBufferBuilder(payload->size() + 64, &r->fb_alloc);
    serbench::fb::FinishEchoBuffer(
        *r->fbb,
        serbench::fb::CreateEcho(*r->fbb, r->fbb->CreateVector(payload->data(), payload->size())));
    r->frame = {r->fbb->GetSize(), kMagic};
    if (!rc) rc = nic_sga_add(&sga, &r->frame, sizeof r->frame);
    if (!rc) rc = nic_sga_add(&sga, r->fbb->GetBufferPointer(), r->fbb->GetSize());
    break;
  }
  }
  if (!rc) rc = nic_sga_post(&sga, c.ep, Reply::Fn, r);
  if (rc) {
    if (rc == -EINVAL) g_bad_requests++;
    nic_sga_reset(&sga);
    Reply::Fn(r, rc);
  }
}

// The server's receive function: whole frames are decoded where they landed; a frame split over
// receive buffers is gathered first.
void OnData(void *arg, void *data, size_t len) {
  auto &c = *static_cast<Conn *>(arg);
  if (!data) {
    c.ended = true;
    return;
  }
  auto *p = static_cast<const uint8_t *>(data);
  while (len) {
    if (c.pending_len) { // finish the gathered frame
      auto *g = reinterpret_cast<uint8_t *>(c.pending.data());
      size_t need = sizeof(Frame);
      if (c.pending_len >= sizeof(Frame)) {
        Frame f;
        memcpy(&f, g, sizeof f);
        need = sizeof f + f.len;
      }
      const size_t take = std::min(len, need - c.pending_len);
      if ((c.pending_len + take + 7) / 8 > c.pending.size())
        c.pending.resize((c.pending_len + take + 7) / 8 + 1024);
      g = reinterpret_cast<uint8_t *>(c.pending.data());
      memcpy(g + c.pending_len, p, take);
      c.pending_len += take;
      p += take;
      len -= take;
      if (c.pending_len >= sizeof(Frame)) {
        Frame f;
        memcpy(&f, g, sizeof f);
        if (f.magic != kMagic) {
          g_bad_requests++;
          c.pending_len = 0;
          return;
        }
        if (c.pending_len == sizeof f + f.len) {
          c.pending_len = 0;
          Serve(c, g + sizeof f, f.len, false);
        }
      }
      continue;
    }
    Frame f;
    if (len >= sizeof f) memcpy(&f, p, sizeof f);
    if (len >= sizeof f && f.magic != kMagic) {
      g_bad_requests++;
      return;
    }
    if (len >= sizeof f && len >= sizeof f + f.len) {
      Serve(c, p + sizeof f, f.len, true);
      p += sizeof f + f.len;
      len -= sizeof f + f.len;
      continue;
    }
    c.pending_len = 0; // the rest is the start of a frame: gather it
    if (c.pending.size() < 1024) c.pending.resize(1024);
    if ((len + 7) / 8 > c.pending.size()) c.pending.resize((len + 7) / 8);
    memcpy(c.pending.data(), p, len);
    c.pending_len = len;
    return;
  }
}

std::atomic<int> g_phase{0};         // 0 warm-up, 1 measured, 2 stop
std::atomic<uint64_t> g_measured{0}; // requests completed in phase 1

struct Client {
  int fd;
  const std::vector<uint8_t> *request, *reply;
  std::vector<uint64_t> lat;
  uint64_t mismatches = 0, failures = 0;
  std::atomic<bool> finished{false};

  void Run() {
    std::vector<uint8_t> in(reply->size());
    while (g_phase.load(std::memory_order_relaxed) < 2) {
      const uint64_t t0 = NowNs();
      size_t off = 0;
      while (off < request->size()) {
        const ssize_t n = send(fd, request->data() + off, request->size() - off, MSG_NOSIGNAL);
        if (n <= 0) {
          failures++;
          goto out;
        }
        off += static_cast<size_t>(n);
      }
      off = 0;
      while (off < in.size()) {
        const ssize_t n = recv(fd, in.data() + off, in.size() - off, 0);
        if (n <= 0) {
          failures++;
          goto out;
        }
        off += static_cast<size_t>(n);
      }
      const uint64_t t1 = NowNs();
      if (memcmp(in.data(), reply->data(), in.size())) mismatches++;
      if (g_phase.load(std::memory_order_relaxed) == 1) {
        lat.push_back(t1 - t0);
        g_measured.fetch_add(1, std::memory_order_relaxed);
      }
    }
  out:
    finished.store(true, std::memory_order_release);
  }
};

int EchoServer(const std::string &sername, const char *sizes, const char *clients, double seconds) {
  const Ser ser = ParseSer(sername);
  printf("serializer,size,clients,requests,seconds,req_per_s,p50_us,p99_us,p999_us,mismatches,"
         "recv_stalls,status\n");
  for (size_t size : List(sizes)) {
    std::vector<uint8_t> payload(size);
    for (size_t i = 0; i < size; i++)
      payload[i] = static_cast<uint8_t>(i * 13 + size);
    const std::vector<uint8_t> request = Encode(ser, payload.data(), size);
    const std::vector<uint8_t> &reply = request; // the echo sends the same message back
    for (size_t nc : List(clients)) {
      std::vector<Conn> conns(nc);
      std::vector<Client> cl(nc);
      for (size_t i = 0; i < nc; i++) {
        int a, b;
        TcpPair(&a, &b);
        timeval limit = {10, 0};
        setsockopt(a, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
        conns[i].ser = ser;
        conns[i].fd = b;
        conns[i].ep = nic_uring_endpoint_create(b);
        if (!conns[i].ep) Die("nic_uring_endpoint_create (NICMALLOC_BACKEND=uring?)");
        if (nic_endpoint_receive(conns[i].ep, OnData, &conns[i])) Die("nic_endpoint_receive");
        cl[i].fd = a;
        cl[i].request = &request;
        cl[i].reply = &reply;
        cl[i].lat.reserve(static_cast<size_t>(seconds * 400000) + 1024);
      }
      g_phase = 0;
      g_measured = 0;
      const nic_stats s0 = Stats();
      std::vector<std::thread> threads;
      for (auto &c : cl)
        threads.emplace_back([&c] { c.Run(); });
      const uint64_t start = NowNs(), warm_end = start + static_cast<uint64_t>(0.1 * seconds * 1e9);
      const uint64_t end = warm_end + static_cast<uint64_t>(seconds * 1e9);
      uint64_t t0 = 0, t1 = 0;
      auto all_finished = [&] {
        for (auto &c : cl)
          if (!c.finished.load(std::memory_order_acquire)) return false;
        return true;
      };
      while (!all_finished()) {
        const uint64_t now = NowNs();
        if (g_phase == 0 && now >= warm_end) {
          t0 = now;
          g_phase = 1;
        } else if (g_phase == 1 && now >= end &&
                   // at least a request per client, so that a stalled moment of a shared
                   // machine gives a longer point, not an empty one (at most 30 s more)
                   (g_measured.load() >= nc || now >= end + 30000000000ull)) {
          t1 = now;
          g_phase = 2;
        }
        nic_wait(5);
      }
      for (auto &t : threads)
        t.join();
      if (!t1) t1 = NowNs();
      std::vector<uint64_t> lat;
      uint64_t mismatches = 0, failures = 0;
      for (auto &c : cl) {
        lat.insert(lat.end(), c.lat.begin(), c.lat.end());
        mismatches += c.mismatches;
        failures += c.failures;
        shutdown(c.fd, SHUT_RDWR);
      }
      for (auto &c : conns) {
        const uint64_t until = NowNs() + 10000000000ull;
        while (nic_uring_endpoint_destroy(c.ep) == -EBUSY && NowNs() < until)
          nic_poll(0);
        close(c.fd);
      }
      for (auto &c : cl)
        close(c.fd);
      const double secs = t0 ? static_cast<double>(t1 - t0) / 1e9 : 0;
      const char *status = !t0 || lat.empty()      ? "no-requests"
                           : failures              ? "client-failures"
                           : mismatches            ? "mismatches"
                           : g_post_errors.load()  ? "post-errors"
                           : g_bad_requests.load() ? "bad-requests"
                                                   : "ok";
      // Times an endpoint had every receive buffer held (sg's replies hold theirs until the
      // kernel's zero-copy notification) and stopped receiving.
      const uint64_t stalls = Stats().recv_stalls - s0.recv_stalls;
      printf("%s,%zu,%zu,%zu,%.3f,%.0f,%.1f,%.1f,%.1f,%llu,%llu,%s\n", sername.c_str(), size, nc,
             lat.size(), secs, secs > 0 ? lat.size() / secs : 0, Pct(lat, 0.5) / 1e3,
             Pct(lat, 0.99) / 1e3, Pct(lat, 0.999) / 1e3,
             static_cast<unsigned long long>(mismatches), static_cast<unsigned long long>(stalls),
             status);
      fflush(stdout);
    }
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "throughput" && argc == 6)
    return Throughput(argv[2], argv[3], argv[4], strtoull(argv[5], nullptr, 10));
  if (cmd == "entries" && argc == 6)
    return Entries(argv[2], argv[3], argv[4], strtoull(argv[5], nullptr, 10));
  if (cmd == "echo" && argc == 6) return EchoServer(argv[2], argv[3], argv[4], atof(argv[5]));
  fprintf(stderr, "usage: ser_net throughput|entries TRANSPORT MODE LIST MESSAGES\n"
                  "       ser_net echo SERIALIZER SIZES CLIENTS SECONDS\n");
  return 2;
}
