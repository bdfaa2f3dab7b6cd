#include "command/capture.h"

#include <unistd.h>

#include "common/files.h"
#include "common/sha256.h"
#include "gtest/gtest.h"

namespace airlock {
namespace {

TEST(CaptureTest, KeepsUpToTheCapAndCountsEverything) {
  char path[] = "/tmp/airlock-capture-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  OutputCapture cap(fd, 10, 4);
  cap.Add(OutputCapture::kStdout, "hello ");
  cap.Add(OutputCapture::kStderr, "world!!");
  cap.Add(OutputCapture::kStdout, "more");
  close(fd);
  EXPECT_TRUE(cap.truncated());
  EXPECT_EQ(cap.bytes(OutputCapture::kStdout), 10);
  EXPECT_EQ(cap.bytes(OutputCapture::kStderr), 7);
  EXPECT_EQ(*ReadFile(path), "hello worl");
  EXPECT_EQ(cap.FinishSha256(OutputCapture::kStdout), Sha256Hex("hello more"));
  unlink(path);
}

TEST(CaptureTest, PreviewIsHeadAndTail) {
  OutputCapture cap(-1, 0, 4);
  cap.Add(OutputCapture::kStdout, "abc");
  EXPECT_EQ(cap.Preview(OutputCapture::kStdout), "abc");
  cap.Add(OutputCapture::kStdout, "defg");  // 7 bytes: head and tail overlap
  EXPECT_EQ(cap.Preview(OutputCapture::kStdout), "abcdefg");
  for (int i = 0; i < 100; ++i) cap.Add(OutputCapture::kStdout, "x");
  cap.Add(OutputCapture::kStdout, "WXYZ");
  EXPECT_EQ(cap.Preview(OutputCapture::kStdout), "abcd\n[... 103 bytes omitted ...]\nWXYZ");
  EXPECT_EQ(cap.Preview(OutputCapture::kStderr), "");
}

TEST(CaptureTest, ValidUtf8) {
  EXPECT_EQ(ToValidUtf8("plain"), "plain");
  EXPECT_EQ(ToValidUtf8("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(ToValidUtf8("bad\xff"), "bad\xef\xbf\xbd");
  EXPECT_EQ(ToValidUtf8("cut\xc3"), "cut\xef\xbf\xbd");
  EXPECT_EQ(ToValidUtf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");  // overlong '/'
  EXPECT_EQ(ToValidUtf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // surrogate
}

}  // namespace
}  // namespace airlock
