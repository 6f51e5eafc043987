// A received buffer held in the receive function and released on another thread right after the
// function returns, before nicmalloc has listed the buffer as held (safety/receive.c,
// hand_over): the release must still give the buffer back to the NIC. The window is a few
// instructions wide; to meet it every time, this program defines pthread_mutex_lock, and the
// first lock the receiving thread takes after its receive function armed it waits until the
// other thread's nic_release has returned. Run with one receive buffer
// (tests/uring.cmake), so that a buffer left listed as held by nobody stops the endpoint.
#include "uring_loopback.h"

#include <pthread.h>
#include <semaphore.h>

// The C library's own, by the alias it exports beside the name this program takes over (glibc
// 2.34 and later; bound at load, so no lookup that could allocate runs in the lock).
extern "C" int libc_mutex_lock(pthread_mutex_t *m);
__asm__(".symver libc_mutex_lock, __pthread_mutex_lock@GLIBC_2.2.5");

namespace {
thread_local bool armed;
sem_t go, gone;
} // namespace

extern "C" int pthread_mutex_lock(pthread_mutex_t *m) {
  if (armed) {
    armed = false;
    sem_post(&go);
    while (sem_wait(&gone) != 0 && errno == EINTR) {
    }
  }
  return libc_mutex_lock(m);
}

namespace {

using namespace uring_test;

struct Receiver {
  std::atomic<int> messages{0};
  void *to_release = nullptr;
  static void Fn(void *arg, void *data, size_t len) {
    (void)len;
    auto *r = static_cast<Receiver *>(arg);
    if (!data) return;
    if (r->messages.fetch_add(1) == 0 && nic_hold(data) == 0) {
      r->to_release = data; // handed to a worker, which releases it at once
      armed = true;
    }
  }
};

TEST(ReceiveReleaseRace, AReleaseRightAfterTheReceiveFunctionGivesTheBufferBack) {
  ASSERT_EQ(sem_init(&go, 0, 0), 0);
  ASSERT_EQ(sem_init(&gone, 0, 0), 0);
  UdpPair pair;
  nic_endpoint *ep = nic_uring_endpoint_create(pair.rx);
  if (!ep) GTEST_SKIP() << "SKIPPED: no io_uring endpoint here: " << strerror(errno);
  Receiver r;
  int released = 1;
  std::thread worker([&] {
    while (sem_wait(&go) != 0 && errno == EINTR) {
    }
    released = nic_release(r.to_release);
    sem_post(&gone);
  });
  ASSERT_EQ(nic_endpoint_receive(ep, Receiver::Fn, &r), 0);
  ASSERT_EQ(send(pair.tx, "first", 5, 0), 5);
  ASSERT_TRUE(NicPollUntil([&] { return r.messages.load() == 1; }));
  worker.join();
  EXPECT_EQ(released, 0);
  EXPECT_EQ(NicStats().recv_held_buffers, 0u) << "listed as held, with no hold on it";
  ASSERT_EQ(send(pair.tx, "second", 6, 0), 6);
  EXPECT_TRUE(NicPollUntil([&] { return r.messages.load() == 2; }))
      << "the endpoint's only buffer never came back to it";
  int rc = -EBUSY;
  NicPollUntil([&] { return (rc = nic_uring_endpoint_destroy(ep)) != -EBUSY; });
  EXPECT_EQ(rc, 0);
}

} // namespace
