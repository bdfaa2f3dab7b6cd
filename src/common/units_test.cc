#include "common/units.h"

#include "gtest/gtest.h"

namespace airlock {
namespace {

TEST(UnitsTest, ParsesBytes) {
  EXPECT_EQ(*ParseBytes("1024"), 1024);
  EXPECT_EQ(*ParseBytes("512M"), 512LL << 20);
  EXPECT_EQ(*ParseBytes("512MiB"), 512LL << 20);
  EXPECT_EQ(*ParseBytes("2g"), 2LL << 30);
  EXPECT_EQ(*ParseBytes("1.5K"), 1536);
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("-1M").ok());
  EXPECT_FALSE(ParseBytes("12Q").ok());
  EXPECT_FALSE(ParseBytes("1e400").ok());
  EXPECT_NE(ParseBytes("12Q").status().message().find("12Q"), std::string::npos);
}

TEST(UnitsTest, ParsesDurations) {
  EXPECT_EQ(ParseDuration("30s")->count(), 30000);
  EXPECT_EQ(ParseDuration("30")->count(), 30000);
  EXPECT_EQ(ParseDuration("250ms")->count(), 250);
  EXPECT_EQ(ParseDuration("2m")->count(), 120000);
  EXPECT_EQ(ParseDuration("1.5s")->count(), 1500);
  EXPECT_FALSE(ParseDuration("soon").ok());
  EXPECT_FALSE(ParseDuration("5d").ok());
}

TEST(UnitsTest, FormatsBytes) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(3LL << 30), "3.0 GiB");
}

}  // namespace
}  // namespace airlock
