// Giving memory back after the shrink: the allocator's own release call, and the best that any
// allocator that does not move objects could do with the surviving items (README.md, steps 4-5).
#pragma once

#include <cstddef>
#include <string>

#include "util.h"

namespace frag {

// Which library serves malloc, and its call that gives free memory back to the OS.
struct Peer {
  std::string lib;
  void (*release)() = nullptr;
};

Peer find_peer();

// The release phase: nic_collect until the pinned bytes settle (--api nic), else the peer's
// release call.
void give_back(bool nic, const Peer &peer);

// For each granularity gran[g], the bytes in aligned gran[g] blocks that still hold one of the
// n live items: what must stay resident when only wholly free blocks can be given back.
void best_case_kept(const Item *items, size_t n, const size_t gran[4], double kept[4]);

} // namespace frag
