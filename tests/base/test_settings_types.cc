// The typed settings: every entry of settings_table.h parses its default, a bad value of each
// type warns once and keeps the default, ranges refuse what lies outside them, and the words
// the modules map by position are in the order they expect.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "settings.h"
}

namespace {

const nic_setting_info *Info(int i) {
  return nic_setting_row(static_cast<nic_setting>(i));
}

int Lines(const std::string &s) {
  int n = 0;
  for (char c : s)
    n += c == '\n';
  return n;
}

// Each test starts and ends with none of the table's variables set.
struct Settings : testing::Test {
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (int i = 0; i < NIC_S_COUNT; i++)
      unsetenv(Info(i)->name);
    nic_settings_reload(false);
  }
  // Sets one variable and reloads; returns what the reload printed.
  static std::string Set(nic_setting s, const std::string &value) {
    setenv(nic_setting_row(s)->name, value.c_str(), 1);
    testing::internal::CaptureStderr();
    nic_settings_reload(false);
    return testing::internal::GetCapturedStderr();
  }
  struct Read {
    uint64_t number;
    int choice;
    std::string text;
    bool has_text, given;
    std::string err;
  };
  static Read Get(nic_setting s) {
    testing::internal::CaptureStderr();
    Read r{};
    r.number = nic_setting_number(s);
    r.choice = nic_setting_choice(s);
    const char *t = nic_setting_text(s);
    r.has_text = t != nullptr;
    r.text = t ? t : "";
    r.given = nic_setting_given(s);
    r.err = testing::internal::GetCapturedStderr();
    return r;
  }
  static bool IsNumber(nic_setting_type t) {
    return t == NIC_T_SIZE || t == NIC_T_POW2 || t == NIC_T_COUNT || t == NIC_T_MS;
  }
  static std::string Number(uint64_t v) {
    return std::to_string(static_cast<unsigned long long>(v));
  }
};

TEST_F(Settings, TheTableIsWellFormed) {
  ASSERT_GT(NIC_S_COUNT, 40);
  for (int i = 0; i < NIC_S_COUNT; i++) {
    const nic_setting_info *s = Info(i);
    EXPECT_EQ(std::string(s->name), std::string("NICMALLOC_") + s->id);
    EXPECT_GT(strlen(s->help), 10u) << s->name;
    EXPECT_EQ(strchr(s->help, '\n'), nullptr) << s->name;
    EXPECT_LE(s->min, s->max) << s->name;
    if (s->type == NIC_T_CHOICE) {
      EXPECT_NE(*s->words, '\0') << s->name;
    }
    if (s->type == NIC_T_TEXT) {
      EXPECT_STREQ(s->def, "") << s->name;
    }
  }
}

// Unset, each setting holds its default, without a word; its default given as a value is taken
// as the same value, also without a word.
TEST_F(Settings, EverySettingParsesItsDefault) {
  for (int i = 0; i < NIC_S_COUNT; i++) {
    const nic_setting_info *s = Info(i);
    auto id = static_cast<nic_setting>(i);
    Read unset = Get(id);
    EXPECT_EQ(unset.err, "") << s->name;
    EXPECT_FALSE(unset.given) << s->name;
    if (!*s->def) {
      EXPECT_EQ(unset.number, 0u) << s->name;
      EXPECT_EQ(unset.choice, -1) << s->name;
      EXPECT_FALSE(unset.has_text) << s->name;
      continue;
    }
    if (s->type == NIC_T_CHOICE) {
      EXPECT_GE(unset.choice, 0) << s->name;
    }
    EXPECT_EQ(Set(id, s->def), "") << s->name;
    Read given = Get(id);
    EXPECT_EQ(given.err, "") << s->name << "=" << s->def;
    EXPECT_TRUE(given.given) << s->name << "=" << s->def;
    EXPECT_EQ(given.number, unset.number) << s->name;
    EXPECT_EQ(given.choice, unset.choice) << s->name;
    unsetenv(s->name);
  }
}

// Every setting that can be bad: one warning, on the first read only and not at start-up, in
// the one form, and the default.
TEST_F(Settings, ABadValueOfEveryTypeWarnsOnceAndKeepsTheDefault) {
  int checked = 0;
  for (int i = 0; i < NIC_S_COUNT; i++) {
    const nic_setting_info *s = Info(i);
    auto id = static_cast<nic_setting>(i);
    std::string bad = "x-bad";
    if (s->type == NIC_T_TEXT) {
      if (!*s->words) continue; // any text is a path or a name
      bad = std::string(s->words, strcspn(s->words, "|")) + "soon";
    }
    Read def = Get(id);
    EXPECT_EQ(Set(id, bad), "") << s->name << ": parsed on first read, not at start-up";
    Read first = Get(id), second = Get(id);
    std::string want = std::string(s->name) + "=" + bad + ": expected ";
    EXPECT_EQ(Lines(first.err), 1) << first.err;
    EXPECT_EQ(first.err.find(want), first.err.find("nicmalloc: warning: ") + 20) << first.err;
    std::string using_ = std::string("; using ") + (*s->def ? s->def : "the default") + "\n";
    EXPECT_NE(first.err.find(using_), std::string::npos) << first.err;
    EXPECT_EQ(second.err, "") << s->name;
    EXPECT_FALSE(first.given) << s->name;
    EXPECT_EQ(first.number, def.number) << s->name;
    EXPECT_EQ(first.choice, def.choice) << s->name;
    EXPECT_EQ(first.has_text, def.has_text) << s->name;
    unsetenv(s->name);
    checked++;
  }
  EXPECT_GT(checked, 30);
}

