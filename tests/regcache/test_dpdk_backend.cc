// The dpdk backend plugin, for real: net_ring (the peer gets the very mbufs: true zero-copy) and
// net_af_packet over a veth pair in a network namespace this process creates. EAL starts once
// per process; ctest runs each test in its own process.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <net/if.h>
#include <netpacket/packet.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_memory.h>

#include "../dpdk_app_eal.h"
#include "backend.h"
#include "dpdk.h"
#include "dpdk_rx.h"
#include "nicmalloc.h"
#include "plugin_test_host.h"

namespace {

void *Plugin() {
  static void *h = dlopen(NIC_PLUGIN_DIR "/libnicmalloc-dpdk.so", RTLD_NOW | RTLD_LOCAL);
  return h;
}
#define SYM(fn) reinterpret_cast<decltype(&fn)>(dlsym(Plugin(), #fn))

const int kCpusAtStart = [] {
  cpu_set_t s;
  return sched_getaffinity(0, sizeof s, &s) ? -1 : CPU_COUNT(&s);
}();

int Run(const std::string &cmd) {
  return system(("timeout 10 " + cmd + " >/dev/null 2>&1").c_str());
}

// A veth pair (veth-a, veth-b) in a namespace of our own. Once this thread is inside, the name is
// removed at once: the namespace and the pair then vanish with the process, crash or not.
struct Veth {
  bool ok = false;
  std::string why;
};
const Veth &VethPair() {
  static const Veth v = [] {
    Veth v;
    std::string ns = "nicmalloc-test-" + std::to_string(getpid()), in = "ip -n " + ns + " ";
    if (geteuid() != 0) return v.why = "not root: cannot create a namespace and veth pair", v;
    if (Run("ip netns add " + ns)) return v.why = "`ip netns add` failed (iproute2?)", v;
    bool ok = !Run(in + "link add veth-a type veth peer name veth-b") &&
              !Run(in + "link set veth-a up") && !Run(in + "link set veth-b up");
    int fd = ok ? open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC) : -1;
    v.ok = fd >= 0 && setns(fd, CLONE_NEWNET) == 0;
    if (fd >= 0) close(fd);
    Run("ip netns del " + ns);
    if (!v.ok) v.why = "could not create a veth pair in namespace " + ns;
    return v;
  }();
  return v;
}

struct nic_backend *Backend() {
  static struct nic_backend *b = [] {
    static std::string vdev = "net_ring0";
    if (VethPair().ok) vdev += ";net_af_packet0,iface=veth-a";
    nic_plugin_settings s{}; // NICMALLOC_DPDK_VDEV as libnicmalloc hands it over (backend.c)
    s.dpdk_vdev = vdev.c_str();
    if (auto take = SYM(nic_backend_dpdk_settings)) take(&s);
    auto open = SYM(nic_backend_dpdk_open);
    return open ? open(TestPluginHost()) : nullptr;
  }();
  return b;
}

// The dataplane chunk holding a nic_malloc block, registered for this test.
struct ChunkReg {
  struct nic_backend *b;
  nic_registration reg{};
  int rc = -1;
  explicit ChunkReg(struct nic_backend *be) : b(be) {
    nic_region_ref ref{};
    void *p = nic_malloc(64);
    if (p && nic_translate(p, 1, &ref) == 0)
      rc = b->reg(b, ref.region_base, ref.region_len, NIC_ACCESS_LOCAL, &reg);
    free(p);
  }
  ~ChunkReg() {
    if (!rc) {
      EXPECT_EQ(b->dereg(b, &reg), 0);
    }
  }
  nic_sge Sge(const void *p, uint32_t len) const { return {p, len, reg.lkey, reg.handle}; }
};

struct Done {
  int calls = 0, status = 1;
  static void Fn(void *arg, int status) {
    auto *d = static_cast<Done *>(arg);
    d->calls++;
    d->status = status;
  }
};

using Clock = std::chrono::steady_clock;
bool PollFor(struct nic_backend *b, const Done &d, int ms = 3000) {
  for (auto end = Clock::now() + std::chrono::milliseconds(ms); !d.calls && Clock::now() < end;)
    if (!b->poll(b, 16)) std::this_thread::sleep_for(std::chrono::microseconds(100));
  return d.calls > 0;
}

// Entries from three dataplane blocks; the 70000-byte one needs two extbuf segments.
struct Payload {
  std::vector<char *> bufs;
  std::vector<uint32_t> lens{14, 1000, 70000};
  std::string expect;
  Payload() {
    for (size_t i = 0; i < lens.size(); i++) {
      bufs.push_back(static_cast<char *>(nic_malloc(lens[i])));
      for (uint32_t j = 0; j < lens[i]; j++)
        bufs[i][j] = static_cast<char>(i * 31 + j * 7);
      expect.append(bufs[i], lens[i]);
    }
  }
  ~Payload() {
    for (char *p : bufs)
      free(p);
  }
  std::vector<nic_sge> Sges(const ChunkReg &r) const {
    std::vector<nic_sge> v;
    for (size_t i = 0; i < lens.size(); i++)
      v.push_back(r.Sge(bufs[i], lens[i]));
    return v;
  }
};

