// Switching allocation sites off without recompiling: by id, or by file:line or function name
// through the LLVM pass's site table (JSON lines), in a child process with its own environment.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "probe_runner.h"

namespace {

// Two modules, as the pass appends them; id 300 appears in both (a cross-module collision).
const char *kTable =
    R"({"module":"src/net.c","sites":[{"callee":"malloc","column":9,"file":"src/net.c","function":"reply","id":100,"kind":"allocation","line":18,"path":["malloc() at src/net.c:18:9 in reply"]},{"callee":"calloc","file":"src/net.c","function":"frame","id":300,"kind":"allocation","line":40}]})"
    "\n"
    R"({"module":"src/kv.c","sites":[{"callee":"malloc","file":"src/kv.c","function":"item_alloc","id":200,"kind":"allocation","line":7,"tags":[{"id":9}]},{"file":"src/kv.c","function":"slab","id":300,"line":90}]})"
    "\n";

std::string write_table() {
  char path[] = "/tmp/nic-sites-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, kTable, strlen(kTable)), ssize_t(strlen(kTable)));
  close(fd);
  return path;
}

TEST(SiteTable, SitesAreSwitchedOffByIdFileLineAndFunction) {
  std::string table = write_table();
  auto r =
      run_probe({"NICMALLOC_SITE_TABLE=" + table, "NICMALLOC_SITES_OFF=net.c:18,item_alloc,555"},
                {"sites", "100", "200", "300", "555", "9", "556"});
  unlink(table.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("site_100"), 0) << "net.c:18 names reply's malloc";
  EXPECT_EQ(r.num("site_200"), 0) << "item_alloc names kv.c's site";
  EXPECT_EQ(r.num("site_555"), 0) << "a bare id";
  EXPECT_EQ(r.num("site_300"), 1);
  EXPECT_EQ(r.num("site_9"), 1) << "ids inside tags are not sites of their own";
  EXPECT_EQ(r.num("site_556"), 1);
  EXPECT_EQ(count_lines(r.err, "id 300 is used by more than one site"), 1) << r.err;
}

TEST(SiteTable, NamesWithoutATableOrMatchingNothingAreReported) {
  auto no_table = run_probe({"NICMALLOC_SITES_OFF=reply"}, {"sites", "100"});
  EXPECT_EQ(no_table.num("site_100"), 1);
  EXPECT_EQ(count_lines(no_table.err, "needs the pass's table"), 1) << no_table.err;
  std::string table = write_table();
  auto nothing = run_probe({"NICMALLOC_SITE_TABLE=" + table, "NICMALLOC_SITES_OFF=nosuch.c:1"},
                           {"sites", "100"});
  EXPECT_EQ(nothing.num("site_100"), 1);
  EXPECT_EQ(count_lines(nothing.err, "matched no site"), 1) << nothing.err;
  // A typo next to a name that matches is reported too; "net.c:18x" is not line 18.
  auto typo = run_probe({"NICMALLOC_SITE_TABLE=" + table, "NICMALLOC_SITES_OFF=reply,net.c:18x"},
                        {"sites", "100"});
  unlink(table.c_str());
  EXPECT_EQ(typo.num("site_100"), 0);
  EXPECT_EQ(count_lines(typo.err, "'net.c:18x' matched no site"), 1) << typo.err;
  auto missing = run_probe({"NICMALLOC_SITE_TABLE=/nonexistent.jsonl", "NICMALLOC_SITES_OFF=reply"},
                           {"sites", "100"});
  EXPECT_EQ(count_lines(missing.err, "cannot be read"), 1) << missing.err;
}

// An older pass appended a rebuilt module's line again instead of replacing it: every id of the
// module then looked shared. Only a module's last line counts, and the same site (id, file, line,
// function) named by two modules (an inline function of a header) is no collision.
TEST(SiteTable, ARebuiltModulesOlderLinesAreIgnored) {
  const std::string net_old =
      R"({"module":"src/net.c","sites":[{"file":"src/net.c","function":"reply","id":100,"line":18},{"file":"src/net.c","function":"gone","id":101,"line":30}]})";
  const std::string net_new =
      R"({"sites":[{"file":"src/net.c","function":"reply","id":100,"line":19}],"module":"src/net.c"})";
  const std::string kv =
      R"({"module":"src/kv.c","sites":[{"file":"inc/buf.h","function":"buf_new","id":500,"line":4}]})";
  const std::string other =
      R"({"module":"src/io.c","sites":[{"file":"inc/buf.h","function":"buf_new","id":500,"line":4},{"file":"src/io.c","function":"io_buf","id":100,"line":7}]})";
  char path[] = "/tmp/nic-sites-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = net_old + "\n" + kv + "\n" + net_old + "\n" + net_new + "\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), ssize_t(text.size()));
  close(fd);
  auto r =
      run_probe({"NICMALLOC_SITE_TABLE=" + std::string(path), "NICMALLOC_SITES_OFF=gone,net.c:19"},
                {"sites", "100", "101", "500"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(r.err, "used by more than one site"), 0) << r.err;
  EXPECT_EQ(count_lines(r.err, "'gone' matched no site"), 1)
      << "only in a replaced line: " << r.err;
  EXPECT_EQ(r.num("site_100"), 0) << "net.c:19, from the module's last line";
  EXPECT_EQ(r.num("site_101"), 1);
  // A module that really gives id 100 to another site is still reported.
  fd = open(path, O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, (other + "\n").data(), other.size() + 1), ssize_t(other.size() + 1));
  close(fd);
  r = run_probe({"NICMALLOC_SITE_TABLE=" + std::string(path)}, {"sites", "100"});
  unlink(path);
  EXPECT_EQ(count_lines(r.err, "used by more than one site"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "id 100 is used by more than one site (src/io.c:7"), 1) << r.err;
}

