// Random and adversarial pointers and lengths into every nic_* call, from several threads, for a
// bounded time, on the backend NICMALLOC_BACKEND names (sim with its random delays, uring over a
// loopback TCP connection, or dpdk on the port NICMALLOC_DPDK_VDEV names, net_ring0 in the suite,
// whose packets come back to its own receive queue and are received by the threads' polls). It
// passes when the process survives, every post completes exactly once, and once every thread has
// let go of what it holds, nothing stays live, held, deferred or in flight: a call that leaks
// pinned memory (a refused free, a lost reference) fails it.
// Now and then a thread forks while the others go on: the child goes on with the forking
// thread's calls (posts on the parent's endpoint fail with -ENODEV, and registering starts
// the child's own backend: README, fork), half the time posting on a sim endpoint of its own,
// lets go of what it holds and exits; it fails the run when it hangs (an inherited lock:
// killed by an alarm), dies, loses or repeats a completion of its own, or is left with posts in
// flight or frees deferred.
//   nic_api_fuzz <seconds> <threads> <seed>
#include <nicmalloc.h>

#include "loopback_pair.h"

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<uint64_t> calls{0}, posted{0}, completed{0}, double_completions{0}, received{0};
std::atomic<uint64_t> forks{0}, children_failed{0};
std::atomic<uint64_t> mallinfo_reads{0}, mallinfo_inconsistent{0};
std::atomic<int> last_child_status{0}; // a failed child's, from waitpid
std::atomic<bool> draining_stop{false};
// Set in a child: it makes its calls and exits, it forks no further.
bool in_child = false;
// How long a child may take before it counts as hung (its calls take milliseconds).
constexpr unsigned kChildAlarmSeconds = 30;

// Memory no call may reach, or only read: unmapped, PROT_NONE, read-only.
char *unmapped, *no_access, *read_only;
char static_buffer[1 << 16];

struct Post {
  std::atomic<int> done{0};
};

void on_done(void *arg, int) {
  auto *p = static_cast<Post *>(arg);
  if (p->done.fetch_add(1) != 0) double_completions++;
  completed++;
}

void on_receive(void *, void *, size_t) {
  received++;
}

// Standard error as the run started: the library's lines go to a pipe that counts them.
int report_fd = 2;

extern "C" char **environ;

// Where each thread of a stuck child is in its code, when gdb is installed (the suite does not
// need it; a hang is rare, and this is what finds its cause).
void backtraces(pid_t pid) {
  if (access("/usr/bin/gdb", X_OK)) return;
  char attach[32];
  snprintf(attach, sizeof attach, "%d", (int)pid);
  const char *argv[] = {"gdb",  "-p", attach, "-batch", "-nx", "-ex", "thread apply all bt",
                        nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, report_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, report_fd, 2);
  pid_t gdb = 0;
  if (!posix_spawn(&gdb, "/usr/bin/gdb", &fa, nullptr, const_cast<char **>(argv), environ)) {
    int status;
    while (waitpid(gdb, &status, 0) < 0 && errno == EINTR) {
    }
  }
  posix_spawn_file_actions_destroy(&fa);
}

// Each thread of a child near its alarm: its state, blocked and pending signals, the system call
// it is in and where the kernel has it wait (from /proc), then its stacks, on standard error.
void describe_stuck(pid_t pid) {
  dprintf(report_fd, "api fuzz: child %d is near its alarm; its threads:\n", (int)pid);
  char path[160], line[256];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *tasks = opendir(path);
  for (struct dirent *e; tasks && (e = readdir(tasks));) {
    if (e->d_name[0] == '.') continue;
    dprintf(report_fd, "  thread %s:", e->d_name);
    for (const char *what : {"status", "syscall", "wchan"}) {
      snprintf(path, sizeof path, "/proc/%d/task/%s/%s", (int)pid, e->d_name, what);
      FILE *f = fopen(path, "r");
      while (f && fgets(line, sizeof line, f)) {
        const bool status = !strcmp(what, "status");
        if (status && strncmp(line, "State:", 6) && strncmp(line, "SigBlk:", 7) &&
            strncmp(line, "SigPnd:", 7) && strncmp(line, "ShdPnd:", 7))
          continue;
        dprintf(report_fd, " %s%s%.*s", status ? "" : what, status ? "" : ": ",
                (int)strcspn(line, "\n"), line);
      }
      if (f) fclose(f);
    }
    dprintf(report_fd, "\n");
  }
  if (tasks) closedir(tasks);
  backtraces(pid);
}

