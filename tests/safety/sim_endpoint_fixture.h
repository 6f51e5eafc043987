// A fixture for the suites that link the runtime's objects: a sim endpoint delivering to an
// Inbox, opened per test and closed once its posts are done.
#pragma once

#include <gtest/gtest.h>

#include <atomic>

#include "sim_inbox.h"
extern "C" {
#include "backend.h"
#include "sim_nic.h"
}

class SimEndpointTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_NE(nic_backend_active(), nullptr);
    ep = nic_sim_endpoint_create(Receive, &inbox, 0);
    ASSERT_NE(ep, nullptr);
  }
  void TearDown() override {
    nic_sim_pause(nic_backend_active(), false);
    while (nic_sim_endpoint_destroy(ep) == -EBUSY)
      nic_poll(0);
  }
  // Posts [p, p+len) as one message; its completion counts in done_count (and failures).
  void Post(const void *p, size_t len) {
    nic_sga sga;
    ASSERT_EQ(nic_sga_init(&sga, 0), 0);
    ASSERT_EQ(nic_sga_add(&sga, p, len), 0);
    ASSERT_EQ(nic_sga_post(&sga, ep, CountDone, this), 0);
  }
  // The same with the NIC paused: nothing is read until Drain.
  void PostPaused(const void *p, size_t len) {
    nic_sim_pause(nic_backend_active(), true);
    Post(p, len);
  }
  // Lets the NIC run and polls until done_count reaches target.
  void Drain(int target) {
    nic_sim_pause(nic_backend_active(), false);
    while (done_count.load() < target)
      nic_poll(0);
  }
  static void CountDone(void *arg, int status) {
    auto *self = static_cast<SimEndpointTest *>(arg);
    if (status) self->done_failed++;
    self->done_count++;
  }
  nic_endpoint *ep = nullptr;
  Inbox inbox;
  std::atomic<int> done_count{0}, done_failed{0};
};
