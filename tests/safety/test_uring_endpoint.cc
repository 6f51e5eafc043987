// nic_uring_endpoint_create / _destroy, the public io_uring endpoint: what it accepts, its
// errors and their messages, and scatter-gather messages over loopback TCP and UDP. Runs with
// NICMALLOC_BACKEND=uring; the BesideSim case runs again under sim (tests/uring.cmake).
#include "uring_loopback.h"

#include <nicmalloc/sg_post.h>

#include <algorithm>

#include <sys/wait.h>

using namespace uring_test;

namespace {

// Dataplane, control-heap and short (bounce-copied) memory in one message.
struct Parts {
  explicit Parts(unsigned seed) : dp(static_cast<char *>(nic_malloc(9000))) {
    ctl = static_cast<char *>(malloc(7000));
    for (int i = 0; i < 9000; i++)
      dp[i] = static_cast<char>(seed * 7 + i);
    for (int i = 0; i < 7000; i++)
      ctl[i] = static_cast<char>(seed * 13 + i * 3);
    for (int i = 0; i < 100; i++)
      small[i] = static_cast<char>(seed + i);
  }
  ~Parts() {
    free(dp);
    free(ctl);
  }
  std::vector<std::pair<const void *, size_t>> List() const {
    return {{small, sizeof small}, {dp, 9000}, {ctl, 7000}};
  }
  std::string Bytes() const {
    return std::string(small, sizeof small) + std::string(dp, 9000) + std::string(ctl, 7000);
  }
  char *dp, *ctl;
  char small[100];
};

// Posts one message of the same control-memory block `times` times over (one registration)
// through the adapters' PostPieces.
int PostRepeated(nic_endpoint *ep, char *mem, size_t block, size_t times, Done *d) {
  std::vector<nicmalloc::detail::Piece> pieces(times, {mem, block});
  return nicmalloc::detail::PostPieces(ep, {pieces.data(), pieces.size(), {}, {}}, Done::Fn, d, 0);
}

TEST_F(UringSgaTest, BadSocketsAreRefusedWithErrnoAndOneLine) {
  int p[2], u[2], sp[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, u), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp), 0);
  int idle = socket(AF_INET, SOCK_STREAM, 0), udp = socket(AF_INET, SOCK_DGRAM, 0);
  struct {
    int fd, err;
    const char *says;
  } cases[] = {{-1, EBADF, "not an open file descriptor"},
               {p[0], ENOTSOCK, "not a socket"},
               {idle, ENOTCONN, "not connected"},
               {udp, ENOTCONN, "not connected"},
               {sp[0], EPROTOTYPE, "neither a stream nor a datagram"},
               {u[0], EOPNOTSUPP, "not an AF_INET or AF_INET6 socket"}};
  // Each kind of refusal is said once (the second ENOTCONN is not), and every call counted.
  std::set<int> said;
  nic_stats before = NIC_STATS_INIT;
  nic_get_stats(&before);
  for (auto &c : cases) {
    testing::internal::CaptureStderr();
    errno = 0;
    EXPECT_EQ(nic_uring_endpoint_create(c.fd), nullptr) << c.says;
    EXPECT_EQ(errno, c.err) << c.says;
    std::string err = testing::internal::GetCapturedStderr();
    const bool first = said.insert(c.err).second;
    EXPECT_EQ(err.find("nic_uring_endpoint_create(" + std::to_string(c.fd) + "): " + c.says) !=
                  std::string::npos,
              first)
        << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), first ? 1 : 0) << err;
  }
  nic_stats after = NIC_STATS_INIT;
  nic_get_stats(&after);
  EXPECT_EQ(after.endpoint_errors - before.endpoint_errors, std::size(cases));
  for (int fd : {p[0], p[1], u[0], u[1], sp[0], sp[1], idle, udp})
    close(fd);
}

// A stream or datagram socket of AF_INET whose protocol the kernel sends nothing zero-copy for:
// an MPTCP socket was taken, and each post to it then completed -EOPNOTSUPP.
TEST_F(UringSgaTest, ProtocolsWithoutZeroCopySendAreRefusedSayingWhich) {
  const int probe = socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP);
  if (probe < 0) GTEST_SKIP() << "no MPTCP in this kernel: " << strerror(errno);
  close(probe);
  LoopbackPair pair(0, 0, IPPROTO_MPTCP);
  testing::internal::CaptureStderr();
  errno = 0;
  EXPECT_EQ(nic_uring_endpoint_create(pair.tx), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("): an MPTCP socket: the kernel has no zero-copy send for MPTCP"),
            std::string::npos)
      << err;
}

