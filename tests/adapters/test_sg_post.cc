// What the serializer adapters share (include/nicmalloc/sg_post.h), on the sim.
//
// Fork: a child uses the adapters while threads of its parent were inside them. What the
// adapters keep for the whole process (the list of streams every post and stream_error lock,
// FlatBuffers' default Allocator, Protobuf's ScratchPool) had a mutex that another thread could
// hold at the fork, and the child's first use then waited forever. Each case forks again and
// again while parent threads use the object, and each child uses it with a watchdog: a child
// that hangs is ended by SIGALRM, which the parent sees.
//
// Streams: the list that tells whether an endpoint's stream was cut.
#include <nicmalloc.h>
#include <nicmalloc/sg_post.h>
#ifdef NIC_WITH_FLATBUFFERS
#include <nicmalloc/flatbuffers.h>
#endif
#ifdef NIC_WITH_PROTOBUF
#include <nicmalloc/protobuf.h>
#endif

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

// Long enough for any child that does not hang, however loaded the machine.
constexpr unsigned kWatchdogSeconds = 30;
constexpr int kForks = 200;

// How the children of forks made while a thread runs each of loads again and again ended: ""
// when every one exited 0, else what the first one that did not said. child returns its exit
// status.
std::string ForkUnderLoad(const std::vector<std::function<void()>> &loads,
                          const std::function<int()> &child) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> loaders;
  for (const auto &load : loads)
    loaders.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed))
        load();
    });
  std::string failed;
  for (int i = 0; i < kForks && failed.empty(); i++) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(kWatchdogSeconds);
      _exit(child());
    }
    if (pid < 0) {
      failed = std::string("fork: ") + strerror(errno);
      break;
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
      failed = "child " + std::to_string(i) + " hung (ended by its watchdog)";
    else if (WIFSIGNALED(st))
      failed =
          "child " + std::to_string(i) + " was killed by signal " + std::to_string(WTERMSIG(st));
    else if (WEXITSTATUS(st) != 0)
      failed = "child " + std::to_string(i) + " exited " + std::to_string(WEXITSTATUS(st));
  }
  stop = true;
  for (auto &t : loaders)
    t.join();
  return failed;
}

void ignore_receive(void *, void *, size_t) {}

struct Done {
  std::atomic<int> calls{0}, status{1};
  static void Fn(void *a, int st) {
    auto *d = static_cast<Done *>(a);
    d->status = st;
    d->calls++;
  }
};

// Posts a message of two pieces to ep with the adapters and waits for its done(): 0, or what
// went wrong.
int PostAndWait(nic_endpoint *ep, const char *first, const char *second) {
  const nicmalloc::detail::Piece pieces[] = {{first, strlen(first)}, {second, strlen(second)}};
  Done done;
  nicmalloc::detail::Outgoing out{pieces, 2, {}, {}};
  const int rc = nicmalloc::detail::PostPieces(ep, std::move(out), Done::Fn, &done, 0);
  if (rc) return rc;
  while (done.calls.load() == 0)
    nic_wait(100);
  return done.status.load();
}

// A parent thread asks about its stream without a pause, another posts to it: either holds the
// list's lock much of the time. Each child makes an endpoint of its own and posts to it, as a
// worker of a prefork server would.
TEST(AdaptersFork, AChildPostsWhileParentThreadsPost) {
  nic_endpoint *ep = nic_sim_endpoint_create(ignore_receive, nullptr, 0);
  ASSERT_NE(ep, nullptr) << strerror(errno);
  ASSERT_EQ(PostAndWait(ep, "parent ", "message"), 0);
  const std::string failed =
      ForkUnderLoad({[&] { (void)nicmalloc::stream_error(ep); },
                     [&] { (void)PostAndWait(ep, "parent ", "message"); }},
                    [] {
                      nic_endpoint *mine = nic_sim_endpoint_create(ignore_receive, nullptr, 0);
                      if (!mine) return 2;
                      if (nicmalloc::stream_error(mine) != 0) return 3;
                      if (PostAndWait(mine, "child ", "message") != 0) return 4;
                      if (nicmalloc::stream_error(mine) != 0) return 5;
                      return nic_sim_endpoint_destroy(mine) == 0 ? 0 : 6;
                    });
  EXPECT_EQ(failed, "");
  EXPECT_EQ(nic_sim_endpoint_destroy(ep), 0);
}