struct Thread {
  std::mt19937_64 rng;
  std::vector<void *> live; // blocks this thread owns
  std::vector<void *> held; // nic_hold references it must release
  std::vector<nic_region_ref> refs;
  std::vector<Post *> posts;
  nic_endpoint *ep;
  nic_sga sga{};
  bool sga_ready = false;
  int scope = 0;

  uint64_t pick(uint64_t n) { return n ? rng() % n : 0; }

  size_t size() {
    static const size_t sizes[] = {0,
                                   1,
                                   7,
                                   16,
                                   511,
                                   512,
                                   513,
                                   4096,
                                   65536,
                                   1 << 20,
                                   4 << 20,
                                   (size_t)1 << 32,
                                   SIZE_MAX,
                                   SIZE_MAX / 2,
                                   SIZE_MAX - 4095};
    return pick(3) ? 1 + pick(pick(2) ? 8192 : (64 << 10)) : sizes[pick(std::size(sizes))];
  }

  // Anything a careless or hostile caller could hand in.
  const void *pointer() {
    thread_local char tls[256]; // outside every heap, like a stack buffer
    switch (pick(14)) {
    case 0:
      return nullptr;
    case 1:
      return reinterpret_cast<void *>(1);
    case 2:
      return reinterpret_cast<void *>(UINTPTR_MAX & ~(uintptr_t)15);
    case 3:
      return reinterpret_cast<void *>(0xffff800000000000ull);
    case 4:
      return unmapped + pick(4096);
    case 5:
      return no_access + pick(4096);
    case 6:
      return read_only + pick(4096);
    case 7:
      return static_buffer + pick(sizeof static_buffer);
    case 8:
      return reinterpret_cast<void *>((uintptr_t)16 << 40 | pick(1ull << 36)); // dp range
    case 9:
      return reinterpret_cast<void *>((uintptr_t)1 << 40 | pick(1ull << 34)); // control
    case 10:
      return tls + pick(sizeof tls);
    default:
      if (live.empty()) return static_buffer;
      char *b = static_cast<char *>(live[pick(live.size())]);
      return b + (pick(4) ? 0 : pick(64));
    }
  }

  void *allocate() {
    size_t n = size();
    uint32_t site = (uint32_t)pick(1 << 20);
    switch (pick(9)) {
    case 0:
      return nic_malloc(n);
    case 1:
      return nic_calloc(pick(2) ? n : SIZE_MAX / 2, pick(2) ? 1 : 3);
    case 2:
      return nic_aligned_alloc((size_t)1 << pick(24), n);
    case 3:
      return nic_aligned_alloc(pick(1000), n); // mostly not a power of two
    case 4:
      return nic_malloc_site(n, site);
    case 5:
      return nic_calloc_site(pick(64), n & 0xffff, site);
    case 6: {
      void *p = nullptr;
      return nic_posix_memalign_site(&p, (size_t)8 << pick(16), n, site) ? nullptr : p;
    }
    case 7:
      return nic_aligned_alloc_site((size_t)1 << pick(16), n, site);
    default:
      return malloc(n & 0xfffff);
    }
  }

  void release_one() {
    if (live.empty()) return;
    size_t i = pick(live.size());
    void *p = live[i];
    live[i] = live.back();
    live.pop_back();
    if (pick(4) == 0) {
      // A realloc copies what the block holds: grown to gigabytes, the copies alone would fill
      // the machine. Sizes past what anyone can have still come through, and fail.
      size_t n = size();
      if (n > ((size_t)64 << 20) && n < SIZE_MAX / 4) n = (size_t)64 << 20;
      void *q = pick(2) ? nic_realloc(p, n) : nic_realloc_site(p, n, (uint32_t)pick(99));
      if (q) {
        live.push_back(q);
        return;
      }
      // A failed realloc leaves p alone: it is still ours.
    }
    free(p);
    // Freed twice at once: no other thread can have been handed it, it is our heap's.
    if (pick(16) == 0) free(p);
  }

  void post_some() {
    if (!sga_ready) {
      sga_ready = nic_sga_init(&sga, (unsigned)pick(NIC_SGA_CAPACITY + 8)) == 0;
      if (!sga_ready) return;
    }
    switch (pick(4)) {
    case 0:
    case 1:
      nic_sga_add(&sga, pointer(), size());
      break;
    case 2: {
      auto *post = new Post;
      if (nic_sga_post(&sga, ep, on_done, post) == 0) {
        posted++;
        posts.push_back(post);
      } else {
        delete post;
        nic_sga_reset(&sga);
      }
      break;
    }
    default:
      if (sga.count) nic_sga_add(&sga, live.empty() ? static_buffer : live.back(), 1 + pick(4096));
      break;
    }
  }