// UDP-Lite sends zero-copy as UDP does: taken, and its posts arrive.
TEST_F(UringSgaTest, UdpLiteSocketsAreTaken) {
  UdpPair pair(IPPROTO_UDPLITE);
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  ASSERT_NE(ep, nullptr);
  Parts parts(3);
  Done d;
  ASSERT_EQ(PostParts(ep, parts.List(), &d), 0);
  ASSERT_TRUE(NicPollUntil([&] { return d.calls == 1; }));
  EXPECT_EQ(d.status, 0);
  ASSERT_TRUE(reader.WaitFor(parts.Bytes().size()));
  EXPECT_TRUE(reader.Data() == parts.Bytes());
}

TEST_F(UringSgaTest, DestroyOfWhatItDidNotMakeIsEinval) {
  LoopbackPair pair;
  nic_endpoint *ep = nic_uring_endpoint_create(pair.tx);
  ASSERT_NE(ep, nullptr);
  int not_an_endpoint = 0;
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_uring_endpoint_destroy(nullptr), -EINVAL);
  EXPECT_EQ(nic_uring_endpoint_destroy(reinterpret_cast<nic_endpoint *>(&not_an_endpoint)),
            -EINVAL);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), -EINVAL) << "another kind's destroy";
  EXPECT_EQ(nic_verbs_endpoint_destroy(ep), -EINVAL);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("not an endpoint made by nic_uring_endpoint_create"), std::string::npos)
      << err;
  EXPECT_NE(err.find("not an endpoint made by nic_dpdk_endpoint_create"), std::string::npos) << err;
  EXPECT_EQ(nic_uring_endpoint_destroy(ep), 0);
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_uring_endpoint_destroy(ep), -EINVAL) << "destroyed twice";
  testing::internal::GetCapturedStderr();
}

// A message that cannot leave while the reader is paused keeps the endpoint busy.
TEST_F(UringSgaTest, DestroyWhilePostsAreInFlightIsBusy) {
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  Reader reader(pair.rx, /*paused=*/true);
  nic_endpoint *ep = nic_uring_endpoint_create(pair.tx);
  ASSERT_NE(ep, nullptr);
  const size_t len = 4 << 20;
  char *big = static_cast<char *>(nic_malloc(len));
  memset(big, 'Z', len);
  Done d;
  ASSERT_EQ(PostParts(ep, {{big, len}}, &d), 0);
  EXPECT_EQ(nic_uring_endpoint_destroy(ep), -EBUSY);
  reader.Resume();
  ASSERT_TRUE(NicPollUntil([&] { return d.calls > 0; }));
  EXPECT_EQ(d.status, 0);
  EXPECT_EQ(nic_uring_endpoint_destroy(ep), 0);
  ASSERT_TRUE(reader.WaitFor(len));
  EXPECT_TRUE(reader.Data() == std::string(len, 'Z'));
  free(big);
}

TEST_F(UringSgaTest, StreamMessagesArriveWholeAndInOrder) {
  LoopbackPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  std::string want;
  Done d;
  for (unsigned i = 0; i < 20; i++) {
    Parts parts(i);
    want += parts.Bytes();
    ASSERT_EQ(PostParts(ep, parts.List(), &d), 0) << i; // freed at once: deferred if in flight
  }
  ASSERT_TRUE(NicPollUntil([&] { return d.calls == 20; }));
  EXPECT_EQ(d.failed, 0);
  ASSERT_TRUE(reader.WaitFor(want.size()));
  EXPECT_TRUE(reader.Data() == want);
  nic_stats s = NicStats();
  EXPECT_STREQ(s.backend, "uring");
  EXPECT_EQ(s.deferred_pending, 0u);
}