// Posts the payload to ep and receives it on rx_port: the very mbufs, pointing at our memory.
void ZeroCopyRoundTrip(struct nic_backend *b, nic_endpoint *ep, uint16_t rx_port) {
  ChunkReg r(b);
  ASSERT_EQ(r.rc, 0);
  Payload pl;
  auto sge = pl.Sges(r);
  Done d;
  ASSERT_EQ(b->post(b, ep, sge.data(), sge.size(), Done::Fn, &d), 0);
  rte_mbuf *m = RxOne(rx_port);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->nb_segs, 4);
  EXPECT_EQ(m->pkt_len, pl.expect.size());
  EXPECT_EQ(Bytes(m), pl.expect);
  const rte_mbuf *seg = m;
  for (size_t i = 0; i < pl.bufs.size(); i++, seg = seg->next)
    EXPECT_EQ(seg->buf_addr, pl.bufs[i]) << "segment " << i << " is not our memory";
  EXPECT_EQ(seg->buf_addr, pl.bufs[2] + 65535);
  EXPECT_EQ(b->poll(b, 16), 0) << "completed while the peer still holds the mbufs";
  EXPECT_EQ(b->dereg(b, &r.reg), -EBUSY);
  rte_pktmbuf_free(m);
  EXPECT_EQ(d.calls, 0) << "done ran inside the free, not from poll";
  ASSERT_TRUE(PollFor(b, d));
  EXPECT_EQ(d.status, 0);
}

uint16_t Port(const char *name) {
  uint16_t port = UINT16_MAX;
  rte_eth_dev_get_port_by_name(name, &port);
  return port;
}

// Configures and starts a port as an application would (ethdev wants an rx pool even where
// net_ring never takes from it); multi-segment transmit unless told (net_null has none).
uint16_t StartPort(int port, bool multi_segs = true) {
  static rte_mempool *pool =
      rte_pktmbuf_pool_create("nm_test_rx", 255, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  rte_eth_conf conf{};
  if (multi_segs) conf.txmode.offloads = RTE_ETH_TX_OFFLOAD_MULTI_SEGS; // chains go out whole
  if (!pool || port < 0 || rte_eth_dev_configure(port, 1, 1, &conf) ||
      rte_eth_rx_queue_setup(port, 0, 64, SOCKET_ID_ANY, nullptr, pool) ||
      rte_eth_tx_queue_setup(port, 0, 64, SOCKET_ID_ANY, nullptr) || rte_eth_dev_start(port))
    return UINT16_MAX;
  return static_cast<uint16_t>(port);
}

uint16_t RingPort(const char *name, rte_ring *rx, rte_ring *tx) {
  return StartPort(rte_eth_from_rings(name, &rx, 1, &tx, 1, SOCKET_ID_ANY));
}

// Tests that start EAL themselves (as an application would) or make it fail need a process of
// their own: ctest gives them one; a run of the whole binary skips them.
bool AloneInProcess() {
  return ::testing::UnitTest::GetInstance()->test_to_run_count() == 1;
}
#define REQUIRE_OWN_PROCESS()                                                                      \
  if (!AloneInProcess()) GTEST_SKIP() << "needs EAL to itself: run it alone (ctest does)"

uint16_t ApplicationEal() {
  if (!StartApplicationEal({"--vdev=net_ring1"})) return UINT16_MAX;
  return StartPort(Port("net_ring1"));
}

TEST(DpdkAppEal, AttachedPortIsTheDefaultEndpoint) {
  REQUIRE_OWN_PROCESS();
  uint16_t port = ApplicationEal(), p = 0;
  ASSERT_NE(port, UINT16_MAX);
  ASSERT_EQ(SYM(nic_dpdk_attach)(port, 0), 0);
  struct nic_backend *b = SYM(nic_backend_dpdk_open)(TestPluginHost());
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(SYM(nic_dpdk_owns_eal)(b));
  nic_endpoint *ep = SYM(nic_dpdk_default_endpoint)(b);
  ASSERT_NE(ep, nullptr);
  SYM(nic_dpdk_endpoint_port)(ep, &p, nullptr);
  EXPECT_EQ(p, port);
  ZeroCopyRoundTrip(b, ep, port);
  b->close(b);
}

TEST(DpdkAppEal, FoundWithoutAttachAndLeftAlone) {
  REQUIRE_OWN_PROCESS();
  uint16_t port = ApplicationEal();
  ASSERT_NE(port, UINT16_MAX);
  struct nic_backend *b = SYM(nic_backend_dpdk_open)(TestPluginHost());
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(SYM(nic_dpdk_owns_eal)(b));
  EXPECT_EQ(SYM(nic_dpdk_default_endpoint)(b), nullptr);
  EXPECT_EQ(rte_eth_dev_count_avail(), 1u) << "nicmalloc added ports to the application's EAL";
  nic_endpoint *ep = SYM(nic_dpdk_endpoint)(b, port, 0);
  ASSERT_NE(ep, nullptr);
  ZeroCopyRoundTrip(b, ep, port);
  EXPECT_EQ(SYM(nic_dpdk_endpoint_close)(b, ep), 0);
  b->close(b);
}

TEST(DpdkEalArgs, RefusedArgumentsGiveNullAndErrno) {
  REQUIRE_OWN_PROCESS();
  nic_plugin_settings s{};
  s.dpdk_eal_args = "--no-huge --no-such-eal-option";
  SYM(nic_backend_dpdk_settings)(&s);
  errno = 0;
  EXPECT_EQ(SYM(nic_backend_dpdk_open)(TestPluginHost()), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// EAL arguments that start EAL alone, then `--log-level=notice` (harmless again and again), so
// that they are `words` words in all.
std::string EalWords(int words) {
  std::string args = "--no-huge -m 256 --no-pci --no-shconf --no-telemetry";
  for (int n = 6; n < words; n++)
    args += " --log-level=notice";
  return args;
}

// Words past the 47th were dropped without a word, and EAL started without them: 50 words whose
// last one EAL refuses started it. Every word reaches EAL now.
TEST(DpdkEalArgs, EveryWordReachesEal) {
  REQUIRE_OWN_PROCESS();
  static const std::string args = EalWords(49) + " --no-such-eal-option";
  nic_plugin_settings s{};
  s.dpdk_eal_args = args.c_str();
  SYM(nic_backend_dpdk_settings)(&s);
  errno = 0;
  EXPECT_EQ(SYM(nic_backend_dpdk_open)(TestPluginHost()), nullptr) << "the 50th word was dropped";
  EXPECT_EQ(errno, EINVAL);
}

// Words past the room (62, two a vdev) are refused whole, and said, rather than dropped.
TEST(DpdkEalArgs, ArgumentsPastTheRoomAreRefusedAndSaid) {
  REQUIRE_OWN_PROCESS();
  static const std::string args = EalWords(58);
  nic_plugin_settings s{};
  s.dpdk_eal_args = args.c_str();
  s.dpdk_vdev = "net_ring0;net_ring1;net_ring2";
  SYM(nic_backend_dpdk_settings)(&s);
  errno = 0;
  testing::internal::CaptureStderr();
  struct nic_backend *b = SYM(nic_backend_dpdk_open)(TestPluginHost());
  const int err = errno;
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(b, nullptr) << "started without some of its arguments";
  EXPECT_EQ(err, E2BIG);
  EXPECT_NE(said.find("make 64 EAL arguments, more than the 62 nicmalloc passes: EAL not started"),
            std::string::npos)
      << said;
  EXPECT_EQ(rte_lcore_count(), 0u) << "EAL was started";
}

int MappingCount() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);)
    n++;
  return n;
}