// The fork handler is registered with the library the header is compiled into: once that
// library is unloaded, a fork runs nothing of it (a handler left behind would run unmapped code
// in every child). The module is built with hidden symbols, so that it has copies of its own and
// can be unloaded.
TEST(AdaptersFork, AnUnloadedLibraryLeavesNoForkHandler) {
  nic_endpoint *ep = nic_sim_endpoint_create(ignore_receive, nullptr, 0);
  ASSERT_NE(ep, nullptr) << strerror(errno);
  void *module = dlopen(NIC_SG_POST_MODULE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(module, nullptr) << dlerror();
  auto stream_error =
      reinterpret_cast<int (*)(const nic_endpoint *)>(dlsym(module, "sg_post_module_stream_error"));
  ASSERT_NE(stream_error, nullptr) << dlerror();
  EXPECT_EQ(stream_error(ep), 0);
  ASSERT_EQ(dlclose(module), 0);
  ASSERT_EQ(dlopen(NIC_SG_POST_MODULE, RTLD_NOW | RTLD_NOLOAD), nullptr)
      << "the module stayed loaded: the case shows nothing";
  const pid_t pid = fork();
  if (pid == 0) _exit(nicmalloc::stream_error(nullptr) == 0 ? 0 : 1);
  ASSERT_GT(pid, 0) << strerror(errno);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
      << (WIFSIGNALED(st) ? "killed by signal " + std::to_string(WTERMSIG(st)) : "exited");
  EXPECT_EQ(nic_sim_endpoint_destroy(ep), 0);
}

// An endpoint's stream stays listed while the endpoint lives, cut or not, so that a message
// only looks it up; those of endpoints destroyed go, cut or not, so that a program that makes
// and destroys endpoints (one per connection) does not grow the list.
TEST(AdapterStreams, AreListedWhileTheirEndpointsLive) {
  auto &streams = nicmalloc::detail::Streams::Get();
  // As a part that completes with an error cuts a stream.
  auto cut = [&](nic_endpoint *ep) {
    uint64_t seq = 0;
    nicmalloc::detail::Stream *s = streams.Join(ep, &seq);
    ASSERT_NE(s, nullptr);
    streams.Cut(s, seq, -EIO);
    streams.Leave(s);
  };
  nic_endpoint *kept = nic_sim_endpoint_create(ignore_receive, nullptr, 0);
  ASSERT_NE(kept, nullptr) << strerror(errno);
  ASSERT_EQ(PostAndWait(kept, "kept ", "message"), 0);
  cut(kept);
  ASSERT_EQ(nicmalloc::stream_error(kept), -EIO);
  size_t most = 0;
  for (int i = 0; i < 1000; i++) {
    nic_endpoint *ep = nic_sim_endpoint_create(ignore_receive, nullptr, 0);
    ASSERT_NE(ep, nullptr) << strerror(errno);
    ASSERT_EQ(PostAndWait(ep, "passing ", "message"), 0);
    if (i % 2) cut(ep);
    ASSERT_EQ(nic_sim_endpoint_destroy(ep), 0);
    most = std::max(most, streams.Listed());
  }
  EXPECT_LE(most, 64u) << "the streams of endpoints destroyed stay listed";
  EXPECT_EQ(nicmalloc::stream_error(kept), -EIO) << "a live endpoint's cut stream was dropped";
  nicmalloc::stream_restart(kept);
  EXPECT_EQ(PostAndWait(kept, "kept ", "again"), 0);
  EXPECT_EQ(nic_sim_endpoint_destroy(kept), 0);
}

#ifdef NIC_WITH_FLATBUFFERS
// Builders without an allocator of their own share the process's.
TEST(AdaptersFork, AChildBuildsFlatBuffersWhileParentThreadsDo) {
  auto &a = nicmalloc::flatbuffers::Allocator::Default();
  const std::string failed = ForkUnderLoad({[&] { a.deallocate(a.allocate(4096), 4096); },
                                            [&] { a.deallocate(a.allocate(8192), 8192); }},
                                           [] {
                                             nicmalloc::flatbuffers::Builder fbb;
                                             fbb.Finish(fbb.CreateString("child"));
                                             return fbb.GetSize() > 0 ? 0 : 2;
                                           });
  EXPECT_EQ(failed, "");
}
#endif

#ifdef NIC_WITH_PROTOBUF
// Output streams without a pool of their own share the process's scratch pool.
TEST(AdaptersFork, AChildTakesScratchWhileParentThreadsDo) {
  auto &pool = nicmalloc::protobuf::ScratchPool();
  const std::string failed = ForkUnderLoad(
      {[&] { pool.Give(pool.Take(4096, false)); }, [&] { pool.Give(pool.Take(8192, false)); }}, [] {
        nicmalloc::protobuf::OutputStream out;
        void *data = nullptr;
        int size = 0;
        return out.Next(&data, &size) && size > 0 ? 0 : 2;
      });
  EXPECT_EQ(failed, "");
}
#endif

} // namespace