// A switched-off site allocates as the plain malloc it replaced would: from the control heap
// unless the size rule (or a dataplane scope) says otherwise, as in a build without the pass.
TEST(SiteTable, ASwitchedOffSiteFollowsTheRulesOfAPlainMalloc) {
  auto plain = run_probe({"NICMALLOC_SITES_OFF=16134"}, {"sites", "16134", "16135"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.num("site_16134_dataplane"), 0);
  EXPECT_EQ(plain.num("site_16135_dataplane"), 1) << "a site left on";
  auto sized =
      run_probe({"NICMALLOC_SITES_OFF=16134", "NICMALLOC_DP_MIN_SIZE=256"}, {"sites", "16134"});
  ASSERT_EQ(sized.exit_code, 0) << sized.err;
  EXPECT_EQ(sized.num("site_16134"), 0);
  EXPECT_EQ(sized.num("site_16134_dataplane"), 1) << "4 KiB, over NICMALLOC_DP_MIN_SIZE";
}

// The table is read inside the first malloc of every process that names it: a FIFO there must
// not hold start-up until someone writes to it.
TEST(SiteTable, AFifoAsTheTableIsRefusedWithoutWaiting) {
  const std::string fifo = "/tmp/nic-sites-fifo-" + std::to_string(getpid());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto r = run_probe({"NICMALLOC_SITE_TABLE=" + fifo, "NICMALLOC_SITES_OFF=reply,555"},
                     {"sites", "555", "100"});
  unlink(fifo.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("site_555"), 0) << "ids still switch off";
  EXPECT_EQ(r.num("site_100"), 1);
  EXPECT_EQ(count_lines(r.err, "not a readable regular file"), 1) << r.err;
}

// A list of more than 64 names once lost what came after the 64th: an id there stayed on, and a
// name there was neither matched nor said to match nothing.
TEST(SiteTable, EveryEntryOfALongListIsApplied) {
  std::string table = write_table(), names;
  for (int i = 1; i <= 70; i++)
    names += "f" + std::to_string(i) + ",";
  auto r = run_probe({"NICMALLOC_SITE_TABLE=" + table, "NICMALLOC_SITES_OFF=" + names + "7,reply"},
                     {"sites", "7", "100", "200"});
  unlink(table.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("site_7"), 0) << "an id after 70 names";
  EXPECT_EQ(r.num("site_100"), 0) << "reply, named after 70 others";
  EXPECT_EQ(r.num("site_200"), 1);
  EXPECT_EQ(count_lines(r.err, "matched no site"), 70) << r.err;
  EXPECT_EQ(count_lines(r.err, "'f70' matched no site"), 1) << r.err;
}

} // namespace