// In a child process (EAL's interrupt thread used to abort it), with every descriptor under a
// limit of 64 taken but `left`, the plugin opens: what it said and did, as key=value lines.
std::string OpenWithDescriptorsLeft(int left) {
  int out[2];
  if (pipe(out)) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDERR_FILENO);
    close(out[0]);
    close(out[1]);
    const rlimit lim = {64, 64};
    if (setrlimit(RLIMIT_NOFILE, &lim)) _exit(3);
    const int maps_before = MappingCount();
    std::vector<int> fds;
    for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;)
      fds.push_back(fd);
    for (int i = 0; i < left && !fds.empty(); i++) {
      close(fds.back());
      fds.pop_back();
    }
    errno = 0;
    struct nic_backend *b = SYM(nic_backend_dpdk_open)(TestPluginHost());
    const int err = errno;
    for (int fd : fds)
      close(fd);
    fprintf(stderr, "\nopened=%d\nerrno=%d\nlcores=%u\nnew_mappings=%d\n", b != nullptr, err,
            rte_lcore_count(), MappingCount() - maps_before);
    _exit(0);
  }
  close(out[1]);
  std::string said;
  char buf[4096];
  for (ssize_t got; (got = read(out[0], buf, sizeof buf)) > 0;)
    said.append(buf, static_cast<size_t>(got));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  said += "\nstatus=" + std::to_string(status) + "\n";
  return said;
}

// EAL opens 5 descriptors as it starts. With 2 left it failed half way and its interrupt thread
// aborted the program ("PANIC in eal_intr_thread_main(): Cannot create epoll instance"); with 3
// left it failed and left ~1000 mappings behind. It is not started now: EMFILE, said once.
void RefusedWithDescriptorsLeft(int left) {
  const std::string said = OpenWithDescriptorsLeft(left);
  EXPECT_NE(said.find("\nstatus=0\n"), std::string::npos) << "the child did not exit: " << said;
  EXPECT_EQ(said.find("PANIC"), std::string::npos) << said;
  EXPECT_NE(said.find("\nopened=0\n"), std::string::npos) << said;
  EXPECT_NE(said.find("\nerrno=" + std::to_string(EMFILE) + "\n"), std::string::npos) << said;
  EXPECT_NE(said.find("\nlcores=0\n"), std::string::npos) << "EAL was started: " << said;
  const std::string why = "free file descriptors as it starts";
  const size_t first = said.find(why);
  EXPECT_NE(first, std::string::npos) << said;
  EXPECT_EQ(said.find(why, first + 1), std::string::npos) << "said twice: " << said;
  const size_t at = said.find("\nnew_mappings=");
  ASSERT_NE(at, std::string::npos) << said;
  EXPECT_LT(std::stoi(said.substr(at + 14)), 100) << "a failed EAL left its mappings";
}

TEST(DpdkEalFds, TwoDescriptorsLeftRefusedWithoutEndingTheProgram) {
  REQUIRE_OWN_PROCESS();
  RefusedWithDescriptorsLeft(2);
}

TEST(DpdkEalFds, ThreeDescriptorsLeftRefusedWithoutLeavingMappings) {
  REQUIRE_OWN_PROCESS();
  RefusedWithDescriptorsLeft(3);
}

// A bonding port sends through its member ports, which may be PCI NICs that DMA from the very
// mbufs: though it sits on the vdev bus, the backend holds the pages of its registrations. It was
// taken as a virtual device, and free dataplane pages went from under the members' DMA.
TEST(DpdkPortKinds, ABondingPortAtOpenKeepsRegisteredPages) {
  REQUIRE_OWN_PROCESS();
  nic_plugin_settings s{};
  s.dpdk_vdev = "net_null0;net_null1;net_bonding0,mode=0,slave=net_null0,slave=net_null1";
  SYM(nic_backend_dpdk_settings)(&s);
  struct nic_backend *b = SYM(nic_backend_dpdk_open)(TestPluginHost());
  ASSERT_NE(b, nullptr) << "EAL did not start with a bonding port: " << strerror(errno);
  EXPECT_FALSE(b->caps.pages_follow) << "a bonding port's registrations let their pages go";
  b->close(b);
}

