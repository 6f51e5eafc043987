// The settings parser: sizes with suffixes, booleans, and rejection of bad text.
#include <gtest/gtest.h>

extern "C" {
#include "settings.h"
}

TEST(ParseSize, AcceptsPlainAndSuffixedSizes) {
  size_t v = 0;
  EXPECT_TRUE(nic_parse_size("4096", &v));
  EXPECT_EQ(v, 4096u);
  EXPECT_TRUE(nic_parse_size("64M", &v));
  EXPECT_EQ(v, 64u << 20);
  EXPECT_TRUE(nic_parse_size("1G", &v));
  EXPECT_EQ(v, 1u << 30);
  EXPECT_TRUE(nic_parse_size("2KiB", &v));
  EXPECT_EQ(v, 2048u);
  EXPECT_TRUE(nic_parse_size("0", &v));
  EXPECT_EQ(v, 0u);
}

TEST(ParseSize, RejectsGarbageNegativeAndOverflow) {
  size_t v = 7;
  EXPECT_FALSE(nic_parse_size("", &v));
  EXPECT_FALSE(nic_parse_size("abc", &v));
  EXPECT_FALSE(nic_parse_size("-5", &v));
  EXPECT_FALSE(nic_parse_size("12Q", &v));
  EXPECT_FALSE(nic_parse_size("64M extra", &v));
  EXPECT_FALSE(nic_parse_size("99999999999999999999", &v));
  EXPECT_FALSE(nic_parse_size("17179869184G", &v));
  // strtoull skips blanks and negates: " -1" must not become 2^64 - 1.
  EXPECT_FALSE(nic_parse_size(" -1", &v));
  EXPECT_FALSE(nic_parse_size("\t-4096", &v));
  EXPECT_FALSE(nic_parse_size(" 4096", &v));
  EXPECT_FALSE(nic_parse_size("+4096", &v));
  EXPECT_FALSE(nic_parse_size("4096iB", &v)) << "i only after a unit";
  EXPECT_FALSE(nic_parse_size("4096b", &v)) << "b would read as bits";
  EXPECT_EQ(v, 7u) << "a rejected value must leave the output alone";
}

TEST(ParseCount, DigitsOnly) {
  size_t v = 7;
  EXPECT_TRUE(nic_parse_count("250", &v));
  EXPECT_EQ(v, 250u);
  EXPECT_FALSE(nic_parse_count("2K", &v)) << "milliseconds and counts take no unit";
  EXPECT_FALSE(nic_parse_count(" -1", &v));
  EXPECT_FALSE(nic_parse_count("", &v));
  EXPECT_FALSE(nic_parse_count("1.5", &v));
  EXPECT_EQ(v, 250u);
}

TEST(ParseBool, AcceptsCommonSpellingsOnly) {
  bool b = false;
  EXPECT_TRUE(nic_parse_bool("1", &b));
  EXPECT_TRUE(b);
  EXPECT_TRUE(nic_parse_bool("off", &b));
  EXPECT_FALSE(b);
  EXPECT_FALSE(nic_parse_bool("maybe", &b));
  EXPECT_FALSE(nic_parse_bool(nullptr, &b));
}
