// Data integrity over io_uring: several threads post messages of distinct byte patterns to one
// TCP connection over loopback and, right after posting, free, realloc or rewrite the posted
// blocks (under NICMALLOC_FENCE=wait after nic_fence_write, as that mode requires; under protect
// with no call at all). The receiving side reads the stream and checks every byte of every
// message: a message that differs from what was posted is a mismatch, whichever write got
// through. Posts on a stream reach the socket whole and in post order, so the stream parses.
//   nic_uring_integrity <seconds> <threads> <seed>
#include <nicmalloc.h>

#include "loopback_pair.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
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

std::atomic<uint64_t> posted{0}, completed{0}, failed{0}, checked{0}, mismatched{0};

unsigned char PatternByte(uint64_t id, size_t i) {
  uint64_t x = (id + 1) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
  return static_cast<unsigned char>(x >> 56);
}
size_t LengthOf(uint64_t id) {
  return 600 + (id * 2654435761u) % 7000; // over the copy threshold: sent from where it lies
}
void Fill(char *p, uint64_t id) {
  memcpy(p, &id, sizeof id);
  for (size_t i = sizeof id; i < LengthOf(id); i++)
    p[i] = static_cast<char>(PatternByte(id, i));
}

void OnDone(void *, int status) {
  if (status) failed++;
  completed++;
}

// Reads the stream until the sender closes it, checking message after message.
void Receive(int fd) {
  std::vector<unsigned char> buf(1 << 20);
  size_t have = 0;
  for (;;) {
    ssize_t n = read(fd, buf.data() + have, buf.size() - have);
    if (n <= 0) return;
    have += (size_t)n;
    size_t at = 0;
    while (have - at >= sizeof(uint64_t)) {
      uint64_t id;
      memcpy(&id, buf.data() + at, sizeof id);
      const size_t len = LengthOf(id);
      if (have - at < len) break;
      bool ok = true;
      for (size_t i = sizeof id; ok && i < len; i++)
        ok = buf[at + i] == PatternByte(id, i);
      checked++;
      if (!ok) mismatched++;
      at += len;
    }
    memmove(buf.data(), buf.data() + at, have - at);
    have -= at;
  }
}

} // namespace

int main(int argc, char **argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 10;
  const int nthreads = argc > 2 ? atoi(argv[2]) : 4;
  const uint64_t seed = argc > 3 ? strtoull(argv[3], nullptr, 0) : 1;
  const char *fence = getenv("NICMALLOC_FENCE") ? getenv("NICMALLOC_FENCE") : "wait";
  const bool protect = !strcmp(fence, "protect");

  int client, server;
  if (LoopbackPair(&client, &server)) return 2;
  nic_endpoint *ep = nic_uring_endpoint_create(client);
  if (!ep) {
    fprintf(stderr, "uring integrity: no io_uring endpoint (errno %d)\n", errno);
    return 2;
  }
  std::thread receiver(Receive, server);
  // Completions run from nic_poll: a program's event loop, here a thread of its own, since under
  // protect the posting threads are held in their rewrites until completions run.
  std::atomic<bool> stop_polling{false};
  std::thread poller([&] {
    while (!stop_polling)
      if (nic_poll(0) == 0) usleep(100);
  });
  // One post at a time on the connection: ids taken and posted under this lock keep the stream
  // in id order per post, and the posts of all threads interleave whole.
  std::atomic_flag post_lock = ATOMIC_FLAG_INIT;
  std::atomic<uint64_t> next_id{0};
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int t = 0; t < nthreads; t++)
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 7919 + t);
      std::vector<char *> kept;
      while (Clock::now() < deadline) {
        const uint64_t id = next_id++;
        const size_t len = LengthOf(id);
        char *p = static_cast<char *>(rng() % 2 ? nic_malloc(len) : malloc(len));
        if (!p) continue;
        Fill(p, id);
        nic_sga sga;
        while (post_lock.test_and_set(std::memory_order_acquire))
          std::this_thread::yield();
        int rc = nic_sga_init(&sga, 0);
        if (!rc) rc = nic_sga_add(&sga, p, len);
        if (!rc) rc = nic_sga_post(&sga, ep, OnDone, nullptr);
        post_lock.clear(std::memory_order_release);
        if (rc) {
          fprintf(stderr, "uring integrity: post refused: %d\n", rc);
          failed++;
          free(p);
          continue;
        }
        posted++;
        switch (rng() % 4) {
        case 0:
          free(p);
          break; // deferred until the kernel is done
        case 1:
          p = static_cast<char *>(realloc(p, len + rng() % 8192));
          [[fallthrough]];
        case 2: // rewritten at once: held (protect) or fenced first (wait)
          if (p && (protect || nic_fence_write(p, len) == 0)) memset(p, 0x5a, len);
          free(p);
          break;
        default: // kept beside the next posts, freed later
          kept.push_back(p);
          if (kept.size() > 16) {
            free(kept.front());
            kept.erase(kept.begin());
          }
        }
        if (rng() % 8 == 0) nic_poll(0);
      }
      for (char *k : kept)
        free(k);
    });
  for (auto &t : threads)
    t.join();
  const auto settle = Clock::now() + std::chrono::seconds(60);
  while (completed.load() < posted.load() && Clock::now() < settle)
    usleep(1000);
  stop_polling = true;
  poller.join();
  const int destroyed = nic_uring_endpoint_destroy(ep);
  shutdown(client, SHUT_WR);
  receiver.join();
  close(client);
  close(server);

  nic_stats stats;
  nic_get_stats(&stats);
  printf("uring integrity (fence %s): %d threads, %.0f s, seed %llu: messages posted %llu, "
         "completed %llu, failed %llu; checked %llu, mismatched %llu; writes held %llu, let "
         "through %llu (fence_bypasses), to pages in flight %llu (fence_mismatches)\n",
         fence, nthreads, seconds, (unsigned long long)seed, (unsigned long long)posted.load(),
         (unsigned long long)completed.load(), (unsigned long long)failed.load(),
         (unsigned long long)checked.load(), (unsigned long long)mismatched.load(),
         (unsigned long long)stats.fence_held_writes, (unsigned long long)stats.fence_bypasses,
         (unsigned long long)stats.fence_mismatches);
  // Under protect a writer is let through only by the timeout (a stall: nothing released it)
  // or as a thread the NIC needs; with userfaultfd neither may happen (the driver's threads and
  // nicmalloc's are never NIC threads on io_uring). mprotect also lets a posting thread through
  // on pages its own entries alone cover, which is no fault.
  const bool uffd = !getenv("NICMALLOC_FENCE_PROTECT") ||
                    strcmp(getenv("NICMALLOC_FENCE_PROTECT"), "mprotect") != 0;
  const bool stalled = protect && uffd && stats.fence_bypasses != 0;
  if (stalled) fprintf(stderr, "uring integrity: held writers were let through (stall)\n");
  bool ok = posted.load() > 0 && completed.load() == posted.load() && failed.load() == 0 &&
            checked.load() == posted.load() && mismatched.load() == 0 && destroyed == 0 &&
            !stalled && stats.fence_mismatches == 0;
  if (!ok) fprintf(stderr, "uring integrity: FAILED (endpoint destroy %d)\n", destroyed);
  return ok ? 0 : 1;
}
