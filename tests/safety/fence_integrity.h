// The integrity scenario of the fence suites: several threads post messages of distinct byte
// patterns to a sim endpoint whose NIC reads them after slow random delays, and right after
// posting free, realloc or rewrite the posted blocks (and keep some alive beside new posts, so
// that in-flight entries, deferred frees and rewrites share pages). The receiver checks every
// byte of every message; a message that differs from what was posted is a mismatch, whichever
// write got through. The threads come in waves: those of a wave exit before the next starts, so
// that what they allocated (nicmalloc's and the backend's own blocks among it) goes on in the
// pages of the next wave's heaps, beside the program's blocks it posts. Under protect the rewrite
// needs no call; under wait it calls nic_fence_write first, as that mode requires.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "nicmalloc.h"

namespace fence_integrity {

struct Checker {
  std::atomic<uint64_t> checked{0}, mismatched{0};
};

// Message id: thread in the high bits, sequence in the low ones; every byte after the id is a
// function of the id and its offset, and so is the length.
inline unsigned char PatternByte(uint64_t id, size_t i) {
  uint64_t x = (id + 1) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
  return static_cast<unsigned char>(x >> 56);
}
inline size_t LengthOf(uint64_t id) {
  return 600 + (id * 2654435761u) % 2900; // over the copy threshold: sent in place
}
inline void Fill(char *p, uint64_t id) {
  const size_t len = LengthOf(id);
  memcpy(p, &id, sizeof id);
  for (size_t i = sizeof id; i < len; i++)
    p[i] = static_cast<char>(PatternByte(id, i));
}

inline void Receive(void *arg, void *data, size_t len) {
  auto *c = static_cast<Checker *>(arg);
  const unsigned char *b = static_cast<const unsigned char *>(data);
  uint64_t id = 0;
  bool ok = len >= sizeof id;
  if (ok) memcpy(&id, b, sizeof id);
  ok = ok && len == LengthOf(id);
  for (size_t i = sizeof id; ok && i < len; i++)
    ok = b[i] == PatternByte(id, i);
  c->checked++;
  if (!ok) c->mismatched++;
}

struct Options {
  int threads = 4;
  int waves = 2;
  int messages = 1250; // per thread and wave
  bool fence_before_rewrite = false;
  uint64_t total() const { return uint64_t(waves) * threads * messages; }
};

// Posts opt.waves * opt.threads * opt.messages messages to ep (its receive must be Receive with c)
// and waits for every completion. Returns how many completions failed.
inline int Run(nic_endpoint *ep, Checker *c, const Options &opt) {
  std::atomic<int> done{0}, failed{0};
  auto on_done = [](void *arg, int status) {
    auto *counts = static_cast<std::pair<std::atomic<int> *, std::atomic<int> *> *>(arg);
    if (status) (*counts->second)++;
    (*counts->first)++;
  };
  std::pair<std::atomic<int> *, std::atomic<int> *> counts{&done, &failed};
  for (int wave = 0; wave < opt.waves; wave++) {
    std::vector<std::thread> threads;
    for (int t = wave * opt.threads; t < (wave + 1) * opt.threads; t++)
      threads.emplace_back([&, t] {
        uint64_t rnd = 0x1234567ull * (t + 1);
        auto next = [&rnd] {
          rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
          return rnd;
        };
        constexpr int kKept = 8; // blocks kept alive a while beside the next posts
        char *kept[kKept] = {};
        for (int m = 0; m < opt.messages; m++) {
          const uint64_t id = (uint64_t(t) << 32) | uint64_t(m);
          const size_t len = LengthOf(id);
          const bool dataplane = next() & 1;
          char *p = static_cast<char *>(dataplane ? nic_malloc(len) : malloc(len));
          ASSERT_NE(p, nullptr);
          Fill(p, id);
          nic_sga sga;
          ASSERT_EQ(nic_sga_init(&sga, 0), 0);
          ASSERT_EQ(nic_sga_add(&sga, p, len), 0);
          ASSERT_EQ(nic_sga_post(&sga, ep, on_done, &counts), 0);
          switch (next() % 4) {
          case 0: // freed at once: deferred until the DMA
            free(p);
            break;
          case 1: { // grown: moved, the old block's free deferred
            char *q = static_cast<char *>(realloc(p, len * 2));
            ASSERT_NE(q, nullptr);
            free(q);
            break;
          }
          case 2: // rewritten at once, then freed
            if (opt.fence_before_rewrite) {
              ASSERT_EQ(nic_fence_write(p, len), 0);
            }
            memset(p, 0xee, len);
            free(p);
            break;
          default: { // rewritten later, while newer posts share its pages
            char *&slot = kept[next() % kKept];
            if (slot) {
              if (opt.fence_before_rewrite) {
                ASSERT_EQ(nic_fence_write(slot, 64), 0);
              }
              memset(slot, 0xdd, 64);
              free(slot);
            }
            slot = p;
          }
          }
          if (m % 16 == 15) nic_poll(0);
        }
        for (char *&slot : kept)
          free(slot);
      });
    for (auto &th : threads)
      th.join();
  }
  const int target = int(opt.total());
  // A deadline for a broken build (a completion stuck behind a writer), not a measurement.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (done.load() < target && std::chrono::steady_clock::now() < deadline)
    nic_poll(0);
  EXPECT_EQ(done.load(), target) << "completions missing after 60 s";
  printf("messages checked %llu, mismatched %llu\n", (unsigned long long)c->checked.load(),
         (unsigned long long)c->mismatched.load());
  return failed.load();
}

} // namespace fence_integrity