  void step() {
    calls++;
    switch (pick(18)) {
    case 0:
    case 1:
    case 2:
      if (live.size() >= 256) {
        release_one(); // bounded: the run is about calls, not about growing
      } else if (void *p = allocate()) {
        live.push_back(p);
      }
      break;
    case 3:
    case 4:
      release_one();
      break;
    case 5:
      nic_is_dataplane(pointer());
      break;
    case 6: {
      nic_region_ref r;
      nic_translate(pointer(), size(), pick(8) ? &r : nullptr);
      break;
    }
    case 7: {
      nic_region_ref r{};
      unsigned access = (unsigned)pick(12);
      if (nic_register(pointer(), size(), access, pick(16) ? &r : nullptr) == 0 && r.region_base)
        refs.push_back(r);
      break;
    }
    case 8:
      if (!refs.empty()) {
        nic_unregister(&refs.back());
        refs.pop_back();
      } else if (pick(4) == 0) {
        nic_region_ref forged{};
        forged.kind = NIC_REGION_CACHED;
        forged.cache_slot = (uint32_t)rng();
        nic_unregister(&forged);
      }
      break;
    case 9:
    case 10:
    case 11:
      post_some();
      break;
    case 12:
      if (pick(4)) {
        nic_poll((int)pick(8) - 2);
      } else if (pick(2)) {
        nic_wait((int)pick(3)); // blocks up to 2 ms, or answers another thread's trim meanwhile
      } else {
        // an event loop's wait: up to 2 ms on the thread's descriptor, then a poll
        pollfd thread_fd{nic_thread_event_fd(), POLLIN, 0};
        if (thread_fd.fd >= 0) poll(&thread_fd, 1, (int)pick(3));
        nic_poll(0);
      }
      break;
    case 13: {
      const void *p = pointer();
      if (nic_hold(p) == 0) held.push_back(const_cast<void *>(p));
      break;
    }
    case 14:
      if (!held.empty() && pick(2)) {
        nic_release(held.back());
        held.pop_back();
      } else if (const void *p = pointer(); nic_release(p) == 0) {
        // Most often without a hold (-NIC_ENOHOLD); a hold of this thread it let go is no
        // longer this thread's to release, nor counted as its own in a fork child.
        if (auto it = std::find(held.begin(), held.end(), p); it != held.end()) held.erase(it);
      }
      break;
    case 15:
      nic_fence_write(pointer(), size());
      break;
    case 16: {
      nic_stats s = NIC_STATS_INIT;
      nic_get_stats(pick(8) ? &s : nullptr);
      if (pick(8) == 0) { // walks every thread's control segments while they change
        const struct mallinfo2 m = mallinfo2();
        mallinfo_reads++;
        if (m.uordblks > m.arena || m.fordblks != m.arena - m.uordblks) mallinfo_inconsistent++;
      }
      if (pick(64) == 0) {
        if (pick(2))
          nic_collect();
        else
          malloc_trim(0); // also gives back free pages inside this thread's control pages
      }
      nic_site_set_enabled((uint32_t)pick(1 << 20), (int)pick(2));
      nic_site_is_enabled((uint32_t)rng());
      if (!in_child && pick(512) == 0) fork_and_check();
      break;
    }
    default:
      if (scope && pick(2)) {
        nic_dataplane_end();
        scope--;
      } else if (scope < 4) {
        nic_dataplane_begin();
        scope++;
      }
      if (live.size() < 256)
        if (void *p = malloc(1 + pick(8192))) live.push_back(p);
      break;
    }
  }