// Each step of a chunk is its own fixed buffer: a range across a step end goes as two entries,
// one in each slot, and arrives whole and in order; nic_register of it makes a slot of its own.
TEST_F(UringSgaTest, ARangeAcrossAStepEndArrivesWhole) {
  LoopbackPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  const size_t big = 40u << 20, half = 64u << 10;
  char *p = static_cast<char *>(nic_malloc(big)); // more than a 32 MiB step
  ASSERT_NE(p, nullptr);
  nic_region_ref ref;
  ASSERT_EQ(nic_translate(p, 1, &ref), 0);
  char *step_end = static_cast<char *>(ref.region_base) + ref.region_len;
  ASSERT_TRUE(step_end - half >= p && step_end + half <= p + big) << "the block crosses a step end";
  char *from = step_end - half;
  for (size_t i = 0; i < 2 * half; i++)
    from[i] = static_cast<char>(i * 7 + (i >> 12));
  const std::string want(from, 2 * half);
  Done d;
  ASSERT_EQ(PostParts(ep, {{from, 2 * half}}, &d), 0);
  ASSERT_TRUE(NicPollUntil([&] { return d.calls == 1; }));
  EXPECT_EQ(d.failed, 0);
  ASSERT_TRUE(reader.WaitFor(want.size()));
  EXPECT_TRUE(reader.Data() == want);
  nic_region_ref a, b;
  ASSERT_EQ(nic_register(from, half, NIC_REG_LOCAL, &a), 0);
  ASSERT_EQ(nic_register(step_end, half, NIC_REG_LOCAL, &b), 0);
  EXPECT_NE(a.backend_handle, b.backend_handle) << "two steps, two fixed-buffer slots";
  // Registered whole, the range gets a fixed buffer of its own, one key for all of it.
  nic_region_ref across;
  ASSERT_EQ(nic_register(from, 2 * half, NIC_REG_LOCAL, &across), 0);
  EXPECT_EQ(across.kind, NIC_REGION_CACHED);
  EXPECT_EQ(static_cast<char *>(across.region_base) + across.offset, from);
  EXPECT_GE(across.region_len, 2 * half);
  EXPECT_NE(across.backend_handle, a.backend_handle);
  EXPECT_NE(across.backend_handle, b.backend_handle);
  nic_unregister(&across);
  free(p);
}

TEST_F(UringSgaTest, EachPostOnAUdpSocketIsOneDatagram) {
  UdpPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  std::vector<std::string> want;
  Done d;
  for (unsigned i = 0; i < 20; i++) {
    Parts parts(i + 100);
    auto list = parts.List();
    list.resize(1 + i % 3); // one to three entries
    std::string bytes;
    for (auto &[p, len] : list)
      bytes.append(static_cast<const char *>(p), len);
    want.push_back(bytes);
    ASSERT_EQ(PostParts(ep, list, &d), 0) << i;
  }
  ASSERT_TRUE(NicPollUntil([&] { return d.calls == 20; }));
  EXPECT_EQ(d.failed, 0);
  size_t total = 0;
  for (auto &w : want)
    total += w.size();
  ASSERT_TRUE(reader.WaitFor(total));
  EXPECT_TRUE(reader.Reads() == want) << "datagrams merged, split, reordered or changed";
}

// Over UDP a post is one datagram: what IPv4 carries (65507 bytes), within the default receive
// buffer of 64 KiB.
TEST_F(UringSgaTest, EndpointLimitsOfADatagramSocketAreOneDatagram) {
  UdpPair pair;
  nic_endpoint *ep = Endpoint(pair.tx);
  size_t bytes = 0;
  ASSERT_EQ(nic_endpoint_limits(ep, nullptr, &bytes), 0);
  EXPECT_EQ(bytes, 65507u);
  char *block = static_cast<char *>(nic_malloc(bytes));
  memset(block, 'U', bytes);
  Reader reader(pair.rx);
  Done d;
  ASSERT_EQ(PostParts(ep, {{block, bytes}}, &d), 0);
  ASSERT_TRUE(NicPollUntil([&] { return d.calls == 1; }));
  EXPECT_EQ(d.status, 0) << "a datagram of the limit's length is sent";
  ASSERT_TRUE(reader.WaitFor(bytes));
  free(block);
}

// A datagram sent zero-copy takes at most MAX_SKB_FRAGS pages (17 by default, 45 at most). One of
// 60 entries of 1000 bytes, each on a page of its own, is a legal datagram the kernel will not
// send that way (-EMSGSIZE): it goes copied, and arrives whole.
TEST_F(UringSgaTest, ADatagramOnMorePagesThanZeroCopyTakesGoesCopied) {
  UdpPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  const size_t pages = 60, each = 1000;
  char *mem = static_cast<char *>(aligned_alloc(4096, pages * 4096));
  ASSERT_NE(mem, nullptr);
  std::vector<std::pair<const void *, size_t>> list;
  std::string want;
  for (size_t i = 0; i < pages; i++) {
    memset(mem + i * 4096, 'a' + int(i), each);
    list.push_back({mem + i * 4096, each});
    want.append(mem + i * 4096, each);
  }
  nic_uring_stats before{}, after{};
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_active(), &before));
  Done d;
  ASSERT_EQ(PostParts(ep, list, &d), 0);
  ASSERT_TRUE(NicPollUntil([&] { return d.calls == 1; }));
  EXPECT_EQ(d.status, 0) << strerror(-d.status);
  ASSERT_TRUE(reader.WaitFor(want.size()));
  EXPECT_TRUE(reader.Reads() == std::vector<std::string>{want});
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_active(), &after));
  EXPECT_EQ(after.dgram_copied - before.dgram_copied, 1u);
  free(mem);
}

