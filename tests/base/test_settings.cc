// Settings as the process started with them: copied, checked against the table of known names,
// and ignored whole in secure execution.
#include <gtest/gtest.h>

#include <dirent.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include "settings.h"
}

extern char **environ;

namespace {

std::string Reload(bool secure) {
  testing::internal::CaptureStderr();
  nic_settings_reload(secure);
  return testing::internal::GetCapturedStderr();
}

int Lines(const std::string &s) {
  int n = 0;
  for (char c : s)
    n += c == '\n';
  return n;
}

struct CleanEnv : testing::Test {
  void TearDown() override {
    for (const char *v : {"NICMALLOC_SIM_SEED", "NICMALLOC_PROFILE", "NICMALLOC_SITES",
                          "NICMALLOC_CHUNKSIZE", "NICMALLOC_FENSE", "NICMALLOC_DPDK_EAL_ARGS",
                          "NICMALLOC_SITE_TABLE_OUT", "NICMALLOC_ZZZ_NOTHING_LIKE_IT"})
      unsetenv(v);
    Reload(false);
  }
};

} // namespace

// nginx writes its process title over its environment strings: what we kept must not change.
TEST_F(CleanEnv, AValueIsCopiedNotPointedTo) {
  setenv("NICMALLOC_SITES", "/var/tmp/app.profile", 1);
  Reload(false);
  const char *kept = nic_getenv("NICMALLOC_SITES");
  ASSERT_NE(kept, nullptr);
  EXPECT_STREQ(kept, "/var/tmp/app.profile");
  for (char **e = environ; *e; e++)
    if (!strncmp(*e, "NICMALLOC_SITES=", 16)) memset(*e + 16, ':', strlen(*e + 16));
  EXPECT_STREQ(nic_getenv("NICMALLOC_SITES"), "/var/tmp/app.profile");
  EXPECT_NE(kept, getenv("NICMALLOC_SITES"));
}

TEST_F(CleanEnv, ASettingSetAfterStartUpIsNotSeenUntilReloaded) {
  unsetenv("NICMALLOC_SIM_SEED");
  Reload(false);
  setenv("NICMALLOC_SIM_SEED", "7", 1);
  EXPECT_EQ(nic_getenv("NICMALLOC_SIM_SEED"), nullptr);
  Reload(false);
  EXPECT_STREQ(nic_getenv("NICMALLOC_SIM_SEED"), "7");
}

TEST_F(CleanEnv, MisspellingsGetOneWarningWithTheNearestAndKnownNames) {
  setenv("NICMALLOC_CHUNKSIZE", "64M", 1);
  setenv("NICMALLOC_FENSE", "protect", 1);
  setenv("NICMALLOC_ZZZ_NOTHING_LIKE_IT", "1", 1);
  std::string err = Reload(false);
  EXPECT_EQ(Lines(err), 1) << err;
  EXPECT_NE(err.find("NICMALLOC_CHUNKSIZE (did you mean NICMALLOC_CHUNK_SIZE?)"), std::string::npos)
      << err;
  EXPECT_NE(err.find("NICMALLOC_FENSE (did you mean NICMALLOC_FENCE?)"), std::string::npos) << err;
  EXPECT_NE(err.find("NICMALLOC_ZZZ_NOTHING_LIKE_IT"), std::string::npos) << err;
  EXPECT_EQ(err.find("NICMALLOC_ZZZ_NOTHING_LIKE_IT (did"), std::string::npos) << err;
  EXPECT_NE(err.find("known settings:"), std::string::npos) << err;
  EXPECT_NE(err.find(" NICMALLOC_VERBS_ODP"), std::string::npos) << err;
}

TEST_F(CleanEnv, TheBuildToolsVariablesAreNoMisspellings) {
  setenv("NICMALLOC_SITE_TABLE_OUT", "/tmp/sites.jsonl", 1);
  EXPECT_EQ(Reload(false), "");
}