  // The child: the forking thread's state is its own, the other threads' is not (they were in
  // the middle of calls), so it goes on with this thread's calls only. The other threads' holds
  // stay (nic_hold is the program's own reference, README: fork), and so do the frees of blocks
  // they hold; the posts' references are void, so nothing else may stay deferred.
  [[noreturn]] void child() {
    in_child = true;
    alarm(kChildAlarmSeconds);
    nic_stats at_fork = NIC_STATS_INIT;
    if (nic_get_stats(&at_fork) != 0) exit(3);
    const uint64_t others_holds = at_fork.holds - held.size();
    const size_t parents_posts = posts.size(); // void here: they never complete
    nic_endpoint *own = pick(2) ? nic_sim_endpoint_create(on_receive, nullptr, 0) : nullptr;
    if (own) ep = own;
    for (int i = 0; i < 1024; i++)
      step();
    finish();
    const auto mine_done = [&] {
      for (size_t i = parents_posts; i < posts.size(); i++)
        if (posts[i]->done.load() != 1) return false;
      return true;
    };
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         !mine_done() && std::chrono::steady_clock::now() < end;)
      if (!nic_poll(0)) usleep(1000);
    // Under protect a completion hands its frees to the free thread, which makes them a moment
    // later: waited for, as the parent's own end waits.
    nic_stats s = NIC_STATS_INIT;
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         nic_get_stats(&s) == 0 && s.deferred_pending && !others_holds &&
         std::chrono::steady_clock::now() < end;)
      if (!nic_poll(0)) usleep(1000);
    int rc = nic_get_stats(&s) != 0                     ? 3
             : s.inflight_posts != 0                    ? 4
             : s.holds != others_holds                  ? 5
             : s.deferred_pending != 0 && !others_holds ? 6
             : !mine_done()                             ? 7
             : own && nic_sim_endpoint_destroy(own)     ? 8
                                                        : 0;
    exit(rc); // exit, not _exit: the library's exit path runs in the child too
  }

  void fork_and_check() {
    pid_t pid = fork();
    if (pid < 0) return; // out of memory or processes: the parent goes on
    if (pid == 0) child();
    forks++;
    // The child's alarm ends a child that hangs, unless the signal cannot reach it (blocked on
    // the thread that hangs): then the run would hang with it. A child still there shortly
    // before its alarm is described; past the alarm and a grace it is killed. Either way it
    // counts as failed.
    int status = 0;
    pid_t got = 0;
    const auto forked = std::chrono::steady_clock::now();
    bool described = false;
    for (auto end = forked + std::chrono::seconds(kChildAlarmSeconds + 15);
         (got = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < end;) {
      if (!described && std::chrono::steady_clock::now() >
                            forked + std::chrono::seconds(kChildAlarmSeconds - 5)) {
        described = true;
        describe_stuck(pid);
      }
      usleep(1000);
    }
    if (got == 0) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      children_failed++;
      last_child_status = status;
    }
  }

  void finish() {
    while (scope--)
      nic_dataplane_end();
    if (sga_ready) nic_sga_reset(&sga);
    for (void *p : held)
      nic_release(p);
    for (auto &r : refs)
      nic_unregister(&r);
    for (void *p : live)
      free(p);
    live.clear();
  }
};

} // namespace

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 10;
  int nthreads = argc > 2 ? atoi(argv[2]) : 4;
  uint64_t seed = argc > 3 ? strtoull(argv[3], nullptr, 0) : 1;
  const char *backend = getenv("NICMALLOC_BACKEND") ? getenv("NICMALLOC_BACKEND") : "sim";

  // Every refused call may say why once: keep those lines out of the test's output, count them.
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC)) return 2;
  int saved_err = dup(2);
  report_fd = saved_err;
  dup2(err_pipe[1], 2);
  std::atomic<uint64_t> err_bytes{0};
  std::thread err_reader([&] {
    char buf[4096];
    ssize_t n;
    while ((n = read(err_pipe[0], buf, sizeof buf)) > 0)
      err_bytes += (uint64_t)n;
  });

  unmapped = (char *)mmap(nullptr, 3 * 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  munmap(unmapped, 4096);
  no_access = unmapped + 4096;
  mprotect(no_access, 4096, PROT_NONE);
  read_only = unmapped + 2 * 4096;

  nic_endpoint *ep = nullptr;
  int client = -1, server = -1;
  std::thread drain;
  if (!strcmp(backend, "uring")) {
    if (LoopbackPair(&client, &server)) return 2;
    ep = nic_uring_endpoint_create(client);
    drain = std::thread([&] {
      // Not the allocator's: under a low NICMALLOC_DP_MIN_SIZE a vector would be a dataplane
      // block still live when the bytes left are counted.
      static char buf[1 << 20];
      while (!draining_stop) {
        ssize_t n = recv(server, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0)
          received += (uint64_t)n;
        else
          usleep(200);
      }
    });
  } else if (!strcmp(backend, "dpdk")) {
    // A post completes once its packet is freed: on net_ring, by the receiver, so receive.
    ep = nic_dpdk_endpoint_create(NIC_DPDK_DEFAULT_PORT, 0);
    if (ep && nic_endpoint_receive(ep, on_receive, nullptr)) {
      nic_dpdk_endpoint_destroy(ep);
      ep = nullptr;
    }
  } else {
    ep = nic_sim_endpoint_create(on_receive, nullptr, 0);
  }
  if (!ep) {
    dup2(saved_err, 2);
    fprintf(stderr, "api fuzz: no %s endpoint (errno %d)\n", backend, errno);
    return 2;
  }

  nic_stats before = NIC_STATS_INIT;
  nic_get_stats(&before);
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  std::vector<Thread> state(nthreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < nthreads; t++) {
    state[t].rng.seed(seed * 7919 + t);
    state[t].ep = ep;
    threads.emplace_back([&, t] {
      Thread &me = state[t];
      while (Clock::now() < deadline)
        for (int i = 0; i < 64; i++)
          me.step();
      me.finish();
    });
  }
  for (auto &t : threads)
    t.join();

  // Every post completes once: the NIC's side, then deferred frees behind it.
  auto settle = Clock::now() + std::chrono::seconds(60);
  while (completed.load() < posted.load() && Clock::now() < settle)
    if (nic_poll(0) == 0) usleep(1000);
  // What the threads' own bookkeeping took inside their dataplane scopes (vectors, posts) goes
  // before the count: only what nicmalloc keeps may be left.
  for (auto &t : state)
    for (Post *p : t.posts)
      delete p;
  state.clear();
  state.shrink_to_fit();
  // A free deferred behind a completion runs on the thread that completes it: into a page of a
  // thread that has exited, it is counted live until a visit of that abandoned segment collects
  // it (alloc/heap/dp_live.h). So the count is read again until it settles, within the bound.
  nic_stats after = NIC_STATS_INIT;
  do {
    nic_poll(0);
    nic_collect();
    nic_get_stats(&after);
  } while ((after.deferred_pending || after.inflight_posts ||
            after.dataplane_live != before.dataplane_live) &&
           Clock::now() < settle && !usleep(1000));
  draining_stop = true;
  if (drain.joinable()) drain.join();
  int destroy = !strcmp(backend, "uring")  ? nic_uring_endpoint_destroy(ep)
                : !strcmp(backend, "dpdk") ? nic_dpdk_endpoint_destroy(ep)
                                           : nic_sim_endpoint_destroy(ep);

  dup2(saved_err, 2);
  close(err_pipe[1]);
  err_reader.join();

  bool ok = true;
  auto check = [&](bool cond, const std::string &what) {
    if (!cond) fprintf(stderr, "api fuzz: FAILED: %s\n", what.c_str());
    ok = ok && cond;
  };
  printf("api fuzz (%s): %d threads, %.0f s, seed %llu: %llu calls, %llu posts, %llu completed, "
         "%llu received, %llu bytes of warnings, %llu forks\n",
         backend, nthreads, seconds, (unsigned long long)seed, (unsigned long long)calls.load(),
         (unsigned long long)posted.load(), (unsigned long long)completed.load(),
         (unsigned long long)received.load(), (unsigned long long)err_bytes.load(),
         (unsigned long long)forks.load());
  printf("dataplane live bytes before %zu after %zu; deferred pending %llu; holds %llu; in "
         "flight %llu\n",
         before.dataplane_live, after.dataplane_live, (unsigned long long)after.deferred_pending,
         (unsigned long long)after.holds, (unsigned long long)after.inflight_posts);
  check(mallinfo_reads.load() > 0, "mallinfo2 never read");
  check(mallinfo_inconsistent.load() == 0, "mallinfo2 with more in use than its arena");
  check(completed.load() == posted.load(), "posts that never completed");
  check(double_completions.load() == 0, "posts completed twice");
  check(after.inflight_posts == 0, "posts still in flight");
  check(after.deferred_pending == 0, "deferred frees never released");
  check(after.holds == before.holds, "holds left over");
  check(after.dataplane_live == before.dataplane_live, "dataplane blocks leaked");
  const int cs = last_child_status.load();
  check(children_failed.load() == 0,
        std::to_string(children_failed.load()) +
            " children hung, died or kept posts or frees; the last " +
            (WIFEXITED(cs) ? "exited with " + std::to_string(WEXITSTATUS(cs))
                           : "was killed by signal " + std::to_string(WTERMSIG(cs))));
  check(destroy == 0, "the endpoint could not be destroyed: " + std::to_string(destroy));
  if (client >= 0) close(client);
  if (server >= 0) close(server);
  return ok ? 0 : 1;
}
