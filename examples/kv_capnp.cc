// A key-value store over io_uring on loopback TCP, speaking Cap'n Proto (examples/kv.capnp)
// through nicmalloc/capnp.h. Values lie in dataplane memory; a GET's reply references its value
// where it lies (MessageBuilder::referenceData: a segment of its own, sent without a copy), and
// every request is read from the receive buffer it landed in (StreamReader), in place unless
// the TCP stream cut it over two buffers. A SET stores a new value and frees the old one at
// once, even while a reply that sends the old one is still in flight: nicmalloc defers that
// free until the post completes, so the old value is not rewritten under the NIC. The client, a
// thread on an ordinary socket with Cap'n Proto's own serialization, sends GET k, SET k, GET k
// together, round after round, and checks every reply byte against the version it expects.
//
//   kv_capnp [--check] [--copy] [--rewrite] [rounds]
//
// in any order; rounds (default 5000) is a count from 1 up, and anything else is refused (exit 2).
// Runs with NICMALLOC_BACKEND=uring. --check also checks the claim and exits 1 when it does not
// hold: every reply correct, every GET's value sent from the store's own block, no entry
// through the registration cache, no more bytes copied at post than the pieces under the copy
// threshold can hold (no value byte: values are 512 B and up), some SET replaced a value while
// a reply of it was in flight and no write to memory being sent (NICMALLOC_FENCE=detect finds
// one, protect holds it); most requests read in place, and every receive buffer back.
// Loopback TCP takes the bytes at the send, so only the fence can see a value rewritten under
// a reply (a real NIC reads later). Two variants must fail the check, which shows it can tell:
// --copy replies from a malloc'd copy of each value, as a server copying out of its store
// would; --rewrite has SET write the new value over the old one in place, under the reply that
// still sends it. Without a fence the check could not fail on a rewrite: the three runs the
// check decides start again under NICMALLOC_FENCE=detect when the environment names no fence,
// and refuse one that names off or wait.
#include "example_args.h"
#include "kv.capnp.h"

#include <nicmalloc/capnp.h>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/io.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace ncp = nicmalloc::capnp;

