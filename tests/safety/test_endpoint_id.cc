// nic_endpoint_id (safety/endpoint_common.c): a number per endpoint that no endpoint made later
// gets, even at a destroyed one's address (the sim hands a destroyed endpoint's node out again),
// the same however often and from whichever thread it is asked, and in a child of fork; 0 for
// NULL and for what no constructor of nicmalloc.h made or was destroyed since. Each thread keeps
// its last answer while no endpoint is made or destroyed: a destroy must not leave it stale.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "nicmalloc.h"

namespace {

nic_endpoint *Make() {
  nic_endpoint *ep = nic_sim_endpoint_create(nullptr, nullptr, 0);
  EXPECT_NE(ep, nullptr) << strerror(errno);
  return ep;
}

// Made until one lands at `at`: at once on the sim, whose pool gives the node destroyed last
// out first. The others made meanwhile are destroyed.
nic_endpoint *MakeAt(nic_endpoint *at) {
  std::vector<nic_endpoint *> elsewhere;
  nic_endpoint *ep = nullptr;
  while (elsewhere.size() < 64 && (ep = Make()) && ep != at)
    elsewhere.push_back(ep);
  for (nic_endpoint *e : elsewhere)
    EXPECT_EQ(nic_sim_endpoint_destroy(e), 0);
  return ep == at ? ep : nullptr;
}

TEST(EndpointId, EachEndpointHasItsOwnAndKeepsItWhileItLives) {
  nic_endpoint *ep[3] = {Make(), Make(), Make()};
  uint64_t id[3];
  for (int i = 0; i < 3; i++) {
    id[i] = nic_endpoint_id(ep[i]);
    EXPECT_NE(id[i], 0u) << i;
  }
  EXPECT_EQ(std::set<uint64_t>(id, id + 3).size(), 3u) << "two endpoints share a number";
  nic_endpoint *other = Make(); // the list changes: the thread's last answer is asked again
  EXPECT_EQ(nic_sim_endpoint_destroy(other), 0);
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(nic_endpoint_id(ep[i]), id[i]) << i;
    EXPECT_EQ(nic_endpoint_id(ep[i]), id[i]) << i << ", asked again";
  }
  uint64_t from_thread[3] = {};
  std::thread([&] {
    for (int i = 0; i < 3; i++)
      from_thread[i] = nic_endpoint_id(ep[i]);
  }).join();
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(from_thread[i], id[i]) << i;
    EXPECT_EQ(nic_sim_endpoint_destroy(ep[i]), 0);
  }
}

TEST(EndpointId, ZeroForNullAndForWhatNoConstructorMade) {
  EXPECT_EQ(nic_endpoint_id(nullptr), 0u);
  int not_an_endpoint = 0;
  EXPECT_EQ(nic_endpoint_id(reinterpret_cast<nic_endpoint *>(&not_an_endpoint)), 0u);
}

// Destroyed, an endpoint's number is 0, also to a thread whose last answer it was; and the
// endpoint made next at its address gets a number never given before.
TEST(EndpointId, NeverGivenAgainAfterADestroyEvenAtTheSameAddress) {
  std::set<uint64_t> given;
  nic_endpoint *ep = Make();
  ASSERT_NE(ep, nullptr);
  for (int round = 0; round < 4; round++) {
    const uint64_t id = nic_endpoint_id(ep); // this thread's last answer now
    EXPECT_NE(id, 0u);
    EXPECT_TRUE(given.insert(id).second) << "number " << id << " given twice, round " << round;
    uint64_t other_thread = 0;
    std::thread([&] { other_thread = nic_endpoint_id(ep); }).join();
    EXPECT_EQ(other_thread, id);
    ASSERT_EQ(nic_sim_endpoint_destroy(ep), 0);
    EXPECT_EQ(nic_endpoint_id(ep), 0u) << "a destroyed endpoint keeps its number";
    ASSERT_EQ(MakeAt(ep), ep) << "no endpoint was made at the destroyed one's address";
  }
  const uint64_t last = nic_endpoint_id(ep);
  EXPECT_EQ(given.count(last), 0u) << "number " << last << " given again";
  EXPECT_EQ(nic_sim_endpoint_destroy(ep), 0);
}

TEST(EndpointId, AChildOfForkSeesTheNumbersOfTheEndpointsItInherited) {
  nic_endpoint *a = Make(), *b = Make();
  ASSERT_TRUE(a && b);
  const uint64_t ida = nic_endpoint_id(a), idb = nic_endpoint_id(b);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << strerror(errno);
  if (pid == 0) _exit(nic_endpoint_id(b) == idb && nic_endpoint_id(a) == ida ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(nic_sim_endpoint_destroy(a), 0);
  EXPECT_EQ(nic_sim_endpoint_destroy(b), 0);
}

} // namespace