// Opened with CPU ports only (net_null), the backend refuses an endpoint on a bonding port probed
// after, and says which driver; a net_null port probed after is taken.
TEST(DpdkPortKinds, ABondingPortProbedAfterAnOpenOnCpuPortsIsRefused) {
  REQUIRE_OWN_PROCESS();
  ASSERT_TRUE(StartApplicationEal({"--vdev=net_null0", "--vdev=net_null1"}));
  struct nic_backend *b = SYM(nic_backend_dpdk_open)(TestPluginHost());
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->caps.pages_follow);
  ASSERT_EQ(rte_dev_probe("net_bonding0,mode=0,slave=net_null1"), 0);
  ASSERT_EQ(rte_dev_probe("net_null2"), 0);
  const uint16_t bond = StartPort(Port("net_bonding0"), false);
  const uint16_t null2 = StartPort(Port("net_null2"), false);
  ASSERT_NE(bond, UINT16_MAX);
  ASSERT_NE(null2, UINT16_MAX);
  testing::internal::CaptureStderr();
  errno = 0;
  EXPECT_EQ(SYM(nic_dpdk_endpoint)(b, bond, 0), nullptr) << "taken as a CPU port";
  EXPECT_EQ(errno, EOPNOTSUPP);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("(driver net_bonding) may DMA"), std::string::npos) << said;
  nic_endpoint *ep = SYM(nic_dpdk_endpoint)(b, null2, 0);
  ASSERT_NE(ep, nullptr) << strerror(errno);
  EXPECT_EQ(SYM(nic_dpdk_endpoint_close)(b, ep), 0);
  b->close(b);
}

TEST(DpdkPlugin, LoadsOnlyWhenAskedAndExportsItsApi) {
  std::ifstream maps("/proc/self/maps");
  std::string all((std::istreambuf_iterator<char>(maps)), {});
  EXPECT_EQ(all.find("libnicmalloc-dpdk.so"), std::string::npos) << "loaded without dlopen";
  ASSERT_NE(Plugin(), nullptr) << dlerror();
  EXPECT_NE(SYM(nic_backend_dpdk_open), nullptr);
  EXPECT_NE(SYM(nic_dpdk_chain), nullptr);
  EXPECT_EQ(dlsym(Plugin(), "nic_plugin_log"), nullptr) << "the host's services stay hidden";
}

class DpdkRing : public ::testing::Test {
protected:
  void SetUp() override {
    b = Backend();
    ASSERT_NE(b, nullptr) << "EAL did not start: " << strerror(errno);
    ASSERT_NE(ep = SYM(nic_dpdk_default_endpoint)(b), nullptr);
  }
  struct nic_backend *b = nullptr;
  nic_endpoint *ep = nullptr;
};

TEST_F(DpdkRing, StartedEalWithoutPinningTheCaller) {
  EXPECT_TRUE(SYM(nic_dpdk_owns_eal)(b));
  cpu_set_t s;
  ASSERT_EQ(sched_getaffinity(0, sizeof s, &s), 0);
  EXPECT_EQ(CPU_COUNT(&s), kCpusAtStart);
  EXPECT_FALSE(b->caps.max_regions == 0 || b->caps.max_sge == 0);
  // net_ring and net_af_packet reach memory through the CPU: free pages may go under a
  // registration.
  EXPECT_TRUE(b->caps.pages_follow);
}

TEST_F(DpdkRing, MultiSegmentPostIsZeroCopyAndCompletesAfterThePeerFrees) {
  ZeroCopyRoundTrip(b, ep, Port("net_ring0")); // net_ring0 alone loops back to itself
}

// A post finds and counts its entries' registrations in flight in one step, so a deregistration
// that comes while the post still builds its chain (here from inside the allocation of its
// record) finds them busy. It found them free between the post's check and its count: the
// registration went, the post's second look for it found nothing and the count dereferenced
// NULL (SIGSEGV), or, the slot registered again, the chain took another registration's IOVA.
TEST_F(DpdkRing, ADeregistrationWhileAPostIsBuiltFindsItsRegistrationBusy) {
  static ChunkReg *reg;
  static int deregs, rc;
  ChunkReg r(b);
  ASSERT_EQ(r.rc, 0);
  reg = &r;
  deregs = 0;
  rc = 1;
  char *p = static_cast<char *>(nic_malloc(1000));
  ASSERT_NE(p, nullptr);
  memset(p, 'd', 1000);
  const nic_sge sge = r.Sge(p, 1000);
  Done d;
  TestCallocHook() = [] {
    if (deregs++ == 0) rc = reg->b->dereg(reg->b, &reg->reg);
  };
  const int posted = b->post(b, ep, &sge, 1, Done::Fn, &d);
  TestCallocHook() = nullptr;
  ASSERT_EQ(posted, 0);
  ASSERT_EQ(deregs, 1) << "the post allocated nothing: the test no longer reaches its middle";
  EXPECT_EQ(rc, -EBUSY);
  rte_mbuf *m = RxOne(Port("net_ring0"));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->buf_addr, p);
  EXPECT_EQ(Bytes(m), std::string(1000, 'd'));
  rte_pktmbuf_free(m);
  ASSERT_TRUE(PollFor(b, d));
  EXPECT_EQ(d.status, 0);
  free(p); // ~ChunkReg deregisters it now: nothing counts it any more
}

