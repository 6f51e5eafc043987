// A backend whose first start meets a shortage that passes (no descriptor left, an address-space
// limit) starts once it has passed, and a backend NICMALLOC_BACKEND names is not replaced by
// another meanwhile: NICMALLOC_BACKEND=uring (tests/uring.cmake), one case per process, as the
// first start is the process's. Waits have deadlines, never a duration asserted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nicmalloc.h"

namespace {

int Count(const std::string &s, const std::string &what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
    n++;
  return n;
}

std::vector<int> FillDescriptors() {
  std::vector<int> fds;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;)
    fds.push_back(fd);
  return fds;
}

void Close(const std::vector<int> &fds) {
  for (int fd : fds)
    close(fd);
}

int InitOnce() {
  nic_sga s;
  const int rc = nic_sga_init(&s, 0);
  if (rc == 0) nic_sga_reset(&s);
  return rc;
}

// InitOnce again until it works, with a deadline: its last answer (rc, the first one's).
int InitUntilStarted(int rc) {
  for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       rc != 0 && std::chrono::steady_clock::now() < end;)
    if ((rc = InitOnce()) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return rc;
}

// The backend's first start, with fill() making the shortage and empty() ending it.
template <typename Fill, typename Empty>
void StartsOnceThePassingShortageHasPassed(Fill fill, Empty empty) {
  char *p = static_cast<char *>(nic_malloc(5000));
  ASSERT_NE(p, nullptr);
  memset(p, 1, 5000);
  fill();
  const int during = InitOnce();
  empty();
  EXPECT_EQ(during, -ENODEV) << "a start under the shortage";
  nic_stats st = NIC_STATS_INIT;
  nic_get_stats(&st);
  EXPECT_EQ(std::string(st.backend), "none") << "another backend than the one named";
  EXPECT_GE(st.backend_start_refusals, 1u);
  const int rc = InitUntilStarted(during);
  ASSERT_EQ(rc, 0) << "the backend never started once the shortage had passed";
  nic_get_stats(&st);
  EXPECT_EQ(std::string(st.backend), "uring");
  nic_sga s;
  ASSERT_EQ(nic_sga_init(&s, 0), 0);
  EXPECT_EQ(nic_sga_add(&s, p, 5000), 0);
  nic_sga_reset(&s);
  nic_free(p);
}

TEST(BackendShortage, NoDescriptorLeft) {
  std::vector<int> fds;
  StartsOnceThePassingShortageHasPassed([&] { fds = FillDescriptors(); }, [&] { Close(fds); });
}

// While the named backend waits for its retry, the calls that need it say that it cannot start
// for now and is tried again (with the errno), once each, not that none could be opened or that
// it cannot run here.
TEST(BackendShortage, RefusalForNowIsSaidAsOne) {
  const int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(sock, 0);
  testing::internal::CaptureStderr(); // its file first: it takes a descriptor
  const std::vector<int> fds = FillDescriptors();
  const int init[2] = {InitOnce(), InitOnce()};
  nic_endpoint *ep[2] = {nic_uring_endpoint_create(sock), nic_uring_endpoint_create(sock)};
  Close(fds);
  const std::string err = testing::internal::GetCapturedStderr();
  close(sock);
  EXPECT_EQ(init[0], -ENODEV);
  EXPECT_EQ(init[1], -ENODEV);
  EXPECT_EQ(ep[0], nullptr);
  EXPECT_EQ(ep[1], nullptr);
  EXPECT_EQ(err.find("could be opened"), std::string::npos) << err;
  EXPECT_EQ(err.find("cannot run here"), std::string::npos) << err;
  const std::string now = "backend uring cannot start for now (Too many open files), a shortage "
                          "that may pass: it is tried again";
  EXPECT_EQ(Count(err, "nic_sga_init: " + now), 1) << err;
  EXPECT_EQ(Count(err, "nic_uring_endpoint_create: " + now), 1) << err;
  EXPECT_EQ(Count(err, now), 3) << "the start's own warning, and one line per call: " << err;
  EXPECT_EQ(Count(err, "\n"), 3) << err;
}

// Under auto, io_uring refused for now and the sim started in its place: a default runs, and
// nothing says that none can start.
TEST(BackendShortage, AutoSaysNothingOfNoneWhenTheNextKindStarts) {
  testing::internal::CaptureStderr(); // its file first: it takes a descriptor
  const std::vector<int> fds = FillDescriptors();
  const int init = InitOnce();
  Close(fds);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(init, 0);
  nic_stats st = NIC_STATS_INIT;
  nic_get_stats(&st);
  EXPECT_EQ(std::string(st.backend), "sim");
  EXPECT_EQ(err.find("no registration backend"), std::string::npos) << err;
  EXPECT_EQ(Count(err, "backend uring cannot start for now (Too many open files)"), 1) << err;
}

