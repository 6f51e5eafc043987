// What the sim backend's own suites share: a receiver that keeps every message the engine
// delivers, and a completion that records its calls and status.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

struct Received {
  std::mutex mu;
  std::vector<std::string> msgs;
  size_t count() {
    std::lock_guard<std::mutex> g(mu);
    return msgs.size();
  }
};

inline int receive(void *arg, const void *data, size_t len) {
  auto *r = static_cast<Received *>(arg);
  std::lock_guard<std::mutex> g(r->mu);
  r->msgs.emplace_back(static_cast<const char *>(data), len);
  return 0;
}

struct Done {
  std::atomic<int> calls{0};
  std::atomic<int> status{1};
};

inline void on_done(void *arg, int status) {
  auto *d = static_cast<Done *>(arg);
  d->status = status;
  d->calls++;
}
