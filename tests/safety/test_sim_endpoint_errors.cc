// nic_sim_endpoint_destroy of something that is not a sim endpoint (safety/endpoint.c): -EINVAL,
// counted in endpoint_errors and said once on stderr, as the other backends' destroys do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "nicmalloc.h"

namespace {

uint64_t EndpointErrors() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s.endpoint_errors;
}

TEST(SimEndpointErrors, DestroyingWhatNoSimConstructorMadeIsCountedAndSaidOnce) {
  nic_endpoint *ep = nic_sim_endpoint_create(nullptr, nullptr, 0);
  ASSERT_NE(ep, nullptr);
  int not_an_endpoint = 0;
  const uint64_t before = EndpointErrors();
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sim_endpoint_destroy(nullptr), -EINVAL);
  EXPECT_EQ(nic_sim_endpoint_destroy(reinterpret_cast<nic_endpoint *>(&not_an_endpoint)), -EINVAL);
  EXPECT_EQ(nic_sim_endpoint_destroy(ep), 0);
  EXPECT_EQ(nic_sim_endpoint_destroy(ep), -EINVAL) << "destroyed twice";
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(EndpointErrors() - before, 3u);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("not an endpoint made by nic_sim_endpoint_create"), std::string::npos) << err;
}

} // namespace