// io_uring runs and has its event descriptor; with no descriptor left, nic_event_fd's set (and
// nic_thread_event_fd's) cannot be made: said as that, once per call, not as a backend without
// one, and made by a call once descriptors are free again.
TEST(BackendShortage, EventSetWithNoDescriptorLeft) {
  ASSERT_EQ(InitOnce(), 0);
  testing::internal::CaptureStderr(); // its file first: it takes a descriptor
  const std::vector<int> fds = FillDescriptors();
  const int event_fd[2] = {nic_event_fd(), nic_event_fd()};
  const int thread_fd[2] = {nic_thread_event_fd(), nic_thread_event_fd()};
  Close(fds);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(event_fd[0], -EMFILE);
  EXPECT_EQ(event_fd[1], -EMFILE);
  EXPECT_EQ(thread_fd[0], -EMFILE);
  EXPECT_EQ(thread_fd[1], -EMFILE);
  EXPECT_EQ(err.find("no event descriptor"), std::string::npos) << err;
  EXPECT_EQ(Count(err, "nic_event_fd: nic_event_fd's epoll set, or a backend's eventfd for it, "
                       "could not be made (Too many open files)"),
            1)
      << err;
  EXPECT_EQ(Count(err, "nic_thread_event_fd: nic_event_fd's epoll set, or a backend's eventfd "
                       "for it, could not be made (Too many open files)"),
            1)
      << err;
  EXPECT_EQ(Count(err, "\n"), 2) << err;
  EXPECT_GE(nic_event_fd(), 0) << "the shortage was remembered";
  EXPECT_GE(nic_thread_event_fd(), 0) << "the shortage was remembered";
}

// Under auto with no descriptor left, io_uring is refused for now and the sim starts without
// its eventfd: it gets one once descriptors are free (it used to have none for good, and
// nic_event_fd said -ENOSYS, "no event descriptor", to the end), and a completion wakes the set.
TEST(BackendShortage, SimStartedWithNoDescriptorLeftGetsItsEventFdLater) {
  char *p = static_cast<char *>(nic_malloc(5000));
  ASSERT_NE(p, nullptr);
  memset(p, 1, 5000);
  const std::vector<int> fds = FillDescriptors();
  const int during = InitOnce();
  Close(fds);
  ASSERT_EQ(during, 0);
  nic_stats st = NIC_STATS_INIT;
  nic_get_stats(&st);
  ASSERT_EQ(std::string(st.backend), "sim") << "the test needs the sim started under the shortage";
  const int efd = nic_event_fd();
  ASSERT_GE(efd, 0) << "the sim never made its event descriptor";
  nic_endpoint *ep = nic_sim_endpoint_create(nullptr, nullptr, 0);
  ASSERT_NE(ep, nullptr);
  int calls = 0;
  nic_sga s;
  ASSERT_EQ(nic_sga_init(&s, 0), 0);
  ASSERT_EQ(nic_sga_add(&s, p, 5000), 0);
  ASSERT_EQ(nic_sga_post(
                &s, ep, [](void *arg, int) { ++*static_cast<int *>(arg); }, &calls),
            0);
  for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       !calls && std::chrono::steady_clock::now() < end;) {
    pollfd pfd = {efd, POLLIN, 0};
    if (poll(&pfd, 1, 1000) > 0) nic_poll(0);
  }
  EXPECT_EQ(calls, 1) << "the set never polled readable for the completion";
  nic_sim_endpoint_destroy(ep);
  nic_free(p);
}

// A completion the sim queued while it had no event descriptor: the descriptor made later polls
// readable for it. The engine had set "signalled" while signalling nothing (fd -1), and the new
// descriptor was signalled only when that was clear, so a program asleep on it before its first
// nic_poll waited for good. NICMALLOC_BACKEND=auto.
TEST(BackendShortage, SimCompletionQueuedWithoutADescriptorWakesTheOneMadeLater) {
  char *p = static_cast<char *>(nic_malloc(5000));
  ASSERT_NE(p, nullptr);
  memset(p, 1, 5000);
  const std::vector<int> fds = FillDescriptors();
  int calls = 0;
  nic_sga s;
  const int init = nic_sga_init(&s, 0);
  nic_endpoint *ep = init ? nullptr : nic_sim_endpoint_create(nullptr, nullptr, 0);
  int posted = -1;
  if (ep && nic_sga_add(&s, p, 5000) == 0)
    posted = nic_sga_post(
        &s, ep, [](void *arg, int) { ++*static_cast<int *>(arg); }, &calls);
  // The engine completes the post meanwhile; nothing polls it.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Close(fds);
  ASSERT_EQ(init, 0);
  ASSERT_NE(ep, nullptr);
  ASSERT_EQ(posted, 0);
  nic_stats st = NIC_STATS_INIT;
  nic_get_stats(&st);
  ASSERT_EQ(std::string(st.backend), "sim") << "the test needs the sim started under the shortage";
  const int efd = nic_event_fd();
  ASSERT_GE(efd, 0);
  pollfd pfd = {efd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 5000), 1) << "the completion queued before the descriptor never woke it";
  EXPECT_EQ(calls, 0) << "nothing polled yet";
  for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       !calls && std::chrono::steady_clock::now() < end;)
    nic_poll(0);
  EXPECT_EQ(calls, 1);
  nic_sim_endpoint_destroy(ep);
  nic_free(p);
}