TEST_F(DpdkRing, ApplicationPortPairAndTheChainHelper) {
  rte_ring *ab = rte_ring_create("nm_ab", 4, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  rte_ring *ba = rte_ring_create("nm_ba", 4, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  uint16_t a = RingPort("nm_a", ba, ab), peer = RingPort("nm_b", ab, ba);
  ASSERT_TRUE(a != UINT16_MAX && peer != UINT16_MAX);
  nic_endpoint *app_ep = SYM(nic_dpdk_endpoint)(b, a, 0);
  ASSERT_NE(app_ep, nullptr);
  ZeroCopyRoundTrip(b, app_ep, peer);

  // The helper alone: the application sends the chain itself; the last free on another
  // thread queues the completion, poll() runs it here.
  ChunkReg r(b);
  Payload pl;
  auto sge = pl.Sges(r);
  Done d;
  rte_mbuf *m = SYM(nic_dpdk_chain)(b, sge.data(), sge.size(), Done::Fn, &d);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(rte_eth_tx_burst(a, 0, &m, 1), 1);
  rte_mbuf *got = RxOne(peer);
  ASSERT_EQ(got, m);
  std::thread([got] { rte_pktmbuf_free(got); }).join();
  ASSERT_TRUE(PollFor(b, d));
  EXPECT_EQ(d.status, 0);

  // A full queue (ring of 3): the fourth post waits in the backlog, and a poll sends it once
  // the peer made room.
  Done ds[4];
  for (Done &x : ds)
    ASSERT_EQ(b->post(b, app_ep, sge.data(), 1, Done::Fn, &x), 0);
  EXPECT_EQ(b->poll(b, 16), 0);
  EXPECT_EQ(ds[3].calls, 0) << "completed unsent";
  EXPECT_EQ(SYM(nic_dpdk_endpoint_close)(b, app_ep), -EBUSY) << "closed with a post waiting";
  for (int i = 0; i < 3; i++)
    rte_pktmbuf_free(RxOne(peer));
  b->poll(b, 16);
  rte_pktmbuf_free(RxOne(peer));
  for (Done &x : ds) {
    ASSERT_TRUE(PollFor(b, x));
    EXPECT_EQ(x.status, 0);
  }
  EXPECT_EQ(SYM(nic_dpdk_endpoint_close)(b, app_ep), 0);
}

// An application port pair whose rings hold 3 packets: port a sends, the test receives on the
// other one.
struct SmallRingPair {
  uint16_t a = UINT16_MAX, peer = UINT16_MAX;
  SmallRingPair() {
    static int pairs;
    const std::string name = "nm_small" + std::to_string(pairs++);
    rte_ring *ab =
        rte_ring_create((name + "_ab").c_str(), 4, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    rte_ring *ba =
        rte_ring_create((name + "_ba").c_str(), 4, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (!ab || !ba) return;
    a = RingPort((name + "_a").c_str(), ba, ab);
    peer = RingPort((name + "_b").c_str(), ab, ba);
  }
  bool ok() const { return a != UINT16_MAX && peer != UINT16_MAX; }
  static constexpr unsigned kHolds = 3;
};

// Posting on a small ring pair's port a (app_ep), from the registered chunk of reg.
class DpdkSmallRing : public DpdkRing {
protected:
  void SetUp() override {
    DpdkRing::SetUp();
    if (HasFatalFailure()) return;
    pair = std::make_unique<SmallRingPair>();
    ASSERT_TRUE(pair->ok());
    ASSERT_NE(app_ep = SYM(nic_dpdk_endpoint)(b, pair->a, 0), nullptr);
    reg = std::make_unique<ChunkReg>(b);
    ASSERT_EQ(reg->rc, 0);
  }
  void TearDown() override {
    if (app_ep) {
      EXPECT_EQ(SYM(nic_dpdk_endpoint_close)(b, app_ep), 0);
    }
  }
  // The next packet on the peer, polling meanwhile (polls send the backlog); NULL after 3 s.
  rte_mbuf *NextPacket() {
    rte_mbuf *m = nullptr;
    for (auto end = Clock::now() + std::chrono::seconds(3); Clock::now() < end; b->poll(b, 0))
      if (rte_eth_rx_burst(pair->peer, 0, &m, 1)) return m;
    return nullptr;
  }
  // Receives n packets on the peer, the posts' numbers in order from first (each packet the
  // 4-byte number its post sent), and waits for their posts to complete with 0.
  void ReceiveInOrder(uint32_t first, uint32_t n, std::vector<Done> &done) {
    for (uint32_t i = first; i < first + n; i++) {
      rte_mbuf *m = NextPacket();
      ASSERT_NE(m, nullptr) << "post " << i << " never arrived";
      std::string got = Bytes(m);
      rte_pktmbuf_free(m);
      uint32_t seq = UINT32_MAX;
      if (got.size() >= sizeof seq) memcpy(&seq, got.data(), sizeof seq);
      ASSERT_EQ(seq, i) << "out of order";
    }
    for (uint32_t i = first; i < first + n; i++) {
      ASSERT_TRUE(PollFor(b, done[i])) << "post " << i;
      EXPECT_EQ(done[i].status, 0) << "post " << i;
    }
  }
  std::unique_ptr<SmallRingPair> pair;
  nic_endpoint *app_ep = nullptr;
  std::unique_ptr<ChunkReg> reg;
};

// Posts past what the tx queue holds wait in the endpoint's backlog and leave in post order as
// the queue drains (polls and later posts send the backlog first), each completing with 0; past
// NIC_DPDK_BACKLOG of them a post is refused at once with -EAGAIN: nothing sent, no done(). A
// post the full queue did not take completed with -EAGAIN, unsent, while the posts after it went
// out once the queue drained: a stream's reader got a hole and every post() had returned 0.
TEST_F(DpdkSmallRing, PostsPastAFullQueueWaitAndLeaveInOrderAndAFullBacklogIsRefused) {
  const uint32_t taken = SmallRingPair::kHolds + NIC_DPDK_BACKLOG;
  auto *seq = static_cast<uint32_t *>(nic_malloc((taken + 1) * sizeof(uint32_t)));
  ASSERT_NE(seq, nullptr);
  std::vector<Done> done(taken + 1);
  for (uint32_t i = 0; i <= taken; i++)
    seq[i] = i;
  for (uint32_t i = 0; i < taken; i++) {
    const nic_sge sge = reg->Sge(&seq[i], sizeof seq[i]);
    ASSERT_EQ(b->post(b, app_ep, &sge, 1, Done::Fn, &done[i]), 0) << "post " << i;
  }
  const nic_sge last = reg->Sge(&seq[taken], sizeof seq[taken]);
  EXPECT_EQ(b->post(b, app_ep, &last, 1, Done::Fn, &done[taken]), -EAGAIN);
  ReceiveInOrder(0, taken, done);
  EXPECT_EQ(done[taken].calls, 0) << "a refused post completed";
  ASSERT_EQ(b->post(b, app_ep, &last, 1, Done::Fn, &done[taken]), 0) << "room again";
  ReceiveInOrder(taken, 1, done);
  free(seq);
}

// With every mbuf header in use (chains of many segments waiting), a post is refused at once
// with -EAGAIN, before the backlog is full; the posts taken before it still leave in order. It
// completed with -ENOBUFS after the posts taken after it had been sent.
TEST_F(DpdkSmallRing, APostWithNoMbufHeaderLeftIsRefusedAndThoseBeforeItLeaveInOrder) {
  // Posts of 64 segments (the number, 64 times): the 8191 headers run out before the 128th.
  constexpr uint32_t kSegs = 64, kMost = 8191 / kSegs + 1;
  auto *seq = static_cast<uint32_t *>(nic_malloc(kMost * sizeof(uint32_t)));
  ASSERT_NE(seq, nullptr);
  std::vector<Done> done(kMost);
  uint32_t taken = 0;
  int rc = 0;
  for (; taken < kMost; taken++) {
    seq[taken] = taken;
    const std::vector<nic_sge> sge(kSegs, reg->Sge(&seq[taken], sizeof seq[taken]));
    if ((rc = b->post(b, app_ep, sge.data(), kSegs, Done::Fn, &done[taken])) != 0) break;
  }
  EXPECT_EQ(rc, -EAGAIN);
  ASSERT_LT(taken, kMost);
  EXPECT_GT(taken, SmallRingPair::kHolds) << "none waited";
  b->poll(b, 0);
  EXPECT_EQ(done[taken].calls, 0) << "a refused post completed";
  ReceiveInOrder(0, taken, done);
  free(seq);
}

// A backend that closes with posts in an endpoint's backlog completes each of them, unsent, with
// -ECANCELED, and gives their mbufs back.
TEST(DpdkBacklog, ClosingTheBackendCompletesWaitingPostsAndGivesTheirMbufsBack) {
  REQUIRE_OWN_PROCESS();
  struct nic_backend *b = Backend();
  ASSERT_NE(b, nullptr) << "EAL did not start: " << strerror(errno);
  rte_mempool *headers = rte_mempool_lookup("nic_extbuf_hdr");
  ASSERT_NE(headers, nullptr);
  SmallRingPair pair;
  ASSERT_TRUE(pair.ok());
  nic_endpoint *app_ep = SYM(nic_dpdk_endpoint)(b, pair.a, 0);
  ASSERT_NE(app_ep, nullptr);
  char *p = static_cast<char *>(nic_malloc(64));
  nic_region_ref ref{};
  ASSERT_EQ(nic_translate(p, 64, &ref), 0);
  nic_registration reg{}; // deregistered by the close
  ASSERT_EQ(b->reg(b, ref.region_base, ref.region_len, NIC_ACCESS_LOCAL, &reg), 0);
  const unsigned free_headers = rte_mempool_avail_count(headers);
  std::vector<Done> done(SmallRingPair::kHolds + 5);
  for (Done &d : done) {
    const nic_sge sge = {p, 64, reg.lkey, reg.handle};
    ASSERT_EQ(b->post(b, app_ep, &sge, 1, Done::Fn, &d), 0);
  }
  for (unsigned i = 0; i < SmallRingPair::kHolds; i++)
    rte_pktmbuf_free(RxOne(pair.peer));
  b->close(b);
  for (size_t i = 0; i < done.size(); i++) {
    EXPECT_EQ(done[i].calls, 1) << "post " << i;
    EXPECT_EQ(done[i].status, i < SmallRingPair::kHolds ? 0 : -ECANCELED) << "post " << i;
  }
  EXPECT_EQ(rte_mempool_avail_count(headers), free_headers) << "mbufs of waiting posts kept";
  EXPECT_EQ(RxOne(pair.peer, 50), nullptr) << "a cancelled post was sent";
  free(p);
}

// The memseg lists DPDK keeps for external memory (one per extmem area).
int ExternalLists() {
  int n = 0;
  rte_memseg_list_walk(
      [](const rte_memseg_list *msl, void *arg) {
        *static_cast<int *>(arg) += msl->external;
        return 0;
      },
      &n);
  return n;
}

// Every registration inside the dataplane range shares one extmem area over the whole range
// (IOVA-as-VA, only virtual ports): past the 64 areas, and the area goes with the last of them.
// Outside the range each registration has an area of its own.
TEST_F(DpdkRing, RegistrationsInTheDataplaneRangeShareOneExtmemArea) {
  ASSERT_EQ(rte_eal_iova_mode(), RTE_IOVA_VA) << "nicmalloc's EAL runs --no-huge";
  const size_t span = size_t{1} << 30, step = size_t{4} << 20;
  char *raw = static_cast<char *>(
      mmap(nullptr, 2 * span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  ASSERT_NE(raw, MAP_FAILED);
  char *base =
      reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(raw) + span - 1) & ~(span - 1));
  TestRange() = {base, span};
  const int lists = ExternalLists();
  std::vector<nic_registration> regs(100);
  for (size_t i = 0; i < regs.size(); i++) {
    char *p = base + i * step;
    ASSERT_EQ(mprotect(p, 4096, PROT_READ | PROT_WRITE), 0);
    std::memset(p, static_cast<int>(i), 4096);
    ASSERT_EQ(b->reg(b, p, 4096, NIC_ACCESS_LOCAL, &regs[i]), 0) << "registration " << i;
  }
  EXPECT_EQ(ExternalLists(), lists + 1);
  // The last one goes out as any: the mbuf points at it, its IOVA the address.
  Done d;
  nic_sge sge = {base + 99 * step, 100, regs[99].lkey, regs[99].handle};
  ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d), 0);
  rte_mbuf *m = RxOne(Port("net_ring0"));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->buf_addr, base + 99 * step);
  EXPECT_EQ(m->buf_iova, reinterpret_cast<uintptr_t>(base + 99 * step));
  EXPECT_EQ(Bytes(m), std::string(100, 99));
  rte_pktmbuf_free(m);
  ASSERT_TRUE(PollFor(b, d));
  EXPECT_EQ(d.status, 0);
  for (size_t i = 0; i < regs.size(); i++)
    EXPECT_EQ(b->dereg(b, &regs[i]), 0) << i;
  EXPECT_EQ(ExternalLists(), lists) << "the area outlived its last registration";
  ASSERT_EQ(b->reg(b, base, 4096, NIC_ACCESS_LOCAL, &regs[0]), 0) << "a new area after it";
  EXPECT_EQ(ExternalLists(), lists + 1);
  EXPECT_EQ(b->dereg(b, &regs[0]), 0);

  TestRange() = {};
  nic_registration own[2];
  for (int i = 0; i < 2; i++)
    ASSERT_EQ(b->reg(b, base + i * step, 4096, NIC_ACCESS_LOCAL, &own[i]), 0);
  EXPECT_EQ(ExternalLists(), lists + 2);
  for (nic_registration &r : own)
    EXPECT_EQ(b->dereg(b, &r), 0);
  EXPECT_EQ(ExternalLists(), lists);
  munmap(raw, 2 * span);
}

// Pages outside the dataplane registered twice (a cache region, then the same pages with more
// access: nic_register LOCAL then LOCAL_WRITE) share the first one's area; DPDK refuses a second
// area at the same address (-EEXIST). The area goes with the last of them.
TEST_F(DpdkRing, PagesRegisteredAgainShareTheirArea) {
  static char pages[4][4096] __attribute__((aligned(4096)));
  memset(pages, 5, sizeof pages);
  const int lists = ExternalLists();
  nic_registration whole{}, again{}, inside{};
  ASSERT_EQ(b->reg(b, pages, sizeof pages, NIC_ACCESS_LOCAL, &whole), 0);
  ASSERT_EQ(b->reg(b, pages, sizeof pages, NIC_ACCESS_LOCAL_WRITE, &again), 0);
  ASSERT_EQ(b->reg(b, pages[1], 100, NIC_ACCESS_LOCAL, &inside), 0);
  EXPECT_EQ(ExternalLists(), lists + 1);
  EXPECT_EQ(b->dereg(b, &whole), 0);
  EXPECT_EQ(ExternalLists(), lists + 1) << "the area went while others used it";
  Done d;
  nic_sge sge = {pages[2], 100, again.lkey, again.handle};
  ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d), 0);
  rte_mbuf *m = RxOne(Port("net_ring0"));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->buf_iova, reinterpret_cast<uintptr_t>(pages[2]));
  EXPECT_EQ(Bytes(m), std::string(100, 5));
  rte_pktmbuf_free(m);
  ASSERT_TRUE(PollFor(b, d));
  EXPECT_EQ(d.status, 0);
  EXPECT_EQ(b->dereg(b, &again), 0);
  EXPECT_EQ(b->dereg(b, &inside), 0);
  EXPECT_EQ(ExternalLists(), lists);
}