namespace {

bool copy_mode, rewrite_mode;
constexpr unsigned kKeys = 64;

// A key's value has one length, whatever its version: a new version then fits the block the
// old one was freed from, and would be written there were that free not deferred.
size_t ValueLen(unsigned key) {
  return 512 + (key * 2654435761u) % 7681;
}
unsigned char ValueByte(unsigned key, unsigned version, size_t i) {
  return static_cast<unsigned char>(key * 131 + version * 29 + i * 7 + 1);
}
std::string KeyName(unsigned key) {
  return "key-" + std::to_string(key);
}

// A stored value and how many posted replies send it now.
struct Value {
  void *data = nullptr;
  size_t len = 0;
  int sending = 0;
};

struct Server {
  nic_endpoint *ep = nullptr;
  ncp::SegmentPool pool;
  ncp::StreamReader reader;
  std::unordered_map<std::string, std::shared_ptr<Value>> store;
  unsigned long requests = 0, in_place = 0, gets = 0, found = 0, sets = 0, posted = 0, done = 0;
  unsigned long post_errors = 0, bad = 0, feed_errors = 0, from_store = 0, replaced_while_sent = 0;
  unsigned long value_bytes = 0;
};

// One reply in flight: what to let go of at its completion.
struct ReplyRecord {
  Server *s;
  std::shared_ptr<Value> value;
  void *copy; // --copy: the value's copy
};

void ReplyDone(void *arg, int status) {
  auto *r = static_cast<ReplyRecord *>(arg);
  if (status) r->s->post_errors++;
  if (r->value) r->value->sending--;
  free(r->copy);
  r->s->done++;
  delete r;
}

void Set(Server *s, const std::string &key, capnp::Data::Reader v) {
  // Readable up to the next multiple of 8 (capnp sends whole words) and 8-byte aligned, so that
  // referenceData sends it where it lies; on pages of its own, so that storing it never writes
  // a page a reply is sending (NICMALLOC_FENCE=protect holds writers page by page).
  const size_t padded = (v.size() + 7) / 8 * 8;
  void *p = nic_aligned_alloc(4096, (v.size() + 4095) / 4096 * 4096 + (v.size() ? 0 : 4096));
  if (!p) {
    s->bad++;
    return;
  }
  memcpy(p, v.begin(), v.size()); // the one copy: from the receive buffer into the store
  memset(static_cast<char *>(p) + v.size(), 0, padded - v.size());
  auto &slot = s->store[key];
  if (rewrite_mode && slot && slot->len == v.size()) { // the mistake the check must catch
    s->replaced_while_sent += slot->sending > 0;
    memcpy(slot->data, p, v.size());
    free(p);
    return;
  }
  if (slot) {
    // Freed now even if a reply sends it: nicmalloc keeps the block until that post completes.
    s->replaced_while_sent += slot->sending > 0;
    free(slot->data);
    slot->data = nullptr;
  }
  slot = std::make_shared<Value>();
  slot->data = p;
  slot->len = v.size();
}

void Handle(Server *s, ncp::ReceivedMessage &m) {
  s->requests++;
  s->in_place += m.in_place();
  auto rq = m.getRoot<kv::Request>();
  const std::string key(rq.getKey().cStr(), rq.getKey().size());
  ncp::MessageBuilder msg(&s->pool, 64);
  auto reply = msg.initRoot<kv::Reply>();
  reply.setId(rq.getId());
  ReplyRecord pending{s, nullptr, nullptr};
  if (rq.getOp() == kv::Request::Op::SET) {
    s->sets++;
    Set(s, key, rq.getValue());
    reply.setFound(true);
  } else {
    s->gets++;
    auto it = s->store.find(key);
    if (it != s->store.end()) {
      s->found++;
      const Value &v = *it->second;
      const void *src = v.data;
      if (copy_mode) {
        pending.copy = malloc(v.len + 8);
        if (pending.copy) memcpy(pending.copy, v.data, v.len);
        src = pending.copy ? pending.copy : v.data;
      }
      reply.setFound(true);
      reply.adoptValue(msg.referenceData(src, v.len));
      for (auto seg : msg.getSegmentsForOutput())
        s->from_store += static_cast<const void *>(seg.begin()) == v.data;
      s->value_bytes += v.len;
      pending.value = it->second;
      pending.value->sending++;
    }
  }
  auto *rec = new ReplyRecord(std::move(pending));
  int rc = ncp::post(s->ep, msg, ReplyDone, rec);
  if (rc) {
    ReplyDone(rec, rc); // counts the error
    return;
  }
  s->posted++;
}

void OnReceive(void *arg, void *data, size_t len) {
  auto *s = static_cast<Server *>(arg);
  const int rc = s->reader.feed(data, len, [s](std::unique_ptr<ncp::ReceivedMessage> m) {
    try {
      Handle(s, *m);
    } catch (const kj::Exception &) {
      s->bad++;
    }
  }); // the message goes here: its receive buffer back to the NIC, nothing kept
  if (rc) s->feed_errors++;
}

struct Client {
  int fd = -1;
  unsigned rounds = 0;
  unsigned long sent = 0, replies = 0, good = 0, bad = 0;
  std::string first_bad;
  std::atomic<bool> finished{false};
};

void Append(std::string *out, uint64_t id, kv::Request::Op op, unsigned key, unsigned version) {
  capnp::MallocMessageBuilder b;
  auto rq = b.initRoot<kv::Request>();
  rq.setId(id);
  rq.setOp(op);
  rq.setKey(KeyName(key));
  if (op == kv::Request::Op::SET) {
    std::string v(ValueLen(key), '\0');
    for (size_t i = 0; i < v.size(); i++)
      v[i] = static_cast<char>(ValueByte(key, version, i));
    rq.setValue(capnp::Data::Reader(reinterpret_cast<const kj::byte *>(v.data()), v.size()));
  }
  auto flat = capnp::messageToFlatArray(b);
  out->append(reinterpret_cast<const char *>(flat.begin()), flat.size() * sizeof(capnp::word));
}

// What the client expects of a reply: a GET's key and version, or a SET's acknowledgement.
struct Expect {
  uint64_t id;
  bool get;
  unsigned key, version;
};

void RunClient(Client *c) {
  try {
    kj::FdInputStream raw(c->fd);
    kj::BufferedInputStreamWrapper in(raw);
    unsigned version[kKeys] = {};
    uint64_t id = 0;
    auto exchange = [&](const std::string &out, const std::vector<Expect> &want) {
      kj::FdOutputStream(c->fd).write(out.data(), out.size());
      c->sent += want.size();
      for (const Expect &e : want) {
        capnp::InputStreamMessageReader r(in);
        auto reply = r.getRoot<kv::Reply>();
        c->replies++;
        bool ok = reply.getId() == e.id && reply.getFound();
        if (ok && e.get) {
          auto v = reply.getValue();
          ok = v.size() == ValueLen(e.key);
          for (size_t i = 0; ok && i < v.size(); i++)
            ok = v[i] == ValueByte(e.key, e.version, i);
        }
        if (ok) {
          c->good++;
        } else if (c->bad++ == 0) {
          c->first_bad = "reply " + std::to_string(e.id) + " (key " + std::to_string(e.key) +
                         ", version " + std::to_string(e.version) + ")";
        }
      }
    };
    std::string out;
    std::vector<Expect> want;
    for (unsigned k = 0; k < kKeys; k++) {
      Append(&out, id, kv::Request::Op::SET, k, 0);
      want.push_back({id++, false, k, 0});
    }
    exchange(out, want);
    // GET k, SET k, GET k in one write: the server reads them from one receive buffer and
    // replaces the value while the first GET's reply, which sends it, is still posted.
    for (unsigned r = 0; r < c->rounds; r++) {
      const unsigned k = r % kKeys;
      out.clear();
      want.clear();
      Append(&out, id, kv::Request::Op::GET, k, 0);
      want.push_back({id++, true, k, version[k]});
      version[k]++;
      Append(&out, id, kv::Request::Op::SET, k, version[k]);
      want.push_back({id++, false, k, version[k]});
      Append(&out, id, kv::Request::Op::GET, k, 0);
      want.push_back({id++, true, k, version[k]});
      exchange(out, want);
    }
  } catch (const kj::Exception &e) {
    c->first_bad = std::string("client: ") + e.getDescription().cStr();
    c->bad++;
  }
  c->finished = true;
}

// Whether the check can see a write to memory being sent; re-runs the program under detect when
// no fence is named (nicmalloc reads its settings before main).
bool fence_for_check(char **argv) {
  const char *fence = getenv("NICMALLOC_FENCE");
  if (!fence) {
    setenv("NICMALLOC_FENCE", "detect", 1);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "kv_capnp: cannot start again with NICMALLOC_FENCE=detect: %s\n",
            strerror(errno));
    return false;
  }
  if (strcmp(fence, "detect") != 0 && strcmp(fence, "protect") != 0) {
    fprintf(stderr,
            "kv_capnp: the check counts writes to memory being sent, which only "
            "NICMALLOC_FENCE=detect or protect sees (NICMALLOC_FENCE=%s)\n",
            fence);
    return false;
  }
  return true;
}

} // namespace