// Limits the address space to what the process maps now and extra bytes more.
void LimitAddressSpace(const rlimit &old, long extra) {
  long kb = 0;
  char line[256];
  FILE *f = fopen("/proc/self/status", "r");
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmSize:", 7)) kb = atol(line + 7);
  if (f) fclose(f);
  rlimit r{static_cast<rlim_t>(kb) * 1024 + static_cast<rlim_t>(extra), old.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_AS, &r), 0);
}

TEST(BackendShortage, AddressSpaceLimit) {
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &old), 0);
  StartsOnceThePassingShortageHasPassed([&] { LimitAddressSpace(old, 0); },
                                        [&] { ASSERT_EQ(setrlimit(RLIMIT_AS, &old), 0); });
}

// The first start under an address-space limit extra bytes above what is mapped, then starts
// again once it is lifted until one works; with what the calls answered and said on stderr.
struct LimitedStart {
  int during, rc;
  std::string err;
};
LimitedStart StartUnderAddressSpaceLimit(long extra) {
  LimitedStart r{};
  rlimit old{};
  EXPECT_EQ(getrlimit(RLIMIT_AS, &old), 0);
  testing::internal::CaptureStderr();
  LimitAddressSpace(old, extra);
  r.during = InitOnce();
  EXPECT_EQ(setrlimit(RLIMIT_AS, &old), 0);
  r.rc = InitUntilStarted(r.during);
  r.err = testing::internal::GetCapturedStderr();
  return r;
}

// DPDK's EAL cannot start twice: once nicmalloc's rte_eal_init has failed (here for want of
// address space), it stays half up, and a start tried again took it for the application's EAL,
// failed on in the mempool, and was taken for a shortage again, for good: the named backend
// never started and never gave way, and EAL said "Cannot allocate tailq entry" at each try.
// Now that failure is final, said once, and the named backend gives way as any that cannot run.
// NICMALLOC_BACKEND=dpdk here (tests/uring.cmake).
TEST(BackendShortage, DpdkWhoseEalFailedGivesWay) {
  if (access(NIC_DPDK_PLUGIN_PATH, R_OK)) GTEST_SKIP() << "the dpdk plugin is not built here";
  const LimitedStart r = StartUnderAddressSpaceLimit(64l << 20);
  const int during = r.during, rc = r.rc;
  const std::string &err = r.err;
  EXPECT_NE(during, 0) << "EAL started under the limit: nothing tested";
  ASSERT_EQ(rc, 0) << "no backend started once the limit was lifted: " << err;
  nic_stats st = NIC_STATS_INIT;
  nic_get_stats(&st);
  EXPECT_NE(std::string(st.backend), "dpdk");
  EXPECT_EQ(err.find("tailq"), std::string::npos) << "EAL was started on again: " << err;
  size_t said = 0;
  for (size_t at = 0; (at = err.find("dpdk: cannot start", at)) != std::string::npos; at++)
    said++;
  EXPECT_EQ(said, 1u) << err;
}

// DPDK cannot run, and the kinds auto would take instead are short of address space and tried
// again later: no default meanwhile, and every call that needed one chose again and said again
// that DPDK cannot run here (22 times in a second), until io_uring's retry started it.
TEST(BackendShortage, DpdkThatCannotRunIsSaidOnceWhileTheOthersAreShort) {
  if (access(NIC_DPDK_PLUGIN_PATH, R_OK)) GTEST_SKIP() << "the dpdk plugin is not built here";
  const LimitedStart r = StartUnderAddressSpaceLimit(16l << 20);
  const int during = r.during, rc = r.rc;
  const std::string &err = r.err;
  if (during == 0) GTEST_SKIP() << "a backend started under the limit: nothing tested\n" << err;
  ASSERT_EQ(rc, 0) << "no backend started once the limit was lifted: " << err;
  EXPECT_EQ(Count(err, "backend dpdk cannot run here"), 1) << err;
}

} // namespace