TEST_F(UringSgaTest, OversizedDatagramFailsAloneWithEmsgsize) {
  UdpPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  const size_t too_big = 70000; // over IPv4 UDP's 65507
  char *big = static_cast<char *>(nic_malloc(too_big));
  memset(big, 'O', too_big);
  Parts ok(7);
  Done failed, fine;
  ASSERT_EQ(PostParts(ep, {{big, too_big}}, &failed), 0);
  ASSERT_EQ(PostParts(ep, ok.List(), &fine), 0);
  ASSERT_TRUE(NicPollUntil([&] { return failed.calls && fine.calls; }));
  EXPECT_EQ(failed.status, -EMSGSIZE);
  EXPECT_EQ(fine.status, 0) << "a failed datagram must not fail the next one";
  ASSERT_TRUE(reader.WaitFor(ok.Bytes().size()));
  EXPECT_TRUE(reader.Reads() == std::vector<std::string>{ok.Bytes()});
  free(big);
}

// nic_endpoint_limits gives the bytes one post to an io_uring endpoint may carry: the most one
// send takes (Linux's MAX_RW_COUNT), to which the backend holds its posts. It said SIZE_MAX, and
// the adapters, which cut a message into posts of at most that many bytes, posted a message over
// 2 GiB whole, refused with -EINVAL.
TEST_F(UringSgaTest, EndpointLimitsGiveTheLongestMessageAPostTakes) {
  LoopbackPair pair;
  nic_endpoint *ep = Endpoint(pair.tx);
  unsigned entries = 0;
  size_t bytes = 0;
  ASSERT_EQ(nic_endpoint_limits(ep, &entries, &bytes), 0);
  EXPECT_EQ(bytes, size_t{0x7ffff000});
  ASSERT_LT(bytes, size_t{UINT32_MAX}) << "one entry says it";
  // A message of that many bytes passes the post's length test, one byte more does not. No
  // registration covers the entry (no slot has that handle), so the post taken completes with
  // -EFAULT, reading and sending nothing.
  static char at[1];
  struct nic_backend *b = nic_backend_active();
  nic_sge sge = {at, static_cast<uint32_t>(bytes), 0, UINT64_MAX};
  Done taken, over;
  ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &taken), 0);
  ASSERT_TRUE(NicPollUntil([&] { return taken.calls == 1; }));
  EXPECT_EQ(taken.status, -EFAULT);
  sge.len++;
  EXPECT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &over), -EMSGSIZE);
  EXPECT_EQ(over.calls, 0);
}

// An array longer than that is -EMSGSIZE from nic_sga_post, as nicmalloc.h says, with nothing
// posted and the array as it was: it was the backend's -EINVAL, and nothing checked before it.
// The same 64 MiB of control memory (one registration) added 33 times is just over the limit.
TEST_F(UringSgaTest, AnArrayLongerThanOneMessageIsEmsgsize) {
  LoopbackPair pair;
  nic_endpoint *ep = Endpoint(pair.tx);
  size_t limit = 0;
  ASSERT_EQ(nic_endpoint_limits(ep, nullptr, &limit), 0);
  const size_t block = size_t{64} << 20, times = limit / block + 1;
  char *mem = static_cast<char *>(malloc(block));
  ASSERT_NE(mem, nullptr);
  memset(mem, 'm', block);
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_LE(times, sga.max);
  for (size_t i = 0; i < times; i++)
    ASSERT_EQ(nic_sga_add(&sga, mem, block), 0) << i;
  ASSERT_GT(sga.bytes, limit);
  const nic_sga before = sga;
  const uint64_t posts = NicStats().inflight_posts;
  Done d;
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sga_post(&sga, ep, Done::Fn, &d), -EMSGSIZE);
  EXPECT_EQ(nic_sga_post(&sga, ep, Done::Fn, &d), -EMSGSIZE);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("one message of the endpoint's backend uring takes at most 2147479552"),
            std::string::npos)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "said once: " << err;
  EXPECT_EQ(memcmp(&before, &sga, sizeof sga), 0) << "the array changed";
  EXPECT_EQ(NicStats().inflight_posts, posts);
  nic_sga_reset(&sga);
  free(mem);
}

