#include "common/text.h"

#include "gtest/gtest.h"

namespace airlock {
namespace {

TEST(TextTest, HexDigitValues) {
  EXPECT_EQ(HexDigitValue('0'), 0);
  EXPECT_EQ(HexDigitValue('9'), 9);
  EXPECT_EQ(HexDigitValue('a'), 10);
  EXPECT_EQ(HexDigitValue('F'), 15);
  for (char c : {'g', 'G', '/', ':', '@', '`', ' ', '\0'}) EXPECT_EQ(HexDigitValue(c), -1) << c;
}

TEST(TextTest, Utf8MustBeWellFormedAndShortest) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));   // U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xc0\xae"));          // overlong '.'
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xae"));      // overlong '.', three bytes
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // a UTF-16 surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // beyond U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xc3"));              // cut short
  EXPECT_FALSE(IsValidUtf8("\x80"));              // a lone continuation byte
  EXPECT_FALSE(IsValidUtf8("\xff"));
}

}  // namespace
}  // namespace airlock
