// The io_uring backend: fixed-buffer registration, and posting over loopback TCP (SEND_ZC from a
// fixed buffer, SENDMSG_ZC for several entries, protection errors, dereg while in flight).
#include "uring_loopback.h"

extern "C" {
#include "rcache.h"
}

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

using namespace uring_test;

TEST_F(UringTest, ReportsItsCaps) {
  EXPECT_STREQ(b->name, "uring");
  EXPECT_EQ(b->caps.max_sge, 64u);
  EXPECT_EQ(b->caps.max_region_bytes, size_t{1} << 30);
  EXPECT_EQ(b->caps.max_regions, 16384u) << "the kernel's fixed-buffer limit";
  EXPECT_TRUE(b->caps.zero_copy);
  EXPECT_EQ(Stats().slots, b->caps.max_regions);
}

// Must run from poll() after the notification: by then the slot is no longer in flight.
struct DeregOnDone {
  struct nic_backend *b;
  nic_registration reg;
  std::atomic<int> calls{0}, status{INT_MIN}, dereg{INT_MIN};
  std::atomic<uint64_t> notifications{0};
  static void Fn(void *arg, int st) {
    auto *d = static_cast<DeregOnDone *>(arg);
    nic_uring_stats s{};
    nic_uring_get_stats(d->b, &s);
    d->notifications = s.notifications;
    d->status = st;
    d->dereg = d->b->dereg(d->b, &d->reg);
    d->calls++;
  }
};

TEST_F(UringTest, OneEntryGoesAsFixedBufferSendZc) {
  Region mem(4 << 20);
  ASSERT_NE(mem.base, nullptr);
  ASSERT_EQ(mlock(mem.base, mem.len), 0);
  LoopbackPair pair;
  // Paused for a while: on loopback the notification usually waits for the receiver's read,
  // so a completion that ran at the send's own CQE would show here.
  Reader reader(pair.rx, /*paused=*/true);
  nic_endpoint *ep = Endpoint(pair.tx);
  DeregOnDone d{b, Reg(mem.base, mem.len)};
  const size_t off = 4096 + 7, len = (1 << 20) + 13;
  nic_sge sge = Sge(d.reg, off, len);
  ASSERT_EQ(b->post(b, ep, &sge, 1, DeregOnDone::Fn, &d), 0);
  EXPECT_EQ(d.calls, 0) << "done() must never run inside post()";
  PollUntil(
      b, [&] { return d.calls > 0; }, std::chrono::milliseconds(50));
  reader.Resume();
  ASSERT_TRUE(PollUntil(b, [&] { return d.calls > 0; })) << "no completion";
  EXPECT_EQ(d.status, 0);
  EXPECT_GE(d.notifications, 1u) << "done() ran before the kernel's notification";
  EXPECT_EQ(d.dereg, 0) << "completion ran while the buffer was still in flight";
  ASSERT_TRUE(reader.WaitFor(len));
  EXPECT_TRUE(reader.Data() == mem.Bytes(off, len)) << "receiver got other bytes";
  for (int i = 0; i < 20; i++)
    b->poll(b, 64);
  EXPECT_EQ(d.calls, 1) << "done() must run exactly once";
  nic_uring_stats s = Stats();
  EXPECT_EQ(s.send_zc_fixed, 1u);
  EXPECT_EQ(s.notifications, 1u);
  // To a local receiver the kernel copies after all (design notes), and says so.
  if (s.reports_copies) {
    EXPECT_EQ(s.copied, 1u) << "loopback sent without a copy?";
  }
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.slots_used, 0u);
}

TEST_F(UringTest, SeveralEntriesInOneSlotArriveConcatenatedInOrder) {
  Region mem(4 << 20, 2);
  LoopbackPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  const std::pair<size_t, uint32_t> parts[] = {
      {3 << 20, 70000}, {0, 1}, {(1 << 20) + 1, 4095}, {17, 300000}, {2 << 20, 1 << 20}};
  std::vector<nic_sge> sge;
  std::string want;
  for (auto [off, len] : parts) {
    sge.push_back(Sge(r, off, len));
    want += mem.Bytes(off, len);
  }
  Done d;
  ASSERT_EQ(b->post(b, ep, sge.data(), sge.size(), Done::Fn, &d), 0);
  ASSERT_TRUE(PollUntil(b, [&] { return d.calls > 0; }));
  EXPECT_EQ(d.status, 0);
  ASSERT_TRUE(reader.WaitFor(want.size()));
  EXPECT_TRUE(reader.Data() == want);
  nic_uring_stats s = Stats();
  // Whether SENDMSG_ZC takes a fixed buffer is probed at open (6.15+ kernels do).
  EXPECT_EQ(s.sendmsg_zc_fixed, s.vectored_fixed ? 1u : 0u);
  EXPECT_EQ(s.sendmsg_zc_plain, s.vectored_fixed ? 0u : 1u);
  EXPECT_EQ(b->dereg(b, &r), 0);
}

