// The sim's engine and a registration cache over the sim never wait on each other. A cache holds
// its lock while it registers with the sim (which takes the sim's lock); so the engine must take
// no cache lock under the sim's. It used to: the translation-cache model's working-set table grew
// inside the engine's checks, and the free of the old table, when a cached region covers freed
// memory (always, with a cache made for a backend), invalidates under the cache's lock. One
// thread registering pages one by one while the engine's table grows then froze both for good
// (found by the API fuzz over the DPDK backend, whose registration unmaps under the cache's lock).
// The scenario runs in a child process with an alarm, so that a deadlock fails the test with a
// message instead of hanging it.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

extern "C" {
#include "rcache.h"
#include "sim_nic.h"
}

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kPosted = 256u << 20; // where the posts' entries lie: many distinct pages
constexpr size_t kRegistered = 64u << 20;

std::atomic<int> completed{0};
void on_done(void *, int) {
  completed++;
}

// Child: returns its exit status. Growth happens while the window's distinct pages double, up to
// its limit; the posts touch 64 Ki pages at random, so the table grows about twelve times.
int run_scenario() {
  nic_sim_config config;
  nic_sim_config_defaults(&config);
  config.fixed_delay_ns = 0;
  config.tcache.window = 1u << 20;
  nic_backend *b = nic_sim_open(&config);
  nic_endpoint *ep = b ? nic_sim_endpoint_open(b, nullptr, nullptr) : nullptr;
  char *posted = static_cast<char *>(
      mmap(nullptr, kPosted, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  char *registered = static_cast<char *>(
      mmap(nullptr, kRegistered, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  nic_rcache_params params{b, 4096, 0, "lock-order"};
  nic_rcache *cache = b ? nic_rcache_create(&params) : nullptr;
  if (!ep || posted == MAP_FAILED || registered == MAP_FAILED || !cache) return 2;
  nic_registration whole{};
  if (b->reg(b, posted, kPosted, NIC_ACCESS_LOCAL, &whole)) return 3;

  std::atomic<bool> stop{false};
  std::atomic<long> registrations{0};
  std::thread registering([&] {
    std::mt19937_64 rng(2);
    while (!stop.load(std::memory_order_relaxed)) {
      nic_rcache_ref ref{};
      const size_t page = rng() % (kRegistered / kPage);
      if (nic_rcache_acquire(cache, registered + page * kPage, kPage, NIC_ACCESS_LOCAL, &ref))
        continue;
      nic_rcache_release(cache, ref.slot);
      registrations++;
    }
  });

  std::mt19937_64 rng(1);
  const int kPosts = 4096;
  int posts = 0;
  for (int i = 0; i < kPosts; i++) {
    nic_sge sge[16];
    for (auto &e : sge)
      e = {posted + rng() % (kPosted / kPage) * kPage, (uint32_t)kPage, whole.lkey, whole.handle};
    if (b->post(b, ep, sge, 16, on_done, nullptr) == 0) posts++;
    if (i % 64 == 0) b->poll(b, 0);
  }
  while (completed.load() < posts)
    if (b->poll(b, 0) == 0) usleep(100);
  stop = true;
  registering.join();
  nic_sim_stats st;
  nic_sim_get_stats(b, &st);
  printf("%d posts, %ld registrations, working set peak %llu entries\n", posts,
         registrations.load(), (unsigned long long)st.tcache.ws_peak_entries);
  if (posts != kPosts || registrations.load() == 0) return 4;
  // The scenario only tests something when the table grew under way.
  if (st.tcache.ws_peak_entries < 16 * 1024) return 5;
  return 0;
}

} // namespace

TEST(SimLockOrder, TheEngineNeverWaitsOnACacheThatWaitsOnTheSim) {
  fflush(nullptr);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(120); // a deadlock ends here, killed by SIGALRM
    const int rc = run_scenario();
    fflush(nullptr);
    _exit(rc);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_FALSE(WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
      << "deadlock: the sim's engine and a thread registering through the cache froze";
  ASSERT_TRUE(WIFEXITED(status)) << "the scenario died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the scenario failed before it could test anything";
}
