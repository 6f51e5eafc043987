// Memory io_uring cannot register: it pins every fixed buffer for writing, so read-only memory
// (a file mapped PROT_READ, a program's constants) and a shared writable mapping of a file on a
// disk filesystem are refused with EFAULT. Such memory is copied into a bounce area and sent,
// from nic_sga_add under NICMALLOC_BACKEND=uring and from nic_sga_post for a uring endpoint
// beside the sim (UringReadOnlyBesideSim, run under sim by tests/uring.cmake); memory that cannot
// be read is still refused.
#include "uring_loopback.h"

extern "C" {
#include "bounce.h"
#include "rcache.h"
}

#include <array>

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>

using namespace uring_test;

namespace {

constexpr size_t kLen = 64 << 10; // over a bounce slab (16 KiB): a slab of its own

// A table in the program's read-only data: a private read-only mapping of the executable.
constexpr std::array<char, 8192> MakeTable() {
  std::array<char, 8192> t{};
  for (size_t i = 0; i < t.size(); i++)
    t[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
  return t;
}
constexpr std::array<char, 8192> kTable = MakeTable();

// A file of kLen patterned bytes in the working directory (the build tree: a disk filesystem,
// where a shared writable mapping is refused as the read-only ones are), mapped as asked.
struct File {
  File() {
    char path[] = "./uring_readonly_XXXXXX";
    fd = mkstemp(path);
    if (fd < 0) {
      ADD_FAILURE() << "mkstemp: " << strerror(errno);
      return;
    }
    unlink(path);
    Region pattern(kLen, 7);
    if (write(fd, pattern.base, kLen) != static_cast<ssize_t>(kLen)) ADD_FAILURE() << "write";
    struct statfs fs {};
    on_tmpfs = fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC);
  }
  ~File() {
    for (void *p : maps)
      munmap(p, kLen);
    if (fd >= 0) close(fd);
  }
  char *Map(int prot, int flags) {
    void *p = mmap(nullptr, kLen, prot, flags, fd, 0);
    if (p == MAP_FAILED) {
      ADD_FAILURE() << "mmap: " << strerror(errno);
      return nullptr;
    }
    maps.push_back(p);
    return static_cast<char *>(p);
  }
  int fd = -1;
  bool on_tmpfs = false;
  std::vector<void *> maps;
};

struct Kind {
  const char *what;
  const char *p;
  size_t len;
};

// The kinds of memory io_uring refuses, each with its bytes.
std::vector<Kind> RefusedKinds(File &file, char *ro_anon) {
  std::vector<Kind> kinds = {
      {"a file mapped read-only, private", file.Map(PROT_READ, MAP_PRIVATE), kLen},
      {"a file mapped read-only, shared", file.Map(PROT_READ, MAP_SHARED), kLen},
      {"the program's read-only data", kTable.data(), kTable.size()},
      {"anonymous memory made read-only", ro_anon, kLen},
  };
  if (!file.on_tmpfs) // tmpfs pages can be pinned for writing
    kinds.push_back({"a disk file mapped writable, shared",
                     file.Map(PROT_READ | PROT_WRITE, MAP_SHARED), kLen});
  return kinds;
}

// Anonymous memory filled with a pattern, then made read-only.
char *ReadOnlyAnon(Region &r) {
  EXPECT_EQ(mprotect(r.base, r.len, PROT_READ), 0) << strerror(errno);
  return r.base;
}

// Adds [p, p+len) as the one entry of a message, posts it to ep and waits for its completion:
// the add's, the post's or the completion's error, or 0. *copied: whether the entry was copied.
int SendOne(nic_endpoint *ep, const void *p, size_t len, bool *copied) {
  nic_sga sga;
  int rc = nic_sga_init(&sga, 0);
  if (rc == 0) rc = nic_sga_add(&sga, p, len);
  if (rc == 0) *copied = sga.count == 1 && sga.entry[0].kind == NIC_SGA_BOUNCE;
  Done done;
  if (rc == 0) rc = nic_sga_post(&sga, ep, Done::Fn, &done);
  if (rc) {
    nic_sga_reset(&sga);
    return rc;
  }
  if (!NicPollUntil([&] { return done.calls == 1; })) return -ETIMEDOUT;
  return done.status;
}

// They were refused at nic_sga_add with EFAULT ("cannot be resolved (Bad address)").
TEST_F(UringSgaTest, MemoryIoUringCannotPinIsCopiedAndSent) {
  LoopbackPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  ASSERT_NE(ep, nullptr);
  File file;
  Region anon(kLen, 3);
  std::vector<Kind> kinds = RefusedKinds(file, ReadOnlyAnon(anon));
  std::string want;
  testing::internal::CaptureStderr();
  for (const Kind &k : kinds) {
    ASSERT_NE(k.p, nullptr) << k.what;
    bool copied = false;
    EXPECT_EQ(SendOne(ep, k.p, k.len, &copied), 0) << k.what;
    EXPECT_TRUE(copied) << k.what << ": not copied";
    want += std::string(k.p, k.len);
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(reader.WaitFor(want.size()));
  EXPECT_TRUE(reader.Data() == want) << "the receiver got other bytes";
}

// A range that is not all readable is refused as before, also where the rest is read-only.
TEST_F(UringSgaTest, UnreadableMemoryIsStillRefused) {
  File file;
  char *ro = file.Map(PROT_READ, MAP_PRIVATE);
  ASSERT_NE(ro, nullptr);
  ASSERT_EQ(mprotect(ro + kLen / 2, kLen / 2, PROT_NONE), 0);
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  testing::internal::CaptureStderr();
  const int whole = nic_sga_add(&sga, ro, kLen), half = nic_sga_add(&sga, ro, kLen / 2);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(whole, -EFAULT) << "half of it cannot be read";
  EXPECT_NE(err.find("the range is not (entirely) mapped"), std::string::npos) << err;
  ASSERT_EQ(half, 0) << "the readable half";
  EXPECT_EQ(sga.entry[0].kind, NIC_SGA_BOUNCE);
  nic_sga_reset(&sga);
}

// Under sim, which registers these, a uring endpoint's post resolves the entries again, against
// io_uring: they were refused there ("the entries cannot be registered with the endpoint's
// backend uring (Bad address)"), and are copied now. A post that fails after such a copy gives
// its room back: the array is as it was.
TEST(UringReadOnlyBesideSim, MemoryIoUringCannotPinIsCopiedForItsEndpoint) {
  struct nic_backend *d = nic_backend_active();
  if (d && nic_uring_is(d)) GTEST_SKIP() << "the backend is uring: ctest runs this under sim";
  LoopbackPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = nic_uring_endpoint_create(pair.tx);
  ASSERT_NE(ep, nullptr) << strerror(errno);
  File file;
  Region anon(kLen, 5);
  std::vector<Kind> kinds = RefusedKinds(file, ReadOnlyAnon(anon));
  // Added under sim, which registers them, with an entry after them whose memory is gone by the
  // post.
  auto fill = [&](nic_sga *sga, char *gone) {
    ASSERT_EQ(nic_sga_init(sga, 0), 0);
    for (const Kind &k : kinds) {
      ASSERT_NE(k.p, nullptr) << k.what;
      ASSERT_EQ(nic_sga_add(sga, k.p, k.len), 0) << k.what;
      EXPECT_NE(sga->entry[sga->count - 1].kind, NIC_SGA_BOUNCE) << k.what << ": copied by sim";
    }
    if (gone) {
      ASSERT_EQ(nic_sga_add(sga, gone, kLen), 0);
    }
  };
  char *gone = static_cast<char *>(
      mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(gone, MAP_FAILED);
  memset(gone, 'g', kLen);
  nic_sga sga;
  fill(&sga, gone);
  ASSERT_EQ(munmap(gone, kLen), 0);
  const nic_sga before = sga;
  const struct nic_bounce_mark mark = nic_bounce_mark(sga.bounce);
  Done done;
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sga_post(&sga, ep, Done::Fn, &done), -EFAULT) << "the last entry is gone";
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(memcmp(&before, &sga, sizeof sga), 0) << "the array changed";
  const struct nic_bounce_mark after = nic_bounce_mark(sga.bounce);
  EXPECT_TRUE(after.head == mark.head && after.used == mark.used) << "the copies' room was kept";
  nic_sga_reset(&sga);

  fill(&sga, nullptr);
  ASSERT_EQ(nic_sga_post(&sga, ep, Done::Fn, &done), 0);
  ASSERT_TRUE(NicPollUntil([&] { return done.calls == 1; }));
  EXPECT_EQ(done.status, 0);
  std::string want;
  for (const Kind &k : kinds)
    want += std::string(k.p, k.len);
  ASSERT_TRUE(reader.WaitFor(want.size()));
  EXPECT_TRUE(reader.Data() == want) << "the receiver got other bytes";
  int rc = -EBUSY;
  NicPollUntil([&] { return (rc = nic_uring_endpoint_destroy(ep)) != -EBUSY; });
  EXPECT_EQ(rc, 0);
}

} // namespace