TEST_F(UringTest, EntriesAcrossSlotsGoAsPlainSendmsgZc) {
  Region m1(1 << 20, 3), m2(1 << 20, 4);
  LoopbackPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r1 = Reg(m1.base, m1.len), r2 = Reg(m2.base, m2.len);
  nic_sge sge[] = {Sge(r2, 5, 1000), Sge(r1, 0, 65536), Sge(r2, 700000, 300000)};
  std::string want = m2.Bytes(5, 1000) + m1.Bytes(0, 65536) + m2.Bytes(700000, 300000);
  Done d;
  ASSERT_EQ(b->post(b, ep, sge, 3, Done::Fn, &d), 0);
  ASSERT_TRUE(PollUntil(b, [&] { return d.calls > 0; }));
  EXPECT_EQ(d.status, 0);
  ASSERT_TRUE(reader.WaitFor(want.size()));
  EXPECT_TRUE(reader.Data() == want);
  EXPECT_EQ(Stats().sendmsg_zc_plain, 1u);
}

TEST_F(UringTest, EntryOutsideItsRegistrationCompletesWithEfaultAndSendsNothing) {
  Region mem(4 << 20, 5);
  LoopbackPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base + (1 << 20), 1 << 20); // the second MiB only
  nic_registration gone = Reg(mem.base, 4096);
  ASSERT_EQ(b->dereg(b, &gone), 0);
  nic_sge wrong_key = Sge(r, 0, 100);
  wrong_key.lkey += 1;
  nic_sge unknown = Sge(r, 0, 100);
  unknown.handle = 9999, unknown.lkey = 10000;
  const std::vector<std::vector<nic_sge>> bad = {
      {Sge(r, (1 << 20) - 10, 100)},                                // runs past the end
      {nic_sge{mem.base + (1 << 20) - 1, 10, r.lkey, r.handle}},    // starts before the base
      {Sge(r, 1 << 20, 1)},                                         // starts at the end
      {wrong_key},                                                  // lkey of another slot
      {unknown},                                                    // slot never registered
      {Sge(gone, 0, 100)},                                          // deregistered
      {Sge(r, 0, 4096), Sge(r, 4096, 4096), Sge(r, 1 << 20, 4096)}, // last entry outside
  };
  std::vector<Done> done(bad.size());
  for (size_t i = 0; i < bad.size(); i++) {
    ASSERT_EQ(b->post(b, ep, bad[i].data(), bad[i].size(), Done::Fn, &done[i]), 0) << i;
    EXPECT_EQ(done[i].calls, 0) << "done() ran inside post() for case " << i;
  }
  // Nothing went to the kernel: all are ready at once, and poll() honours max (0 = all).
  EXPECT_EQ(b->poll(b, 2), 2);
  EXPECT_EQ(b->poll(b, 0), int(bad.size()) - 2);
  for (size_t i = 0; i < bad.size(); i++)
    EXPECT_EQ(done[i].status, -EFAULT) << "case " << i;
  // A good post afterwards: the receiver must see its bytes and nothing else.
  Done ok;
  nic_sge marker = Sge(r, 123, 4567);
  ASSERT_EQ(b->post(b, ep, &marker, 1, Done::Fn, &ok), 0);
  ASSERT_TRUE(PollUntil(b, [&] { return ok.calls > 0; }));
  EXPECT_EQ(ok.status, 0);
  ASSERT_TRUE(reader.WaitFor(4567));
  usleep(20000); // room for stray bytes to show up (none may)
  EXPECT_TRUE(reader.Data() == mem.Bytes((1 << 20) + 123, 4567));
  EXPECT_EQ(Stats().protection_errors, bad.size());
  for (auto &d : done)
    EXPECT_EQ(d.calls, 1);
}

