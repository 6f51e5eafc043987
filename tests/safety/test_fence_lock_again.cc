// NICMALLOC_FENCE=protect (userfaultfd) and a step used unpinned because RLIMIT_MEMLOCK had no
// room for it (NICMALLOC_ON_PIN_FAIL=fallback), locked by a later registration once room came
// back (alloc/heap/steps.c, lock_again), under the chunks lock. The sim is paused, so that a
// post keeps a page of the step write-protected as long as the test wants; the fence's timeout
// (NICMALLOC_FENCE_TIMEOUT_MS, set by the test's environment) is far beyond the test's deadlines,
// so that only the completion can let a held writer go.
#include <gtest/gtest.h>

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include <mimalloc.h> // before chunks.h: its C++ parts cannot sit in extern "C"

#include "nicmalloc.h"
extern "C" {
#include "chunk_reg.h"
#include "chunks.h"
#include "fence.h"
}

#include "sim_endpoint_fixture.h"

namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
constexpr milliseconds kLockDeadline{5000};
constexpr milliseconds kPostDeadline{20000}; // for a broken build, not a measurement
constexpr size_t kBlock = 512;
constexpr size_t kSpan = 64 << 10; // blocks that reach a new step soon

// Bytes this process has locked now (VmLck).
size_t LockedBytes() {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kib = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmLck: %zu kB", &kib) == 1) break;
  fclose(f);
  return kib << 10;
}

// CAP_IPC_LOCK in or out of the effective set; the permitted set keeps it, so that it can
// come back.
bool IpcLockEffective(bool on) {
  __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &header, data)) return false;
  const uint32_t bit = 1u << (CAP_IPC_LOCK % 32);
  if (on && !(data[CAP_IPC_LOCK / 32].permitted & bit)) return true; // never had it
  if (on)
    data[CAP_IPC_LOCK / 32].effective |= bit;
  else
    data[CAP_IPC_LOCK / 32].effective &= ~bit;
  return syscall(SYS_capset, &header, data) == 0;
}

// No room to lock anything more: the soft RLIMIT_MEMLOCK at what is locked now, CAP_IPC_LOCK
// out of effect. Room comes back with Restore.
class NoMemlockRoom {
public:
  NoMemlockRoom() {
    if (getrlimit(RLIMIT_MEMLOCK, &saved)) return;
    const rlimit low = {LockedBytes(), saved.rlim_max};
    ok = low.rlim_cur <= saved.rlim_max && IpcLockEffective(false) &&
         setrlimit(RLIMIT_MEMLOCK, &low) == 0;
  }
  ~NoMemlockRoom() { Restore(); }
  void Restore() {
    setrlimit(RLIMIT_MEMLOCK, &saved);
    IpcLockEffective(true);
  }
  bool ok = false;

private:
  rlimit saved{};
};

// fork's prepare takes the chunks lock (NIC_FORK_CHUNKS); the child leaves at once.
void ForkAChild() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
}

nic_step StepOf(const void *p) {
  nic_chunks_lock();
  const nic_step s = nic_chunk_at(nic_chunk_index(p))->steps[nic_step_index(p)];
  nic_chunks_unlock();
  return s;
}

class LockAgainProtect : public SimEndpointTest {
protected:
  void SetUp() override {
    const int rc = nic_fence_protect_use(NIC_PROTECT_UFFD);
    if (rc == -ENOTSUP) GTEST_SKIP() << "userfaultfd write-protect is not available here";
    ASSERT_EQ(rc, 0);
    SimEndpointTest::SetUp();
  }
  std::string Received(size_t i) {
    std::lock_guard<std::mutex> g(inbox.mu);
    return i < inbox.msgs.size() ? inbox.msgs[i] : "(nothing)";
  }
};

// The relock was mlock, which faults a private writable range in for write: on the page a
// post write-protects it waited for the completion, holding the chunks lock, and fork (the
// reaper, the sim's engine) waited with it, until NICMALLOC_FENCE_TIMEOUT_MS let the write
// through. The step is now locked in place: nothing written, nothing waited for.
TEST_F(LockAgainProtect, ARelockAtARegistrationWaitsForNoPostedPage) {
  nic_backend *uring = nic_backend_start(NIC_BACKEND_URING);
  if (!uring) GTEST_SKIP() << "io_uring is not available here";
  std::vector<char *> spans;
  char *x = nullptr;
  {
    NoMemlockRoom none;
    if (!none.ok) GTEST_SKIP() << "RLIMIT_MEMLOCK cannot be lowered here";
    for (int i = 0; i < 512 && !x; i++) {
      spans.push_back(static_cast<char *>(nic_malloc(kSpan)));
      ASSERT_NE(spans.back(), nullptr);
      const nic_step s = StepOf(spans.back());
      if (s.backed && !s.mapping.pinned) x = spans.back();
    }
    ASSERT_NE(x, nullptr) << "no step was backed unpinned";
    memset(x, 'X', kBlock);
    // The sim's registration faults the step in whole and finds no room to lock it yet.
    PostPaused(x, kBlock);
    ASSERT_TRUE(nic_fence_marked(reinterpret_cast<uintptr_t>(x)));
    const nic_step s = StepOf(x);
    ASSERT_TRUE(s.mapping.populated);
    ASSERT_FALSE(s.mapping.pinned);
  }
  const nic_stats before = Stats();
  const int target = done_count.load() + 1;
  auto reg = std::async(std::launch::async, [&] {
    nic_registration r;
    return nic_chunk_register_with(nic_chunk_index(x), nic_step_index(x), uring, &r);
  });
  auto forked = std::async(std::launch::async, ForkAChild);
  EXPECT_EQ(forked.wait_for(kLockDeadline), std::future_status::ready)
      << "fork waited while the step was being locked";
  nic_sim_pause(nic_backend_active(), false);
  for (const auto until = steady_clock::now() + kPostDeadline;
       done_count.load() < target && steady_clock::now() < until;)
    nic_poll(0);
  EXPECT_GE(done_count.load(), target) << "the post did not complete";
  forked.wait();
  const int rc = reg.get();
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(StepOf(x).mapping.pinned) << "the registration did not lock the step";
  const nic_stats after = Stats();
  EXPECT_EQ(after.fence_bypasses, before.fence_bypasses);
  EXPECT_EQ(after.fence_mismatches, before.fence_mismatches);
  EXPECT_EQ(Received(0), std::string(kBlock, 'X'));
  for (char *p : spans)
    free(p);
}

} // namespace
