#include "command/capture.h"

#include <fcntl.h>
#include <unistd.h>

#include "command/finish.h"
#include "common/files.h"
#include "common/sha256.h"
#include "gtest/gtest.h"

namespace airlock {
namespace {

// The raw file is redacted stream by stream: a secret printed in two writes on stdout with a line
// of stderr between them is still found. Writing the raw file failed (its descriptor here is
// read-only), so its last record, cut short by that failure, may end inside a secret: that end
// is redacted, and the log ends there.
TEST(FinishOutputTest, RedactsEachStreamOnItsOwnAndAFailedWritesEnd) {
  char dir[] = "/tmp/airlock-finish-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string raw = std::string(dir) + "/raw", log = std::string(dir) + "/log";
  // The records as OutputCapture writes them, the last one cut after 4 of its 12 bytes.
  std::string records;
  auto record = [&](OutputCapture::Stream stream, std::string_view bytes, uint32_t length) {
    OutputCapture::AppendRecordHeader(stream, length, &records);
    records += bytes;
  };
  record(OutputCapture::kStdout, "key s3cr3t-Va", 13);
  record(OutputCapture::kStderr, "E\n", 2);
  record(OutputCapture::kStdout, "lue here\n", 9);
  record(OutputCapture::kStdout, "s3cr", 12);
  ASSERT_TRUE(WriteFileAtomic(raw, records, 0600).ok());
  int read_only = open(raw.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(read_only, 0);
  OutputCapture capture(read_only, 1 << 20);
  capture.Add(OutputCapture::kStdout, "key s3cr3t-Va");  // fails to write: status() is the error
  close(read_only);
  ASSERT_FALSE(capture.status().ok());
  absl::StatusOr<Redactor> redactor = Redactor::Create({"s3cr3t-Value"});
  ASSERT_TRUE(redactor.ok()) << redactor.status();
  CommandResult result;
  ASSERT_TRUE(FinishOutput({.argv = {"x"}}, *redactor, capture, raw, log, &result).ok());
  std::string text = ReadFile(log).value_or("");
  // (With a cut, each stream's end waits for the end of all: stderr's line comes after.)
  EXPECT_EQ(text, "key [REDACTED:secret] here\n[REDACTED:secret]E\n") << text;
  ASSERT_TRUE(RemoveTree(dir).ok());
}

// The violations' data (a refused host name, mixed case and lowercased as the proxy reports it,
// or cut by the proxy with "..."), the lines the network verdict adds and the error come from the
// sandbox as its output does: a registered secret and a detected token in any of them are
// redacted. A denied call's violation is left as the supervisor redacted it.
TEST(FinishOutputTest, RedactsTheResultsStructuredFields) {
  const std::string secret = "Hunter2SecretValue99";
  const std::string token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";
  absl::StatusOr<Redactor> redactor = Redactor::Create({secret});
  ASSERT_TRUE(redactor.ok()) << redactor.status();
  CommandResult r;
  r.violations.push_back({"BlockedNetworkEgress",
                          "blocked " + secret + ".example.com",
                          {{"host", "hunter2secretvalue99.example.com"},
                           {"cut", "x.example.com." + secret.substr(0, 9) + "..."},
                           {"nested", {{"list", {token, 7}}}}}});
  r.violations.push_back({kSyscallViolation, "mkdir denied", {{"path", "/tmp/abcdefghijk..."}}});
  r.failure_detail = secret + ".example.com:443";
  r.key_lines = {"network required: " + secret + ".example.com:443 was refused"};
  r.error = "open /tmp/" + secret + ": No such file";

  RedactResultFields(*redactor, &r);
  const std::string json = ToJson(r).dump();
  EXPECT_EQ(json.find(secret), std::string::npos) << json;
  EXPECT_EQ(json.find("hunter2secretvalue99"), std::string::npos) << json;
  EXPECT_EQ(json.find(secret.substr(0, 9)), std::string::npos) << json;
  EXPECT_EQ(json.find("abcdefghijklmnop"), std::string::npos) << json;
  EXPECT_EQ(r.violations[0].data["host"], "[REDACTED:secret].example.com");
  EXPECT_EQ(r.violations[0].data["nested"]["list"][1], 7);
  EXPECT_EQ(r.violations[1].data["path"], "/tmp/abcdefghijk...");
  EXPECT_EQ(r.failure_detail, "[REDACTED:secret].example.com:443");
  EXPECT_EQ(r.error, "open /tmp/[REDACTED:secret]: No such file");
}

// What the supervisor decodes is redacted before the report keeps it (and cuts it to its
// bounds) or a streaming consumer sees it: a secret in an argument, a path, an address; a string
// the decoder cut ("...") loses the start of a secret it ends with; a long path is not taken for
// a secret by its length alone once redacted and then cut to the report's bound.
TEST(SyscallReportTest, DecodedStringsAreRedactedBeforeTheyAreCut) {
  const std::string secret = "Hunter2SecretValue99";
  absl::StatusOr<Redactor> redactor = Redactor::Create({secret});
  ASSERT_TRUE(redactor.ok()) << redactor.status();
  SyscallEvent exec = {.kind = SyscallEventKind::kExec,
                       .syscall = "execve",
                       .path = "/bin/echo",
                       .argv = {"echo", secret, "x:" + secret.substr(0, 9) + "..."}};
  RedactSyscallEvent(*redactor, &exec);
  EXPECT_EQ(exec.argv,
            (std::vector<std::string>{"echo", "[REDACTED:secret]", "x:[REDACTED:secret]..."}));
  SyscallEvent open = {.kind = SyscallEventKind::kFileOpened,
                       .syscall = "openat",
                       .path = "/srv/" + std::string(600, 'a') + "/" + secret,
                       .mode = "r"};
  RedactSyscallEvent(*redactor, &open);
  SyscallReportBuilder b("notify");
  b.Add(open);
  SyscallReport report = b.Build({});
  ASSERT_EQ(report.files.size(), 1u);
  EXPECT_EQ(report.files[0].path,
            "/srv/" + std::string(SyscallReport::kMaxPathBytes - 5, 'a') + "...");
}

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
  // Records: stream, length (little-endian), bytes.
  EXPECT_EQ(*ReadFile(path), std::string("\0\6\0\0\0hello \1\4\0\0\0worl", 20));
  EXPECT_EQ(cap.FinishSha256(OutputCapture::kStdout), Sha256Hex("hello more"));
  unlink(path);
}

TEST(CaptureTest, RawLogIsOpenedWithTheFirstKeptByteOnly) {
  char path[] = "/tmp/airlock-capture-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  int opened = 0;
  OutputCapture cap(
      [&]() -> absl::StatusOr<int> {
        ++opened;
        return fd;
      },
      10);
  cap.Add(OutputCapture::kStdout, "");
  EXPECT_EQ(opened, 0) << "nothing to keep yet: no file";
  cap.Add(OutputCapture::kStdout, "hello ");
  cap.Add(OutputCapture::kStderr, "world!!");
  cap.Add(OutputCapture::kStdout, "more");
  EXPECT_EQ(opened, 1);
  EXPECT_TRUE(cap.status().ok()) << cap.status();
  close(fd);
  EXPECT_EQ(*ReadFile(path), std::string("\0\6\0\0\0hello \1\4\0\0\0worl", 20));
  unlink(path);
}

TEST(CaptureTest, RawLogThatCannotBeOpenedIsTheCapturesError) {
  OutputCapture cap([]() -> absl::StatusOr<int> { return absl::PermissionDeniedError("create x"); },
                    10);
  cap.Add(OutputCapture::kStdout, "out");
  EXPECT_EQ(cap.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(cap.bytes(OutputCapture::kStdout), 3);  // counting and previews go on
  EXPECT_EQ(cap.Preview(OutputCapture::kStdout), "out");
}

TEST(CaptureTest, PreviewIsHeadAndTail) {
  OutputCapture cap(-1, 0, 4, 2);
  cap.Add(OutputCapture::kStdout, "abc");
  EXPECT_EQ(cap.Preview(OutputCapture::kStdout), "abc");
  cap.Add(OutputCapture::kStdout, "defg");  // 7 bytes: head and tail overlap
  EXPECT_EQ(cap.Preview(OutputCapture::kStdout), "abcdefg");
  for (int i = 0; i < 100; ++i) cap.Add(OutputCapture::kStdout, "x");
  cap.Add(OutputCapture::kStdout, "WXYZ");
  EXPECT_EQ(cap.Preview(OutputCapture::kStdout), "abcd\n[... 103 bytes omitted ...]\nWXYZ");
}

TEST(CaptureTest, RedactionSeesSecretsAcrossThePreviewEdge) {
  // A secret that straddles the 8-byte cut of the head: redacting only the cut head would leave
  // "SEC" visible; redacting with context removes it whole.
  OutputCapture cap(-1, 0, 8, 16);
  cap.Add(OutputCapture::kStdout, "12345SECRETVALUE");
  for (int i = 0; i < 100; ++i) cap.Add(OutputCapture::kStdout, "-");
  cap.Add(OutputCapture::kStdout, "SECRETVALUE.end");
  auto redact = [](std::string_view t, bool, bool) {
    std::string s(t);
    for (size_t pos; (pos = s.find("SECRETVALUE")) != std::string::npos;) s.replace(pos, 11, "#");
    return s;
  };
  std::string p = cap.Preview(OutputCapture::kStdout, redact);
  EXPECT_EQ(p.find("SEC"), std::string::npos) << p;
  EXPECT_EQ(p.rfind("12345#", 0), 0u) << p;
  EXPECT_EQ(cap.Preview(OutputCapture::kStderr), "");
}

TEST(CaptureTest, ValidUtf8) {
  EXPECT_EQ(ToValidUtf8("plain"), "plain");
  EXPECT_EQ(ToValidUtf8("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(ToValidUtf8("bad\xff"), "bad\xef\xbf\xbd");
  EXPECT_EQ(ToValidUtf8("cut\xc3"), "cut\xef\xbf\xbd");
  EXPECT_EQ(ToValidUtf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");                  // overlong '/'
  EXPECT_EQ(ToValidUtf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // surrogate
}

}  // namespace
}  // namespace airlock
