// Statistics made from one field list (nicmalloc_stats_fields.h): nic_get_stats fills a caller's
// struct exactly up to the size it says, whatever header it was built with; the readable report
// and the JSON form show every field of the list.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "nicmalloc.h"
#include "probe_runner.h"

namespace {

struct Field {
  const char *group, *name, *unit, *label;
  size_t offset, size;
};
#define FIELD(group, name, type, unit, label, help)                                                \
  {group, #name, #unit, label, offsetof(nic_stats, name), sizeof(nic_stats::name)},
const Field kFields[] = {NIC_STATS_FIELDS(FIELD)};
#undef FIELD

constexpr unsigned char kGuard = 0xa5;
constexpr size_t kHeader = offsetof(nic_stats, control_committed);

// A caller's struct of `size` bytes (its header's sizeof), followed by guard bytes.
struct Buffer {
  alignas(nic_stats) unsigned char bytes[sizeof(nic_stats) + 64];
  explicit Buffer(uint32_t size, unsigned char fill = kGuard) {
    memset(bytes, fill, sizeof bytes);
    memcpy(bytes, &size, sizeof size);
  }
  nic_stats *stats() { return reinterpret_cast<nic_stats *>(bytes); }
  uint32_t size() const {
    uint32_t v;
    memcpy(&v, bytes + offsetof(nic_stats, size), sizeof v);
    return v;
  }
  uint32_t version() const {
    uint32_t v;
    memcpy(&v, bytes + offsetof(nic_stats, version), sizeof v);
    return v;
  }
  // The first byte from `from` on that is not the guard, or -1.
  long touched_from(size_t from) const {
    for (size_t i = from; i < sizeof bytes; i++)
      if (bytes[i] != kGuard) return static_cast<long>(i);
    return -1;
  }
  bool all_guard(size_t from, size_t to) const {
    for (size_t i = from; i < to; i++)
      if (bytes[i] != kGuard) return false;
    return true;
  }
};

uint64_t other_errors() {
  nic_stats s = NIC_STATS_INIT;
  EXPECT_EQ(nic_get_stats(&s), 0);
  return s.other_api_errors;
}

std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  ssize_t n;
  off_t at = 0;
  while ((n = pread(fd, buf, sizeof buf, at)) > 0) {
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return text;
}

// What print(fd) writes, through a temporary file.
template <typename Print> std::string capture(Print print) {
  char path[] = "/tmp/nic_test_stats_XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  unlink(path);
  print(fd);
  std::string text = read_all(fd);
  close(fd);
  return text;
}

TEST(Stats, InitSetsTheSizeOfThisHeader) {
  nic_stats s = NIC_STATS_INIT;
  EXPECT_EQ(s.size, sizeof(nic_stats));
  EXPECT_EQ(s.version, 0u);
  EXPECT_EQ(s.control_committed, 0u);
  ASSERT_EQ(nic_get_stats(&s), 0);
  EXPECT_EQ(s.size, sizeof(nic_stats));
  EXPECT_EQ(s.version, NIC_STATS_VERSION);
  EXPECT_GT(s.chunks_max, 0u);
  EXPECT_NE(s.backend, nullptr);
}

// A program built against an older header has a struct that ends after some field of the list
// (fields are only appended): each such struct is filled up to its end and not a byte beyond.
TEST(Stats, AShorterStructIsFilledExactlyToItsSize) {
  for (const Field &f : kFields) {
    const uint32_t size = static_cast<uint32_t>(f.offset + f.size);
    Buffer b(size);
    ASSERT_EQ(nic_get_stats(b.stats()), 0) << f.name;
    EXPECT_EQ(b.size(), size) << f.name;
    EXPECT_EQ(b.version(), NIC_STATS_VERSION) << f.name;
    EXPECT_EQ(b.touched_from(size), -1)
        << "a struct ending at " << f.name << " (" << size << " bytes) was written past its end";
    // Every field inside was written: no figure is the guard pattern (the padding may be).
    for (const Field &in : kFields) {
      if (in.offset + in.size > size) continue;
      EXPECT_FALSE(b.all_guard(in.offset, in.offset + in.size))
          << in.name << " not filled in a struct ending at " << f.name;
    }
  }
}

// Sizes that end inside a field: the bytes up to the size are filled, none after.
TEST(Stats, ASizeInsideAFieldStopsAtThatByte) {
  for (uint32_t size : {9u, 13u, 15u, 17u, 101u, static_cast<uint32_t>(sizeof(nic_stats) - 1)}) {
    Buffer b(size);
    ASSERT_EQ(nic_get_stats(b.stats()), 0) << size;
    EXPECT_EQ(b.size(), size);
    EXPECT_EQ(b.touched_from(size), -1) << "size " << size << " written past";
  }
}

// A program built against a newer header (more fields than this library knows): what the library
// knows is filled, the rest is left as the caller set it, and size says how much was filled.
TEST(Stats, ALongerStructKeepsTheFieldsThisLibraryDoesNotKnow) {
  Buffer b(static_cast<uint32_t>(sizeof(nic_stats) + 64));
  ASSERT_EQ(nic_get_stats(b.stats()), 0);
  EXPECT_EQ(b.size(), sizeof(nic_stats));
  EXPECT_EQ(b.touched_from(sizeof(nic_stats)), -1);
  EXPECT_GT(b.stats()->chunks_max, 0u);
}

// A zeroed struct (memset, = {0}) says size 0: it is taken as the first layout that had size,
// which every header from this one on starts with.
TEST(Stats, SizeZeroIsTheVersionOneLayout) {
  static_assert(NIC_STATS_VERSION == 8, "versions 2 to 8 appended fields; adjust otherwise");
  static_assert(NIC_STATS_SIZE_V1 < sizeof(nic_stats), "version 1 ends at log_lines_dropped");
  Buffer b(0, 0);
  memset(b.bytes + NIC_STATS_SIZE_V1, kGuard, sizeof b.bytes - NIC_STATS_SIZE_V1);
  ASSERT_EQ(nic_get_stats(b.stats()), 0);
  EXPECT_EQ(b.size(), NIC_STATS_SIZE_V1);
  EXPECT_EQ(b.version(), NIC_STATS_VERSION);
  EXPECT_EQ(b.touched_from(NIC_STATS_SIZE_V1), -1);
  EXPECT_GT(b.stats()->chunks_max, 0u);
  EXPECT_NE(b.stats()->backend, nullptr);
}

// Below the header there is no room for any figure: an error, counted, and nothing written.
TEST(Stats, ASizeBelowTheHeaderWritesNothing) {
  for (uint32_t size = 1; size < kHeader; size++) {
    const uint64_t before = other_errors();
    Buffer b(size);
    Buffer untouched(size);
    EXPECT_EQ(nic_get_stats(b.stats()), -EINVAL) << size;
    EXPECT_EQ(memcmp(b.bytes, untouched.bytes, sizeof b.bytes), 0) << "size " << size;
    EXPECT_EQ(other_errors(), before + 1) << size;
  }
  const uint64_t before = other_errors();
  EXPECT_EQ(nic_get_stats(nullptr), -EINVAL);
  EXPECT_EQ(other_errors(), before + 1);
}

// The line of the report that shows a group, or "".
std::string group_line(const std::string &report, const std::string &group) {
  const std::string start = "  " + group;
  size_t at = 0;
  while (at < report.size()) {
    size_t end = report.find('\n', at);
    if (end == std::string::npos) end = report.size();
    std::string line = report.substr(at, end - at);
    if (line.compare(0, start.size(), start) == 0 && line.size() > 20 &&
        line.find_first_not_of(' ', start.size()) == 20)
      return line;
    at = end + 1;
  }
  return "";
}

TEST(Stats, TheReportShowsEveryFieldOnItsGroupsLine) {
  const std::string report = capture([](int fd) { nic_print_stats(fd); });
  ASSERT_EQ(report.rfind("nicmalloc report\n", 0), 0u) << report;
  for (const Field &f : kFields) {
    const std::string line = group_line(report, f.group);
    ASSERT_NE(line, "") << "no line for group " << f.group << "\n" << report;
    const std::string label = f.label;
    const size_t mark = label.find('#');
    ASSERT_NE(mark, std::string::npos) << f.name << ": its label has no place for the value";
    // The words around the value, with a value between them.
    const std::string before = label.substr(0, mark), after = label.substr(mark + 1);
    const std::regex shown(
        std::regex_replace(before, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") + R"([^ ,;]+)" +
        std::regex_replace(after, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)"));
    EXPECT_TRUE(std::regex_search(line, shown))
        << f.name << " (\"" << f.label << "\") not in: " << line;
  }
}

// What tests and scripts read in the report (tests/preload/profile_checks.sh, test_lifecycle,
// test_bad_input, test_fence_protect) keeps its form.
TEST(Stats, TheReportKeepsTheLinesScriptsParse) {
  const std::string report = capture([](int fd) { nic_print_stats(fd); });
  for (const char *re :
       {R"(\n *control heap *[0-9.]+ MiB committed)",
        R"(\n *sent *[0-9]+ bytes, [0-9]+ from dataplane)",
        R"(\n *dataplane *live.*pinned [0-9.]+ MiB, mapped [0-9.]+ MiB)",
        R"(\n  errors            [0-9]+ invalid frees, [0-9]+ double frees)",
        R"(\n  chunks            [0-9]+ live, )", R"(\n  fence             wait; )",
        R"(\n  dataplane free    [0-9.]+ MiB)", R"(\n  NIC cache         )"})
    EXPECT_TRUE(std::regex_search(report, std::regex(re))) << re << "\n" << report;
}

// The value after "name": in a one-line JSON object.
std::string json_value(const std::string &json, const char *name) {
  const std::string key = std::string("\"") + name + "\": ";
  size_t at = json.find(key);
  if (at == std::string::npos) return "<missing>";
  at += key.size();
  size_t end = json[at] == '"' ? json.find('"', at + 1) + 1 : json.find_first_of(",}", at);
  return json.substr(at, end - at);
}

TEST(Stats, TheJsonFormHasEveryFieldWithItsValue) {
  // Known figures: errors counted by this test.
  nic_get_stats(nullptr);
  nic_get_stats(nullptr);
  nic_stats s = NIC_STATS_INIT;
  ASSERT_EQ(nic_get_stats(&s), 0);
  const std::string json = capture([](int fd) { nic_print_stats_json(fd); });
  ASSERT_GE(json.size(), 2u);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.substr(json.size() - 2), "}\n");
  EXPECT_EQ(json.find('\n'), json.size() - 1) << "one line";
  EXPECT_EQ(json_value(json, "version"), std::to_string(NIC_STATS_VERSION));
  size_t keys = 0;
  for (size_t at = 0; (at = json.find("\": ", at)) != std::string::npos; at++)
    keys++;
  EXPECT_EQ(keys, 1 + sizeof kFields / sizeof kFields[0]) << json;
  for (const Field &f : kFields) {
    const std::string v = json_value(json, f.name);
    ASSERT_NE(v, "<missing>") << f.name << "\n" << json;
    if (!strcmp(f.unit, "name") || !strcmp(f.unit, "page_kind"))
      EXPECT_TRUE(v.size() >= 2 && v.front() == '"' && v.back() == '"') << f.name << " = " << v;
    else
      EXPECT_TRUE(std::regex_match(v, std::regex("[0-9]+"))) << f.name << " = " << v;
  }
  // Figures that do not move between the two reads.
  EXPECT_EQ(json_value(json, "other_api_errors"), std::to_string(s.other_api_errors));
  EXPECT_GE(s.other_api_errors, 2u);
  EXPECT_EQ(json_value(json, "chunks_max"), std::to_string(s.chunks_max));
  EXPECT_EQ(json_value(json, "chunk_size"), std::to_string(s.chunk_size));
  EXPECT_EQ(json_value(json, "backend"), std::string("\"") + s.backend + "\"");
  EXPECT_EQ(json_value(json, "page_kind"),
            std::string("\"") + nic_page_kind_name(s.page_kind) + "\"");
}

} // namespace

// The translation-cache model (about 1.4 MiB for the default 16,384 entries) is built by the first
// post, not by a statistics read: a program that posts nothing and prints its statistics at exit
// (NICMALLOC_STATS) used to grow by that much, which showed as peak RSS in the allocator suite.
TEST(Stats, ReadingThemBeforeAnyPostCostsNoMemory) {
  ProbeResult r = run_probe({}, {"stats-read"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const long long grown = r.num("anon_kb_after") - r.num("anon_kb_before");
  EXPECT_LT(grown, 256) << "KiB of anonymous memory the first statistics read added";
  EXPECT_EQ(r.num("cache_capacity"), 16384) << "the model's settings are read without the model";
  EXPECT_EQ(r.num("working_set"), 0);
}

// The control heap's committed and resident bytes come from the kernel, but a read does not make
// it write /proc/self/smaps, for which it walks the page tables of every mapping (a dataplane
// chunk's too: 25 ms a read with 1 GiB backed): the control arena's entries of /proc/self/maps
// and mincore over them. A process with 4096 more mappings.
TEST(Stats, AReadDoesNotWalkEveryMapping) {
  ProbeResult r = run_probe({}, {"stats-walk", "4096"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_GT(r.num("smaps_bytes"), 1ll << 20) << "the probe's mappings did not take";
  EXPECT_LT(r.num("read_bytes"), r.num("smaps_bytes") / 16) << r.out;
  EXPECT_GE(r.num("control_resident"), 8ll << 20) << r.out;
  EXPECT_LE(r.num("control_resident"), r.num("control_committed")) << r.out;
}