int main(int argc, char **argv) {
  bool check = false;
  unsigned long rounds = 5000;
  const example_arg args[] = {{"--check", &check, nullptr, 0},
                              {"--copy", &copy_mode, nullptr, 0},
                              {"--rewrite", &rewrite_mode, nullptr, 0},
                              {nullptr, nullptr, &rounds, UINT_MAX}};
  if (const int refused =
          example_args(argc, argv, "kv_capnp [--check] [--copy] [--rewrite] [rounds]", args,
                       sizeof args / sizeof args[0]))
    return refused;
  if ((check || copy_mode || rewrite_mode) && !fence_for_check(argv)) return 2;
  Client c;
  c.rounds = static_cast<unsigned>(rounds);
  const char *name = copy_mode      ? "kv_capnp --copy"
                     : rewrite_mode ? "kv_capnp --rewrite"
                                    : "kv_capnp";

  int l = socket(AF_INET, SOCK_STREAM, 0), srv = -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  c.fd = socket(AF_INET, SOCK_STREAM, 0);
  if (bind(l, reinterpret_cast<sockaddr *>(&a), sizeof a) || listen(l, 1) ||
      getsockname(l, reinterpret_cast<sockaddr *>(&a), &alen) ||
      connect(c.fd, reinterpret_cast<sockaddr *>(&a), sizeof a) ||
      (srv = accept(l, nullptr, nullptr)) < 0) {
    fprintf(stderr, "%s: loopback TCP: %s\n", name, strerror(errno));
    return 1;
  }
  close(l);
  // Replies go out as separate sends: without this Nagle holds each one back for the ACK of the
  // one before, which the client delays.
  const int one = 1;
  setsockopt(srv, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  Server s;
  s.ep = nic_uring_endpoint_create(srv);
  if (!s.ep) {
    fprintf(stderr, "%s: nic_uring_endpoint_create: %s (run with NICMALLOC_BACKEND=uring)\n", name,
            strerror(errno));
    return 1;
  }
  if (int rc = nic_endpoint_receive(s.ep, OnReceive, &s)) {
    fprintf(stderr, "%s: nic_endpoint_receive: %s\n", name, strerror(-rc));
    return 1;
  }
  nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);

  std::thread client(RunClient, &c);
  while (!c.finished)
    nic_wait(10);
  client.join();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (s.done < s.posted && std::chrono::steady_clock::now() < end)
    nic_wait(10);
  shutdown(c.fd, SHUT_RDWR);
  while (nic_uring_endpoint_destroy(s.ep) == -EBUSY && std::chrono::steady_clock::now() < end)
    nic_wait(10);
  nic_get_stats(&after);
  for (auto &kv : s.store)
    free(kv.second->data);
  close(c.fd);
  close(srv);

  const uint64_t lookups =
      (after.rcache_hits - before.rcache_hits) + (after.rcache_misses - before.rcache_misses);
  const uint64_t copied = after.bounce_bytes - before.bounce_bytes;
  // Writes to memory being sent: found by detect, or let through by protect (this program's
  // writers are all the polling thread, which protect lets through rather than hold). Held
  // writes are not counted: nicmalloc's own deferred-free thread may wait on a page still sent.
  const uint64_t rewritten = (after.fence_mismatches - before.fence_mismatches) +
                             (after.fence_bypasses - before.fence_bypasses);
  printf("%s: %lu requests (%lu read in place), %lu replies good, %lu bad%s%s\n", name, s.requests,
         s.in_place, c.good, c.bad, c.bad ? ", first: " : "", c.first_bad.c_str());
  printf("%s: %lu GETs found, %lu sent from the store's block, %lu value bytes; %lu SETs, %lu "
         "replaced a value while a reply sent it\n",
         name, s.found, s.from_store, s.value_bytes, s.sets, s.replaced_while_sent);
  printf("%s: registration cache %llu lookups; %llu bytes copied at post (%lu posts, pieces "
         "under %d B); %llu receive buffers held at the end\n",
         name, static_cast<unsigned long long>(lookups), static_cast<unsigned long long>(copied),
         s.posted, 512, static_cast<unsigned long long>(after.recv_held_buffers));
  printf("%s: %llu writes to memory being sent (NICMALLOC_FENCE=detect or protect)\n", name,
         static_cast<unsigned long long>(rewritten));
  if (!check && !copy_mode && !rewrite_mode) return c.bad || s.bad ? 1 : 0;
  const unsigned long expected = kKeys + 3ul * c.rounds;
  const bool ok = c.bad == 0 && c.good == expected && s.bad == 0 && s.feed_errors == 0 &&
                  s.post_errors == 0 && s.done == s.posted && s.posted == expected &&
                  s.from_store == s.found && s.found == 2ul * c.rounds && lookups == 0 &&
                  copied < s.posted * 512ull && s.replaced_while_sent > 0 && rewritten == 0 &&
                  s.in_place * 2 > s.requests && after.recv_held_buffers == 0;
  printf("%s: zero-copy check %s\n", name, ok ? "passed" : "FAILED");
  return ok ? 0 : 1;
}
