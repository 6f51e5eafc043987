// A fixture for the suites that link the runtime's objects: a sim endpoint delivering to an
// Inbox, opened per test and closed once its posts are done.
#pragma once

#include <gtest/gtest.h>

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
  nic_endpoint *ep = nullptr;
  Inbox inbox;
};