TEST_F(UringTest, MalformedPostsReturnEinvalWithoutCompletion) {
  Region mem(1 << 20);
  LoopbackPair pair;
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r = Reg(mem.base, mem.len);
  nic_sge one = Sge(r, 0, 10), zero_len = Sge(r, 0, 0), null_addr = Sge(r, 0, 10);
  null_addr.addr = nullptr;
  std::vector<nic_sge> many(65, one);
  nic_sge huge[2] = {Sge(r, 0, 0xffffffffu), Sge(r, 0, 0xffffffffu)};
  struct nic_backend *other = nic_backend_uring_open();
  ASSERT_NE(other, nullptr);
  nic_endpoint *foreign = nic_uring_endpoint_open(other, pair.tx);
  ASSERT_NE(foreign, nullptr);
  Done d;
  EXPECT_EQ(b->post(b, ep, &one, 0, Done::Fn, &d), -EINVAL);
  EXPECT_EQ(b->post(b, ep, many.data(), 65, Done::Fn, &d), -E2BIG) << "over max_sge";
  EXPECT_EQ(b->post(b, ep, nullptr, 1, Done::Fn, &d), -EINVAL);
  EXPECT_EQ(b->post(b, ep, &one, 1, nullptr, &d), -EINVAL);
  EXPECT_EQ(b->post(b, nullptr, &one, 1, Done::Fn, &d), -EINVAL);
  EXPECT_EQ(b->post(b, foreign, &one, 1, Done::Fn, &d), -EINVAL) << "another backend's";
  EXPECT_EQ(b->post(b, ep, &zero_len, 1, Done::Fn, &d), -EINVAL);
  EXPECT_EQ(b->post(b, ep, &null_addr, 1, Done::Fn, &d), -EINVAL);
  EXPECT_EQ(b->post(b, ep, huge, 2, Done::Fn, &d), -EMSGSIZE) << "over one send's 2 GiB";
  for (int i = 0; i < 20; i++)
    b->poll(b, 64);
  EXPECT_EQ(d.calls, 0);
  EXPECT_EQ(Stats().posts, 0u);
  EXPECT_EQ(nic_uring_endpoint_close(foreign), 0);
  other->close(other);
}

TEST_F(UringTest, DeregWhileInFlightIsBusyThenTheSlotIsReused) {
  Region m1(2 << 20, 6), m2(2 << 20, 7);
  LoopbackPair pair(kSmallBuf, kSmallBuf);
  Reader reader(pair.rx, /*paused=*/true);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_registration r1 = Reg(m1.base, m1.len);
  nic_sge sge = Sge(r1, 0, m1.len);
  Done d1;
  ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d1), 0);
  // The backend's thread reaps without poll(), but 2 MiB cannot pass the small socket buffers
  // while the reader is paused: the post is certainly still in flight.
  EXPECT_EQ(b->dereg(b, &r1), -EBUSY);
  EXPECT_EQ(nic_uring_endpoint_close(ep), -EBUSY);
  reader.Resume();
  ASSERT_TRUE(PollUntil(b, [&] { return d1.calls > 0; }));
  EXPECT_EQ(d1.status, 0);
  EXPECT_EQ(b->dereg(b, &r1), 0);
  EXPECT_EQ(b->dereg(b, &r1), -EINVAL) << "second dereg of the same registration";
  Done stale;
  ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &stale), 0);
  ASSERT_TRUE(PollUntil(b, [&] { return stale.calls > 0; }));
  EXPECT_EQ(stale.status, -EFAULT) << "a deregistered slot must not be usable";
  nic_registration r2 = Reg(m2.base, m2.len);
  EXPECT_EQ(r2.handle, r1.handle) << "the freed slot is the lowest free one";
  nic_sge sge2 = Sge(r2, 100, 500000);
  Done d2;
  ASSERT_EQ(b->post(b, ep, &sge2, 1, Done::Fn, &d2), 0);
  ASSERT_TRUE(PollUntil(b, [&] { return d2.calls > 0; }));
  EXPECT_EQ(d2.status, 0);
  ASSERT_TRUE(reader.WaitFor(m1.len + 500000));
  EXPECT_TRUE(reader.Data() == m1.Bytes(0, m1.len) + m2.Bytes(100, 500000));
}