TEST_F(DpdkRing, UncoveredEntryCompletesWithEfaultAndBadArgumentsFailAtOnce) {
  ChunkReg r(b);
  ASSERT_EQ(r.rc, 0);
  static char outside[64];
  nic_sge bad = r.Sge(outside, sizeof outside), none = {outside, 8, 63, 63};
  for (nic_sge *s : {&bad, &none}) {
    Done d;
    ASSERT_EQ(b->post(b, ep, s, 1, Done::Fn, &d), 0);
    ASSERT_TRUE(PollFor(b, d));
    EXPECT_EQ(d.status, -EFAULT);
  }
  EXPECT_EQ(RxOne(Port("net_ring0"), 50), nullptr) << "an uncovered entry was sent";
  char *p = static_cast<char *>(nic_malloc(16));
  std::vector<nic_sge> many(b->caps.max_sge + 1, r.Sge(p, 16));
  nic_sge zero = r.Sge(p, 0);
  Done d;
  EXPECT_EQ(b->post(b, ep, many.data(), 0, Done::Fn, &d), -EINVAL);
  EXPECT_EQ(b->post(b, ep, many.data(), many.size(), Done::Fn, &d), -E2BIG);
  EXPECT_EQ(b->post(b, ep, &zero, 1, Done::Fn, &d), -EINVAL);
  EXPECT_EQ(b->poll(b, 16), 0);
  EXPECT_EQ(d.calls, 0);
  free(p);
}