TEST_F(Settings, ManyThreadsReadingABadValueGiveOneWarning) {
  Set(NIC_S_SITES_HEADROOM, "lots");
  testing::internal::CaptureStderr();
  std::vector<std::thread> readers;
  for (int t = 0; t < 8; t++)
    readers.emplace_back([] { EXPECT_EQ(nic_setting_number(NIC_S_SITES_HEADROOM), 2u); });
  for (auto &r : readers)
    r.join();
  EXPECT_EQ(Lines(testing::internal::GetCapturedStderr()), 1);
}

// Both ends of a range are taken; one past either end is refused, with the default.
TEST_F(Settings, RangesTakeTheirEndsAndRefuseWhatLiesOutside) {
  int checked = 0;
  for (int i = 0; i < NIC_S_COUNT; i++) {
    const nic_setting_info *s = Info(i);
    auto id = static_cast<nic_setting>(i);
    if (!IsNumber(s->type)) continue;
    Read def = Get(id);
    for (uint64_t end : {s->min, s->max}) {
      if (end == UINT64_MAX) continue;
      Set(id, Number(end));
      Read r = Get(id);
      EXPECT_EQ(r.err, "") << s->name << "=" << end;
      EXPECT_EQ(r.number, end) << s->name;
      EXPECT_TRUE(r.given) << s->name;
    }
    std::vector<std::string> outside;
    if (s->min > 0) outside.push_back(Number(s->min - 1));
    if (s->max < UINT64_MAX)
      outside.push_back(Number(s->max + 1));
    else
      outside.push_back("99999999999999999999"); // past 2^64: not wrapped around
    for (const std::string &v : outside) {
      Set(id, v);
      Read r = Get(id);
      EXPECT_EQ(Lines(r.err), 1) << s->name << "=" << v << ": " << r.err;
      EXPECT_EQ(r.number, def.number) << s->name << "=" << v;
      EXPECT_FALSE(r.given) << s->name << "=" << v;
    }
    unsetenv(s->name);
    checked++;
  }
  EXPECT_GT(checked, 20);
}

TEST_F(Settings, SizesTakeSuffixesAndPowersOfTwoRefuseOthers) {
  Set(NIC_S_HUGE_CACHE_BYTES, "64M");
  EXPECT_EQ(Get(NIC_S_HUGE_CACHE_BYTES).number, 64u << 20);
  Set(NIC_S_CHUNK_SIZE, "64MiB");
  EXPECT_EQ(Get(NIC_S_CHUNK_SIZE).number, 64u << 20);
  Set(NIC_S_CHUNK_SIZE, "48M");
  Read r = Get(NIC_S_CHUNK_SIZE);
  EXPECT_EQ(r.number, 1u << 30);
  EXPECT_NE(r.err.find("NICMALLOC_CHUNK_SIZE=48M: expected a power of two from 32M to 1G"),
            std::string::npos)
      << r.err;
  Set(NIC_S_MAX_CHUNKS, "4K"); // counts take no unit: the default
  EXPECT_EQ(Get(NIC_S_MAX_CHUNKS).number, 48u);
}

