// The memory cgroup headroom (alloc/os/memcg.c) read from a cgroup tree made in a temporary
// directory: the limits, usage and page cache of every level count, and a level without a limit
// (cgroup v1's largest page-aligned long, v2's "max") bounds nothing: the room is SIZE_MAX
// when no level has a limit, as for a process in no limited cgroup.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" {
#include "memcg.h"
}

namespace {

constexpr size_t kMiB = size_t{1} << 20;
const char *kV1NoLimit = "9223372036854771712"; // what cgroup v1 shows without a limit

void Write(const std::string &path, const std::string &text) {
  FILE *f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  fputs(text.c_str(), f);
  fclose(f);
}

struct Tree {
  std::string root;
  Tree() {
    char templ[] = "/tmp/nic_memcg_XXXXXX";
    root = mkdtemp(templ);
  }
  ~Tree() { std::system(("rm -rf '" + root + "'").c_str()); }
  // One cgroup level (v1 file names): limit, usage and the file LRU lists of memory.stat.
  void V1(const std::string &rel, const char *limit, size_t usage, size_t active_file,
          size_t inactive_file) {
    const std::string dir = root + rel;
    mkdir(dir.c_str(), 0700);
    Write(dir + "/memory.limit_in_bytes", std::string(limit) + "\n");
    Write(dir + "/memory.usage_in_bytes", std::to_string(usage) + "\n");
    Write(dir + "/memory.stat", "cache 0\nrss 0\ntotal_active_file " + std::to_string(active_file) +
                                    "\ntotal_inactive_file " + std::to_string(inactive_file) +
                                    "\n");
  }
};

TEST(Memcg, V1LevelsWithoutALimitLeaveNoBound) {
  Tree t;
  t.V1("", kV1NoLimit, 3000 * kMiB, 0, 0);
  t.V1("/a", kV1NoLimit, 2000 * kMiB, 0, 0);
  t.V1("/a/b", kV1NoLimit, 1000 * kMiB, 0, 0);
  EXPECT_EQ(nic_memcg_room_up_from(t.root.c_str(), "/a/b", true), SIZE_MAX);
}

TEST(Memcg, V1TightestLimitedLevelCountsPageCacheAsFree) {
  Tree t;
  t.V1("", kV1NoLimit, 3000 * kMiB, 0, 0);
  t.V1("/a", "1073741824", 900 * kMiB, 100 * kMiB, 60 * kMiB); // 1 GiB: 284 MiB left
  t.V1("/a/b", kV1NoLimit, 500 * kMiB, 0, 0);
  EXPECT_EQ(nic_memcg_room_up_from(t.root.c_str(), "/a/b", true), (1024 - 900 + 160) * kMiB);
}

TEST(Memcg, V2MaxLeavesNoBound) {
  Tree t;
  const std::string dir = t.root + "/a";
  mkdir(dir.c_str(), 0700);
  Write(dir + "/memory.max", "max\n");
  Write(dir + "/memory.current", std::to_string(700 * kMiB) + "\n");
  Write(dir + "/memory.stat", "active_file 0\ninactive_file 0\n");
  EXPECT_EQ(nic_memcg_room_up_from(t.root.c_str(), "/a", false), SIZE_MAX);
  Write(dir + "/memory.max", std::to_string(1024 * kMiB) + "\n");
  EXPECT_EQ(nic_memcg_room_up_from(t.root.c_str(), "/a", false), 324 * kMiB);
}

} // namespace
