#include "common/logging.h"

#include "gtest/gtest.h"

namespace airlock {
namespace {

TEST(LoggingTest, FieldsAreKeyValueWithQuoting) {
  EXPECT_EQ(FormatLogFields({{"sandbox", "sb-1"}, {"ms", 3}, {"ok", true}}),
            " sandbox=sb-1 ms=3 ok=true");
  EXPECT_EQ(FormatLogFields({{"msg", "two words"}, {"q", "a\"b"}}),
            " msg=\"two words\" q=\"a\\\"b\"");
  EXPECT_EQ(FormatLogFields({{"empty", ""}}), " empty=\"\"");
  EXPECT_EQ(FormatLogFields({{"ratio", 0.5}}), " ratio=0.500");
}

TEST(LoggingTest, SameComponentSameLogger) {
  const Logger& a = GetLogger("test-component");
  const Logger& b = GetLogger("test-component");
  EXPECT_EQ(&a, &b);
  SetLogLevel(LogLevel::kError);
  EXPECT_FALSE(a.Enabled(LogLevel::kInfo));
  EXPECT_TRUE(a.Enabled(LogLevel::kError));
  SetLogLevel(LogLevel::kWarn);
}

}  // namespace
}  // namespace airlock