// Receive memory that gives the pool of the ports the backend started its pages and nothing else.
void *PoolPagesOnly(size_t len) {
  return len == size_t{NIC_DPDK_RX_MBUFS} * 4096 ? aligned_alloc(4096, len) : nullptr;
}

// net_ring0 receiving on the backend's default endpoint: a packet in scattered segments longer
// than a pool buffer, for which the lent memory has no block, is dropped: counted through the
// host, said once, and the post that sent it (net_ring hands the receiver the sender's mbufs)
// completes with -ENOMEM. Its post completed with 0 and nothing counted it. A packet whose
// segments lie end to end is still handed over in place.
TEST_F(DpdkRing, AScatteredPacketNoBufferCanBeHadForIsDroppedCountedAndItsPostFails) {
  const struct nic_dpdk_rx_memory lend = {PoolPagesOnly, free};
  SYM(nic_dpdk_rx_memory)(&lend);
  static struct nic_backend *be;
  static nic_endpoint *rx_ep;
  static std::vector<const void *> got;
  be = b;
  rx_ep = SYM(nic_dpdk_endpoint)(b, Port("net_ring0"), 0); // a hold of ours: closed at the end
  ASSERT_EQ(rx_ep, ep);
  auto rx = [](void *, void *data, size_t, int, uint64_t token) {
    if (!data) return;
    got.push_back(data);
    be->rx_recycle(be, rx_ep, token);
  };
  ASSERT_EQ(b->endpoint_receive(b, rx_ep, rx, nullptr), 0);
  ChunkReg r(b);
  ASSERT_EQ(r.rc, 0);
  char *x = static_cast<char *>(nic_malloc(3000)), *y = static_cast<char *>(nic_malloc(3000));
  memset(x, 'x', 3000);
  memset(y, 'y', 3000);
  const nic_sge scattered[2] = {r.Sge(y, 3000), r.Sge(x, 3000)}; // y first: never end to end
  const uint64_t dropped = TestRxDropped();
  testing::internal::CaptureStderr();
  Done d;
  EXPECT_EQ(b->post(b, ep, scattered, 2, Done::Fn, &d), 0);
  EXPECT_TRUE(PollFor(b, d));
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(d.status, -ENOMEM) << "the sender was not told";
  EXPECT_TRUE(got.empty()) << "handed over";
  EXPECT_EQ(TestRxDropped(), dropped + 1) << "not counted";
  EXPECT_NE(said.find("no buffer of 6000 bytes for a received packet in scattered segments"),
            std::string::npos)
      << said;
  Done whole;
  const nic_sge one = r.Sge(x, 3000);
  EXPECT_EQ(b->post(b, ep, &one, 1, Done::Fn, &whole), 0);
  EXPECT_TRUE(PollFor(b, whole));
  EXPECT_EQ(whole.status, 0);
  EXPECT_EQ(got, std::vector<const void *>{x});
  EXPECT_EQ(TestRxDropped(), dropped + 1);
  EXPECT_EQ(SYM(nic_dpdk_endpoint_close)(b, rx_ep), 0); // receiving stops with it
  free(x);
  free(y);
}