// The adapters post a message in parts of at most that many bytes (sg_post.h). On a UDP socket
// that is one datagram (65507 bytes): a message of 150000 bytes, the same 50000 bytes of control
// memory three times over, goes as two datagrams of 65507 and one of the 18986 left, each a post
// the backend takes, and they arrive in order. When the limit said 0x7ffff000 for every uring
// endpoint, such a message went as one datagram, failed with -EMSGSIZE, and nothing arrived.
// (Over TCP, whole: the next test.)
TEST_F(UringSgaTest, TheAdaptersCutAMessageOverTheLimitIntoPostsTheBackendTakes) {
  UdpPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  const size_t block = 50000, times = 3, limit = 65507;
  char *mem = static_cast<char *>(malloc(block));
  ASSERT_NE(mem, nullptr);
  ASSERT_FALSE(nic_is_dataplane(mem));
  for (size_t i = 0; i < block; i++)
    mem[i] = static_cast<char>(i * 7 + (i >> 13));
  std::string whole;
  for (size_t i = 0; i < times; i++)
    whole.append(mem, block);
  nic_uring_stats before{}, after{};
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_active(), &before));
  Done d;
  ASSERT_EQ(PostRepeated(ep, mem, block, times, &d), 0);
  ASSERT_TRUE(NicPollUntil([&] { return d.calls == 1; }));
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_active(), &after));
  EXPECT_EQ(after.posts - before.posts, 3u)
      << "two parts of " << limit << " bytes, one of the rest";
  EXPECT_EQ(d.status, 0) << strerror(-d.status);
  ASSERT_TRUE(reader.WaitFor(whole.size()));
  EXPECT_TRUE(reader.Reads() ==
              (std::vector<std::string>{whole.substr(0, limit), whole.substr(limit, limit),
                                        whole.substr(2 * limit)}));
  free(mem);
}

// The same 2 GiB message over TCP arrives whole and unchanged. Its first post is about 2 GiB of
// one registration in 32 entries, a fixed-buffer SENDMSG_ZC, for which the kernel maps the pages
// in one allocation it cannot make (Linux 6.18: -ENOMEM for 1 GiB or more of 4 KiB pages, nothing
// sent). The backend completed the post with -ENOMEM; it now sends the rest as plain memory.
TEST_F(UringSgaTest, AMessageOverAGibibyteInOneRegistrationGoesWholeOverTcp) {
  LoopbackPair pair;
  nic_endpoint *ep = Endpoint(pair.tx);
  const size_t block = size_t{64} << 20, times = 32;
  char *mem = static_cast<char *>(malloc(block));
  ASSERT_NE(mem, nullptr);
  for (size_t i = 0; i < block; i++)
    mem[i] = static_cast<char>(i * 7 + (i >> 13));
  // Checks the stream as it comes instead of keeping 2 GiB.
  std::atomic<size_t> got{0}, first_wrong{SIZE_MAX};
  std::thread reader([&] {
    std::vector<char> buf(1 << 20);
    for (ssize_t r; got < block * times && (r = read(pair.rx, buf.data(), buf.size())) > 0;) {
      for (ssize_t i = 0; i < r && first_wrong == SIZE_MAX; i++)
        if (buf[size_t(i)] != mem[(got + size_t(i)) % block]) first_wrong = got + size_t(i);
      got += size_t(r);
    }
  });
  nic_uring_stats before{}, after{};
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_active(), &before));
  Done d;
  ASSERT_EQ(PostRepeated(ep, mem, block, times, &d), 0);
  const bool done = NicPollUntil([&] { return d.calls == 1; }, std::chrono::seconds(120));
  if (!done || d.status != 0) shutdown(pair.rx, SHUT_RDWR); // the reader waits for nothing more
  reader.join();
  ASSERT_TRUE(done);
  EXPECT_EQ(d.status, 0) << strerror(-d.status);
  EXPECT_EQ(got.load(), block * times);
  EXPECT_EQ(first_wrong.load(), SIZE_MAX) << "the stream differs at byte " << first_wrong;
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_active(), &after));
  if (after.vectored_fixed) { // a kernel that took the fixed form turned it down, the rest went
    EXPECT_GT(after.sendmsg_zc_plain, before.sendmsg_zc_plain);
  }
  free(mem);
}