TEST_F(UringTest, RemoteAccessIsRefusedAndRkeyIsAlwaysZero) {
  Region mem(1 << 20);
  const unsigned read = NIC_ACCESS_REMOTE_READ, write = NIC_ACCESS_REMOTE_WRITE;
  for (unsigned access : {read, write, read | write, read | NIC_ACCESS_LOCAL_WRITE}) {
    nic_registration r{};
    EXPECT_EQ(b->reg(b, mem.base, mem.len, access, &r), -EOPNOTSUPP) << access;
    EXPECT_EQ(r.rkey, 0u);
  }
  EXPECT_EQ(Stats().slots_used, 0u) << "a refused registration must not take a slot";
  nic_registration r{};
  ASSERT_EQ(b->reg(b, mem.base, mem.len, NIC_ACCESS_LOCAL_WRITE, &r), 0);
  EXPECT_EQ(r.rkey, 0u);
  EXPECT_EQ(r.lkey, r.handle + 1);
  EXPECT_EQ(r.access, unsigned{NIC_ACCESS_LOCAL_WRITE});
  EXPECT_EQ(b->dereg(b, &r), 0);
  EXPECT_EQ(b->reg(b, mem.base, mem.len, 1u << 7, &r), -EINVAL) << "unknown access bit";
}

TEST_F(UringTest, BadRegistrationsFailWithoutTakingASlot) {
  Region mem(1 << 20);
  nic_registration r{};
  EXPECT_EQ(b->reg(b, nullptr, 4096, 0, &r), -EINVAL);
  EXPECT_EQ(b->reg(b, mem.base, 0, 0, &r), -EINVAL);
  EXPECT_EQ(b->reg(b, mem.base, (size_t{1} << 30) + 1, 0, &r), -EINVAL) << "over 1 GiB";
  void *hole = mmap(nullptr, 1 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(hole, MAP_FAILED);
  munmap(hole, 1 << 20);
  EXPECT_EQ(b->reg(b, hole, 1 << 20, 0, &r), -EFAULT) << "unmapped memory";
  EXPECT_EQ(Stats().slots_used, 0u);
  nic_registration bogus{mem.base, mem.len, 0, 1, 0, 0};
  EXPECT_EQ(b->dereg(b, &bogus), -EINVAL) << "slot 0 was never filled";
  bogus.handle = 1u << 20;
  EXPECT_EQ(b->dereg(b, &bogus), -EINVAL);
}

TEST_F(UringTest, RegAtFillsTheChosenSlot) {
  Region mem(1 << 20, 8);
  nic_registration r{}, again{};
  ASSERT_EQ(nic_uring_reg_at(b, 100, mem.base, mem.len, 0, &r), 0);
  EXPECT_EQ(r.handle, 100u);
  EXPECT_EQ(r.lkey, 101u);
  EXPECT_EQ(nic_uring_reg_at(b, 100, mem.base, mem.len, 0, &again), -EBUSY);
  EXPECT_EQ(nic_uring_reg_at(b, b->caps.max_regions, mem.base, 4096, 0, &again), -EINVAL);
  EXPECT_EQ(nic_uring_reg_at(b, 5, mem.base, 4096, NIC_ACCESS_REMOTE_READ, &again), -EOPNOTSUPP);
  LoopbackPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  nic_sge sge = Sge(r, 1000, 2000);
  Done d;
  ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d), 0);
  ASSERT_TRUE(PollUntil(b, [&] { return d.calls > 0; }));
  EXPECT_EQ(d.status, 0);
  ASSERT_TRUE(reader.WaitFor(2000));
  EXPECT_TRUE(reader.Data() == mem.Bytes(1000, 2000));
  EXPECT_EQ(b->dereg(b, &r), 0);
}

// Every slot filled with the same page (one update syscall each): then a clean -ENOSPC.
TEST_F(UringTest, FixedBufferTableRunsOutCleanly) {
  Region page(4096);
  std::vector<nic_registration> regs;
  nic_registration r{};
  int rc;
  while ((rc = b->reg(b, page.base, page.len, 0, &r)) == 0 && regs.size() <= 20000)
    regs.push_back(r);
  EXPECT_EQ(rc, -ENOSPC);
  ASSERT_EQ(regs.size(), b->caps.max_regions);
  EXPECT_EQ(Stats().slots_used, b->caps.max_regions);
  EXPECT_EQ(nic_uring_reg_at(b, 7, page.base, page.len, 0, &r), -EBUSY);
  ASSERT_EQ(b->dereg(b, &regs[7]), 0);
  ASSERT_EQ(b->reg(b, page.base, page.len, 0, &r), 0);
  EXPECT_EQ(r.handle, 7u);
  regs[7] = r;
  for (auto &reg : regs)
    ASSERT_EQ(b->dereg(b, &reg), 0);
  EXPECT_EQ(Stats().slots_used, 0u);
}