TEST_F(DpdkRing, RemoteAccessIsRefusedAndLocalWriteHasNoRkey) {
  static char page[2][4096] __attribute__((aligned(4096)));
  nic_registration reg{};
  EXPECT_EQ(b->reg(b, page[0], 4096, NIC_ACCESS_REMOTE_READ, &reg), -EOPNOTSUPP);
  EXPECT_EQ(b->reg(b, page[0], 4096, NIC_ACCESS_REMOTE_WRITE, &reg), -EOPNOTSUPP);
  ASSERT_EQ(b->reg(b, page[1], 4096, NIC_ACCESS_LOCAL_WRITE, &reg), 0);
  EXPECT_EQ(reg.rkey, 0u);
  EXPECT_EQ(b->dereg(b, &reg), 0);
}

// Skips (with the reason) only when the veth pair cannot exist here.
TEST(DpdkAfPacket, MultiSegmentFrameArrivesOnThePeerVeth) {
  if (!VethPair().ok) GTEST_SKIP() << "net_af_packet test skipped: " << VethPair().why;
  struct nic_backend *b = Backend();
  ASSERT_NE(b, nullptr);
  uint16_t port = Port("net_af_packet0");
  ASSERT_NE(port, UINT16_MAX) << "net_af_packet0 did not probe on veth-a";
  nic_endpoint *ep = SYM(nic_dpdk_endpoint)(b, port, 0);
  ASSERT_NE(ep, nullptr);

  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(0x88B5));
  ASSERT_GE(fd, 0) << strerror(errno);
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(0x88B5);
  sll.sll_ifindex = static_cast<int>(if_nametoindex("veth-b"));
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr *>(&sll), sizeof sll), 0) << strerror(errno);

  // Broadcast, local-experimental ethertype 0x88B5; header and payload in three entries.
  ChunkReg r(b);
  ASSERT_EQ(r.rc, 0);
  const uint32_t lens[3] = {14, 300, 1100};
  std::string expect;
  std::vector<nic_sge> sge;
  std::vector<char *> bufs;
  for (int i = 0; i < 3; i++) {
    char *p = static_cast<char *>(nic_malloc(lens[i]));
    for (uint32_t j = 0; j < lens[i]; j++)
      p[j] = static_cast<char>(j * 13 + i);
    if (i == 0) memcpy(p, "\xff\xff\xff\xff\xff\xff\x02\x00\x00\x00\x00\x01\x88\xb5", 14);
    bufs.push_back(p);
    sge.push_back(r.Sge(p, lens[i]));
    expect.append(p, lens[i]);
  }
  Done d;
  ASSERT_EQ(b->post(b, ep, sge.data(), 3, Done::Fn, &d), 0);
  EXPECT_EQ(d.calls, 0) << "done ran inside post (af_packet frees inside tx_burst)";
  ASSERT_TRUE(PollFor(b, d));
  EXPECT_EQ(d.status, 0);
  std::string got(2048, '\0');
  ssize_t n = recv(fd, got.data(), got.size(), 0);
  ASSERT_GT(n, 0) << "nothing arrived on veth-b: " << strerror(errno);
  got.resize(static_cast<size_t>(n));
  EXPECT_EQ(got, expect);
  close(fd);
  for (char *p : bufs)
    free(p);
  EXPECT_EQ(SYM(nic_dpdk_endpoint_close)(b, ep), 0);
}

} // namespace