// The values that mean something besides their number keep that meaning.
TEST_F(Settings, SpecialValuesKeepTheirMeaning) {
  Set(NIC_S_DP_MIN_SIZE, "0");
  Read off = Get(NIC_S_DP_MIN_SIZE);
  EXPECT_TRUE(off.given);
  EXPECT_EQ(off.number, 0u);
  // off records no site; 0 records every block.
  Set(NIC_S_FENCE_DETECT_SAMPLE, "off");
  EXPECT_EQ(Get(NIC_S_FENCE_DETECT_SAMPLE).choice, 0);
  Set(NIC_S_FENCE_DETECT_SAMPLE, "0");
  Read every = Get(NIC_S_FENCE_DETECT_SAMPLE);
  EXPECT_EQ(every.choice, -1);
  EXPECT_EQ(every.number, 0u);
  Set(NIC_S_FENCE_DETECT_SAMPLE, "1M");
  EXPECT_EQ(Get(NIC_S_FENCE_DETECT_SAMPLE).number, 1u << 20);
  // fixed:<microseconds> or a file.
  Set(NIC_S_SIM_DELAYS, "fixed:20");
  Read fixed = Get(NIC_S_SIM_DELAYS);
  EXPECT_EQ(fixed.choice, 0);
  EXPECT_EQ(fixed.number, 20u);
  EXPECT_FALSE(fixed.has_text);
  Set(NIC_S_SIM_DELAYS, "/var/tmp/delays");
  Read file = Get(NIC_S_SIM_DELAYS);
  EXPECT_EQ(file.choice, -1);
  EXPECT_EQ(file.text, "/var/tmp/delays");
  // An empty path is unset, not the current directory.
  Read empty = (Set(NIC_S_PROFILE, ""), Get(NIC_S_PROFILE));
  EXPECT_FALSE(empty.has_text);
  EXPECT_FALSE(empty.given);
  EXPECT_EQ(empty.err, "");
  // auto is a choice like the kinds it stands for.
  Set(NIC_S_PAGE_KIND, "auto");
  EXPECT_EQ(Get(NIC_S_PAGE_KIND).choice, 0);
  Set(NIC_S_PAGE_KIND, "thp");
  EXPECT_EQ(Get(NIC_S_PAGE_KIND).choice, 3);
  for (const char *yes : {"1", "yes", "on", "true"}) {
    Set(NIC_S_VERBOSE, yes);
    EXPECT_EQ(Get(NIC_S_VERBOSE).number, 1u) << yes;
  }
  // NICMALLOC_STATS: the boolean spellings, then json (config.c maps them by position).
  Set(NIC_S_STATS, "on");
  EXPECT_EQ(Get(NIC_S_STATS).choice, 6);
  Set(NIC_S_STATS, "json");
  EXPECT_EQ(Get(NIC_S_STATS).choice, 8);
  for (const char *no : {"0", "no", "off", "false"}) {
    Set(NIC_S_FREE_CHECK, no);
    EXPECT_EQ(Get(NIC_S_FREE_CHECK).number, 0u) << no;
  }
  EXPECT_TRUE((Set(NIC_S_BACKEND, "uring"), nic_setting_is(NIC_S_BACKEND, "uring")));
  EXPECT_FALSE(nic_setting_is(NIC_S_BACKEND, "sim"));
  EXPECT_FALSE(nic_setting_is(NIC_S_BACKEND, "urin"));
}

// The modules map these words by their position in the table: a new word goes at the end, or
// the module's map changes with it.
TEST(SettingsWords, TheWordsModulesMapByPositionAreInTheirOrder) {
  EXPECT_STREQ(nic_setting_row(NIC_S_PAGE_KIND)->words, "auto|1g|2m|thp|4k");       // config.c
  EXPECT_STREQ(nic_setting_row(NIC_S_ON_PIN_FAIL)->words, "fallback|fail");         // config.c
  EXPECT_STREQ(nic_setting_row(NIC_S_BACKEND)->words, "auto|sim|uring|verbs|dpdk"); // backend.c
  EXPECT_STREQ(nic_setting_row(NIC_S_FENCE)->words, "off|wait|protect|detect");     // safety
  EXPECT_STREQ(nic_setting_row(NIC_S_FENCE_PROTECT)->words, "auto|uffd|mprotect");  // fence.c
  EXPECT_STREQ(nic_setting_row(NIC_S_REALLOC_INFLIGHT)->words, "move|wait");        // safety
  EXPECT_STREQ(nic_setting_row(NIC_S_FENCE_DETECT_SAMPLE)->words, "off");           // fence.c
  EXPECT_STREQ(nic_setting_row(NIC_S_SIM_DELAYS)->words, "fixed:");                 // sim_nic.c
  EXPECT_STREQ(nic_setting_row(NIC_S_SIM_TCACHE)->words, "tiny|cx4|cx5|cx6dx|bluefield2");
  EXPECT_STREQ(nic_setting_row(NIC_S_STATS)->words,
               "0|no|off|false|1|yes|on|true|json"); // config.c
}

// Secure execution: every setting its default, and no warning for the values it ignores.
TEST_F(Settings, SecureExecutionReadsEveryDefault) {
  setenv("NICMALLOC_CHUNK_SIZE", "48M", 1);
  setenv("NICMALLOC_FENCE", "off", 1);
  testing::internal::CaptureStderr();
  nic_settings_reload(true);
  testing::internal::GetCapturedStderr();
  Read chunk = Get(NIC_S_CHUNK_SIZE), fence = Get(NIC_S_FENCE);
  EXPECT_EQ(chunk.err + fence.err, "");
  EXPECT_EQ(chunk.number, 1u << 30);
  EXPECT_EQ(fence.choice, 1); // wait
  EXPECT_FALSE(fence.given);
}

} // namespace