// Without CAP_IPC_LOCK, pinned fixed buffers count against RLIMIT_MEMLOCK: a clean -ENOMEM.
// The kernel counts the ring's own memory too, against the user's total (every process of
// root's without the capability: a sibling test's child, or the ring of one that just exited,
// whose teardown runs late). So the limit leaves the ring room (1 MiB, 4 MiB asked for), and an
// open refused with ENOMEM is tried again for a while.
TEST_F(UringTest, RegistrationWithoutIpcLockOverTheLimitIsEnomem) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2]{};
    if (syscall(SYS_capget, &hdr, caps)) _exit(10);
    caps[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    caps[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
    rlimit lim{1 << 20, 1 << 20};
    if (syscall(SYS_capset, &hdr, caps) || setrlimit(RLIMIT_MEMLOCK, &lim)) _exit(11);
    struct nic_backend *nb = nullptr; // accounting is decided when the ring is made
    for (int tries = 0; !nb && tries < 100; tries++)
      if (!(nb = nic_backend_uring_open()) && errno == ENOMEM) usleep(20000);
    if (!nb) _exit(12);
    Region mem(4 << 20);
    nic_registration r{};
    int rc = nb->reg(nb, mem.base, mem.len, 0, &r);
    _exit(rc == -ENOMEM ? 0 : rc == 0 ? 13 : 14);
  }
  int status = 0;
  auto end = Clock::now() + kLimit;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL() << "child hung";
    }
    usleep(1000);
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10-11: could not drop CAP_IPC_LOCK, 12: open failed, "
                                       "13: registration succeeded, 14: another error";
}

// The registration cache over io_uring, which pins the pages it registers: pages 0-1 cached for
// sending, pages 1-3 for receiving, then page 1 dropped and written anew. A send of pages 0-1
// must carry the new bytes; a registration left over from before would send the old page.
TEST_F(UringTest, ACachedRegistrationNeverSendsTheOldBytesOfADroppedPage) {
  nic_rcache_use_backend(b);
  struct Restore {
    ~Restore() { nic_rcache_use_backend(nullptr); } // after the region: see below
  } restore;
  {
    Region mem(4 * 4096, 9);
    ASSERT_NE(mem.base, nullptr);
    LoopbackPair pair;
    Reader reader(pair.rx);
    nic_endpoint *ep = Endpoint(pair.tx);
    nic_rcache_ref send, recv;
    ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), mem.base, 2 * 4096, NIC_ACCESS_LOCAL, &send),
              0);
    ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), mem.base + 4096, 3 * 4096,
                                 NIC_ACCESS_LOCAL_WRITE, &recv),
              0);
    nic_rcache_release(nic_rcache_process(), send.slot);
    nic_rcache_release(nic_rcache_process(), recv.slot);
    const std::string old = mem.Bytes(4096, 4096);
    ASSERT_EQ(madvise(mem.base + 4096, 4096, MADV_DONTNEED), 0);
    memset(mem.base + 4096, 'N', 4096);
    nic_rcache_ref now;
    ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), mem.base, 2 * 4096, NIC_ACCESS_LOCAL, &now),
              0);
    nic_sge sge =
        Sge(now.reg, static_cast<size_t>(mem.base - static_cast<char *>(now.reg.base)), 2 * 4096);
    Done d;
    ASSERT_EQ(b->post(b, ep, &sge, 1, Done::Fn, &d), 0);
    ASSERT_TRUE(PollUntil(b, [&] { return d.calls > 0; })) << "no completion";
    if (d.status == 0) {
      ASSERT_TRUE(reader.WaitFor(2 * 4096));
      const std::string got = reader.Data();
      EXPECT_TRUE(got.substr(4096) != old) << "the dropped page's old bytes were sent";
      EXPECT_TRUE(got == mem.Bytes(0, 2 * 4096)) << "receiver got other bytes";
    }
    nic_rcache_release(nic_rcache_process(), now.slot);
  } // unmapping the region drops what the cache holds, while b is still its backend
}