TEST_F(CleanEnv, SecureExecutionIgnoresEverySettingWithOneLine) {
  setenv("NICMALLOC_PROFILE", "/root/x", 1);
  setenv("NICMALLOC_DPDK_EAL_ARGS", "-d /home/user/evil.so", 1);
  setenv("NICMALLOC_SIM_SEED", "7", 1);
  std::string err = Reload(true);
  EXPECT_TRUE(nic_secure_execution());
  EXPECT_EQ(nic_getenv("NICMALLOC_PROFILE"), nullptr);
  EXPECT_EQ(nic_getenv("NICMALLOC_DPDK_EAL_ARGS"), nullptr);
  EXPECT_EQ(nic_getenv("NICMALLOC_SIM_SEED"), nullptr);
  EXPECT_EQ(Lines(err), 1) << err;
  EXPECT_NE(err.find("secure execution"), std::string::npos) << err;
  for (const char *v : {"NICMALLOC_PROFILE", "NICMALLOC_DPDK_EAL_ARGS", "NICMALLOC_SIM_SEED"})
    EXPECT_NE(err.find(v), std::string::npos) << err;
  EXPECT_EQ(err.find("evil.so"), std::string::npos) << "values are not echoed: " << err;
  Reload(false);
  EXPECT_FALSE(nic_secure_execution());
}

// A process can be handed two entries of one name; getenv answers with the first.
TEST_F(CleanEnv, TheFirstOfTwoEntriesWinsAsWithGetenv) {
  static char first[] = "NICMALLOC_SIM_SEED=11", second[] = "NICMALLOC_SIM_SEED=22";
  char **saved = environ;
  char *two[] = {first, second, nullptr};
  environ = two;
  Reload(false);
  environ = saved;
  EXPECT_STREQ(nic_getenv("NICMALLOC_SIM_SEED"), "11");
}

TEST_F(CleanEnv, SecureExecutionWithNoSettingSaysNothing) {
  EXPECT_EQ(Reload(true), "");
}

// Every setting is read through the table's typed values (settings.h): no runtime source reads
// a NICMALLOC_* variable itself, nor the raw copy, so none can parse, default or warn its own way.
TEST(SettingsTable, NoModuleReadsTheEnvironmentOrTheRawText) {
  std::regex own_read(R"re((getenv\s*\(\s*"NICMALLOC_|nic_getenv\s*\())re");
  std::vector<std::string> dirs{"alloc", "regcache", "safety"}, offenders;
  size_t files = 0;
  while (!dirs.empty()) {
    std::string rel = dirs.back(), path = std::string(NIC_SOURCE_DIR) + "/" + rel;
    dirs.pop_back();
    DIR *d = opendir(path.c_str());
    ASSERT_NE(d, nullptr) << path;
    while (struct dirent *e = readdir(d)) {
      std::string f = e->d_name;
      if (f == "." || f == "..") continue;
      if (e->d_type == DT_DIR) {
        dirs.push_back(rel + "/" + f);
        continue;
      }
      if (f.size() < 3 || f.compare(f.size() - 2, 2, ".c")) continue;
      // The one reader: the copy, and the parser of what it copied.
      if (rel + "/" + f == "alloc/base/settings.c" ||
          rel + "/" + f == "alloc/base/settings_value.c")
        continue;
      files++;
      std::ifstream in(path + "/" + f);
      std::stringstream all;
      all << in.rdbuf();
      std::string text = all.str();
      if (std::regex_search(text, own_read)) offenders.push_back(rel + "/" + f);
    }
    closedir(d);
  }
  EXPECT_GT(files, 50u) << "the scan found the runtime's sources";
  EXPECT_TRUE(offenders.empty()) << testing::PrintToString(offenders);
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_getenv("NICMALLOC_NOT_DECLARED"), nullptr);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("not declared"), std::string::npos);
}