// A child of fork shares the parent's io_uring instance, its completion queue included: a poll
// in the child must not take (and run) the parent's completions, which the parent would then
// never see, and the child can neither post on nor destroy the parent's endpoints. It opens an
// io_uring instance of its own, and its endpoint on the socket it inherited sends whole
// messages, completed in the child.
TEST_F(UringSgaTest, AChildOfForkLeavesTheParentsCompletionsAndSendsThroughItsOwnRing) {
  LoopbackPair pair;
  nic_endpoint *ep = Endpoint(pair.tx);
  Parts parts(5), childs(6);
  const size_t want = parts.Bytes().size();
  Done d;
  ASSERT_EQ(PostParts(ep, parts.List(), &d), 0);
  std::vector<char> buf(want);
  for (size_t got = 0; got < want;) { // read: the completion and notification then follow
    ssize_t r = read(pair.rx, buf.data() + got, want - got);
    ASSERT_GT(r, 0);
    got += size_t(r);
  }
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(30);
    int ran = 0;
    for (auto end = Clock::now() + std::chrono::milliseconds(300); !ran && Clock::now() < end;
         usleep(1000))
      ran += nic_poll(0);
    if (ran) _exit(1);
    Done mine;
    if (PostParts(ep, parts.List(), &mine) != -ENODEV || nic_uring_endpoint_destroy(ep) != -ENODEV)
      _exit(2);
    nic_endpoint *own = nic_uring_endpoint_create(pair.tx);
    if (!own) _exit(3);
    if (PostParts(own, childs.List(), &mine) != 0) _exit(4);
    if (!NicPollUntil([&] { return mine.calls == 1; })) _exit(5);
    if (mine.status != 0) _exit(6);
    int rc = -EBUSY;
    NicPollUntil([&] { return (rc = nic_uring_endpoint_destroy(own)) != -EBUSY; });
    _exit(rc == 0 ? 0 : 7);
  }
  ExpectChildExitsZero(pid, "1: the child ran the parent's completion; 2: it could post or destroy "
                            "the parent's endpoint; 3-7: its own endpoint did not send (see the "
                            "test)");
  std::string got(childs.Bytes().size(), '\0');
  for (size_t at = 0; at < got.size();) {
    ssize_t r = read(pair.rx, got.data() + at, got.size() - at);
    ASSERT_GT(r, 0);
    at += size_t(r);
  }
  EXPECT_TRUE(got == childs.Bytes()) << "the child's message arrived changed";
  EXPECT_TRUE(NicPollUntil([&] { return d.calls == 1; }, std::chrono::seconds(5)))
      << "the parent's completion was lost";
  EXPECT_EQ(d.status, 0);
}

// Under sim the io_uring endpoint starts its own backend beside the default one, quietly, and
// its messages arrive whole (test_multi_backend.cc goes further).
TEST(UringEndpointBesideSim, StartsItsBackendAndDelivers) {
  struct nic_backend *b = nic_backend_active();
  if (b && nic_uring_is(b)) GTEST_SKIP() << "the backend is uring: ctest runs this under sim";
  LoopbackPair pair;
  testing::internal::CaptureStderr();
  nic_endpoint *ep = nic_uring_endpoint_create(pair.tx);
  std::string err = testing::internal::GetCapturedStderr();
  ASSERT_NE(ep, nullptr) << "errno " << errno << ": " << err;
  EXPECT_EQ(err, "");
  Parts parts(5);
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  for (auto [p, n] : parts.List())
    ASSERT_EQ(nic_sga_add(&sga, p, n), 0);
  std::atomic<int> calls{0}, status{1};
  struct Done {
    std::atomic<int> *calls, *status;
  } done{&calls, &status};
  ASSERT_EQ(nic_sga_post(
                &sga, ep,
                [](void *arg, int st) {
                  auto *d = static_cast<Done *>(arg);
                  d->status->store(st);
                  d->calls->fetch_add(1);
                },
                &done),
            0);
  const std::string want = parts.Bytes();
  std::string got;
  char buf[1 << 16];
  for (auto end = Clock::now() + kLimit; got.size() < want.size() && Clock::now() < end;) {
    pollfd p = {pair.rx, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t n = read(pair.rx, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_TRUE(got == want) << "got " << got.size() << " bytes of " << want.size();
  for (auto end = Clock::now() + kLimit; !calls && Clock::now() < end;)
    nic_wait(100);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(nic_uring_endpoint_destroy(ep), 0);
}

} // namespace
