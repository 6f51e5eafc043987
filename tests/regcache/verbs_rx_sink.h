// What the verbs receive tests hand the backend (they play libnicmalloc's part, safety/receive.c):
// dataplane memory for its buffers (VerbsRxMemory), a receiver (VerbsRxSink), and a completion
// counter (VerbsDone). The receiver (the device suite in
// test_verbs_backend.cc, the software-device suite in test_verbs_soft.cc): it keeps each message,
// counts dataplane and page-aligned buffers, stalls and ends, and gives buffers back at once or,
// with hold set, at Release.
#ifndef NIC_TEST_VERBS_RX_SINK_H
#define NIC_TEST_VERBS_RX_SINK_H

#include <gtest/gtest.h>

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "nicmalloc.h"
extern "C" {
#include "backend.h"
}

// Blocks of dataplane memory with the test's chunk registration (local access only).
struct VerbsRxMemory {
  static inline nic_registration chunk{};
  static inline int blocks = 0;
  static void *Alloc(size_t len, size_t align, uint32_t *lkey, uint64_t *handle) {
    void *p = nic_aligned_alloc(align, len);
    if (p) blocks++;
    *lkey = chunk.lkey;
    *handle = chunk.handle;
    return p;
  }
  static void Free(void *p) {
    blocks--;
    free(p);
  }
};

struct VerbsDone {
  int calls = 0, status = 1;
  static void Fn(void *arg, int status) {
    auto *d = static_cast<VerbsDone *>(arg);
    d->calls++;
    d->status = status;
  }
};

struct VerbsRxSink {
  nic_backend *b = nullptr;
  nic_endpoint *ep = nullptr;
  bool hold = false;
  std::vector<std::string> msgs;
  std::vector<uint64_t> held;
  int dataplane = 0, aligned = 0, stalls = 0, ends = 0, status = 0;
  static void Fn(void *arg, void *data, size_t len, int status, uint64_t token) {
    auto *r = static_cast<VerbsRxSink *>(arg);
    if (!data) {
      EXPECT_EQ(len, 0u);
      if (status == -ENOBUFS) {
        r->stalls++;
      } else {
        r->ends++;
        r->status = status;
      }
      return;
    }
    r->msgs.emplace_back(static_cast<char *>(data), len);
    r->dataplane += nic_is_dataplane(data);
    r->aligned += reinterpret_cast<uintptr_t>(data) % 4096 == 0;
    if (r->hold)
      r->held.push_back(token);
    else
      r->b->rx_recycle(r->b, r->ep, token);
  }
  void Release() {
    std::vector<uint64_t> t;
    t.swap(held);
    for (uint64_t k : t)
      b->rx_recycle(b, ep, k);
  }
};

// The application's own receive on qp, in memory of its own registered with b: what the backend
// must drop, never follow, when its completion names no buffer of nicmalloc's. The registration
// goes to *oreg (the test deregisters it).
inline void PostApplicationReceive(nic_backend *b, ibv_qp *qp, void *own, uint32_t len,
                                   nic_registration *oreg) {
  ASSERT_EQ(b->reg(b, own, len, NIC_ACCESS_LOCAL_WRITE, oreg), 0);
  ibv_sge sge = {reinterpret_cast<uintptr_t>(own), len, oreg->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = 0xdeadbeef;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ASSERT_EQ(ibv_post_recv(qp, &wr, &bad), 0);
}

#endif
