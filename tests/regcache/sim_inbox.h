// What the safety suites share: a sim receiver that keeps every message it gets (optionally
// holding the received buffers, as a deserializer would), and a stats snapshot.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "nicmalloc.h"

struct Inbox {
  std::mutex mu;
  std::vector<std::string> msgs;
  std::vector<char *> held; // buffers the receiver nic_hold()s
  bool hold = false;
};

inline void Receive(void *arg, void *data, size_t len) {
  auto *in = static_cast<Inbox *>(arg);
  std::lock_guard<std::mutex> g(in->mu);
  in->msgs.emplace_back(static_cast<char *>(data), len);
  if (in->hold && nic_hold(data) == 0) in->held.push_back(static_cast<char *>(data));
}

inline nic_stats Stats() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}
