#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/files.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "redact/internal/test_helpers.h"
#include "redact/redactor.h"

namespace airlock {
namespace {

using redact_testing::Make;
using redact_testing::Tok;
using ::testing::HasSubstr;
using ::testing::Not;

// Streams `text` cut at `cuts` (ascending offsets) and returns the output; with `flush`, flushes
// after every piece as live output does.
std::string StreamInPieces(const Redactor& r, std::string_view text,
                           const std::vector<size_t>& cuts, bool flush = false) {
  StreamRedactor stream(r);
  std::string out;
  size_t pos = 0;
  for (size_t cut : cuts) {
    stream.Write(text.substr(pos, cut - pos), &out);
    if (flush) stream.Flush(&out);
    pos = cut;
  }
  stream.Write(text.substr(pos), &out);
  if (flush) stream.Flush(&out);
  stream.Finish(&out);
  return out;
}

TEST(StreamRedactorTest, ExplicitValueSplitAtEveryPoint) {
  const std::string secret = "s3cr3t-lease-value-0042";
  Redactor r = Make({secret});
  const std::string text = "before " + secret + " after";
  const std::string expected = "before [REDACTED:secret] after";
  ASSERT_EQ(r.Redact(text), expected);
  for (size_t i = 0; i <= text.size(); ++i) {
    EXPECT_EQ(StreamInPieces(r, text, {i}), expected) << "split at " << i;
    for (size_t j = i; j <= text.size(); j += 3) {
      EXPECT_EQ(StreamInPieces(r, text, {i, j}), expected) << "split at " << i << ", " << j;
    }
  }
}

TEST(StreamRedactorTest, FlushReleasesCompleteLinesAndHoldsThePartialOne) {
  Redactor r = Make({"unused-secret-value"});
  StreamRedactor stream(r);
  std::string out;
  stream.Write("line one\nline tw", &out);
  EXPECT_EQ(out, "") << "below the window nothing is released without a flush";
  stream.Flush(&out);
  EXPECT_EQ(out, "line one\n");
  EXPECT_EQ(stream.held_back(), 7u);
  stream.Write("o\n", &out);
  stream.Flush(&out);
  EXPECT_EQ(out, "line one\nline two\n");
  EXPECT_EQ(stream.held_back(), 0u);
}

TEST(StreamRedactorTest, FlushingAtEverySplitRedactsLikeTheWholeText) {
  const std::string secret = "flushed-lease-value-77";
  Redactor r = Make({secret});
  // A secret split across writes, a key token, and a private key block over several lines
  // (its lines end before the block does: a flush must not release them).
  const std::string text = "start\nvalue " + secret + " end\n" +
                           Tok("aws AKIA", "IOSFODNN7EXAMPLE\n") +
                           "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHC\n"
                           "ozMxH2Mo4lgOEePzNm0t\n-----END RSA PRIVATE KEY-----\ntail\n";
  const std::string expected = r.Redact(text);
  ASSERT_THAT(expected, Not(HasSubstr(secret)));
  ASSERT_THAT(expected, Not(HasSubstr("MIIEow")));
  for (size_t i = 0; i <= text.size(); ++i) {
    EXPECT_EQ(StreamInPieces(r, text, {i}, /*flush=*/true), expected) << "split at " << i;
    for (size_t j = i; j <= text.size(); j += 7) {
      EXPECT_EQ(StreamInPieces(r, text, {i, j}, /*flush=*/true), expected)
          << "split at " << i << ", " << j;
    }
  }
}

TEST(StreamRedactorTest, ByteAtATime) {
  const std::string secret = "byte-by-byte-secret";
  Redactor r = Make({secret});
  const std::string text = "x=" + secret + Tok("; AKIA", "IOSFODNN7EXAMPLE\n");
  std::vector<size_t> cuts;
  for (size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
  EXPECT_EQ(StreamInPieces(r, text, cuts), r.Redact(text));
}

// A text with one sample of every detector and an explicit value.
std::string Corpus() {
  return Tok("build ok\nexport AWS_ACCESS_KEY_ID=AKIA", "IOSFODNN7EXAMPLE\n") +
         Tok("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/", "bPxRfiCYEXAMPLEKEY\n") +
         Tok("push with ghp_", "u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8d done\n") +
         Tok("runner glrt-", "0B3JrTAwR4y9ojfljoQo\n") +
         Tok("xoxb-", "90786666176-0313721590109-jIg8xNbe3nNyjOq9wMxEhh2F\n") +
         Tok("id_token=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.",
             "eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig_x\n") +
         "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0t\n"
         "-----END RSA PRIVATE KEY-----\n"
         "Authorization: Bearer ya29.a0AfH6SMBxQ7-kLk9\n"
         "postgres://app:Zq8vR2pLw@db:5432/app\n"
         "password=Xk9#mQ2vLp and password=changeme\n"
         "explicit: the-registered-secret-77 end\n";
}

TEST(StreamRedactorTest, EveryDetectorSplitAtEveryPoint) {
  Redactor r = Make({"the-registered-secret-77"});
  const std::string text = Corpus();
  const std::string expected = r.Redact(text);
  EXPECT_THAT(expected, Not(HasSubstr("IOSFODNN7")));
  for (size_t i = 0; i <= text.size(); ++i) {
    ASSERT_EQ(StreamInPieces(r, text, {i}), expected) << "split at " << i;
  }
}

TEST(StreamRedactorTest, RandomChunkingsOfALongInputMatchOneShot) {
  Redactor r = Make({"the-registered-secret-77"});
  std::string text;
  std::mt19937 rng(42);
  while (text.size() < (1u << 20)) {
    text +=
        "[" + std::to_string(rng()) + "] compiling module " + std::to_string(rng() % 977) + "\n";
    if (rng() % 50 == 0) text += Corpus();
  }
  const std::string expected = r.Redact(text);
  for (int round = 0; round < 5; ++round) {
    std::vector<size_t> cuts;
    size_t pos = 0;
    while (true) {
      pos += 1 + rng() % (round < 2 ? 200 : 150000);
      if (pos >= text.size()) break;
      cuts.push_back(pos);
    }
    EXPECT_EQ(StreamInPieces(r, text, cuts), expected) << "round " << round;
  }
}

TEST(StreamRedactorTest, FindingsHaveStreamOffsets) {
  Redactor r = Make({"the-registered-secret-77"});
  std::string text;
  for (int i = 0; i < 40; ++i) text += std::string(5000, '.') + "\n" + Corpus();
  StreamRedactor stream(r);
  std::string out;
  for (size_t pos = 0; pos < text.size(); pos += 777) {
    stream.Write(std::string_view(text).substr(pos, 777), &out);
  }
  stream.Finish(&out);
  std::vector<Finding> whole = r.Scan(text);
  // The stream reports a span found by two detectors under each; compare the spans covered.
  std::vector<std::pair<size_t, size_t>> a, b;
  for (const Finding& f : whole) a.emplace_back(f.offset, f.length);
  for (const StreamFinding& f : stream.findings()) {
    b.emplace_back(f.offset, f.length);
    // Lines are counted in the raw stream, across every chunk released before.
    EXPECT_EQ(f.line, 1 + std::count(text.begin(), text.begin() + f.offset, '\n'))
        << "offset " << f.offset;
  }
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  std::sort(a.begin(), a.end());
  EXPECT_EQ(a, b);
  EXPECT_EQ(stream.bytes_in(), text.size());
}

TEST(StreamRedactorTest, NullOutputOnlyFinds) {
  Redactor r = Make({"the-registered-secret-77"});
  std::string text;
  for (int i = 0; i < 20; ++i) text += std::string(3000, 'x') + "\n" + Corpus();
  StreamRedactor redacting(r), scanning(r);
  std::string out;
  for (size_t pos = 0; pos < text.size(); pos += 1013) {
    std::string_view chunk = std::string_view(text).substr(pos, 1013);
    redacting.Write(chunk, &out);
    scanning.Write(chunk, nullptr);
  }
  redacting.Finish(&out);
  scanning.Finish(nullptr);
  EXPECT_FALSE(scanning.findings().empty());
  EXPECT_EQ(scanning.findings(), redacting.findings());
  EXPECT_EQ(scanning.finding_count(), redacting.finding_count());
  EXPECT_EQ(scanning.bytes_in(), text.size());
}

TEST(StreamRedactorTest, FailClosedFindingKeepsTheLineItStartedOn) {
  Redactor r = Make({});
  std::string text = "one\ntwo\nthree\n-----BEGIN RSA PRIVATE KEY-----\n";
  const uint64_t key_start = text.size() - 32;
  while (text.size() < 3 * r.stream_window()) text += "MIIEowIBAAKCAQEAx4fZ0q9Lr8Vb\n";
  text += "-----END RSA PRIVATE KEY-----\nafter\n";
  StreamRedactor stream(r);
  for (size_t pos = 0; pos < text.size(); pos += 4096) {
    stream.Write(std::string_view(text).substr(pos, 4096), nullptr);
  }
  stream.Finish(nullptr);
  ASSERT_EQ(stream.findings().size(), 1u);
  EXPECT_EQ(stream.findings()[0].kind, SecretKind::kPrivateKey);
  EXPECT_EQ(stream.findings()[0].offset, key_start);
  EXPECT_EQ(stream.findings()[0].line, 4u);
}

TEST(StreamRedactorTest, PrivateKeyLongerThanTheWindowFailsClosed) {
  Redactor r = Make({});
  const size_t window = r.stream_window();
  std::string text = "log start\n-----BEGIN OPENSSH PRIVATE KEY-----\n";
  const size_t key_start = 10;
  while (text.size() < 5 * window)
    text += "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAABlwAAAAdzc2gtcn\n";
  text += Tok("-----END OPENSSH PRIVATE KEY-----\nafter the key AKIA", "IOSFODNN7EXAMPLE\n");
  const std::string expected =
      "log start\n[REDACTED:private_key]\nafter the key "
      "[REDACTED:aws_access_key]\n";
  EXPECT_EQ(r.Redact(text), expected);
  for (size_t chunk : {size_t{1000}, size_t{4096}, window, window + 1, 3 * window}) {
    StreamRedactor stream(r);
    std::string out;
    for (size_t pos = 0; pos < text.size(); pos += chunk) {
      stream.Write(std::string_view(text).substr(pos, chunk), &out);
      EXPECT_LE(stream.held_back(), window);
    }
    stream.Finish(&out);
    EXPECT_EQ(out, expected) << "chunk " << chunk;
    ASSERT_GE(stream.findings().size(), 1u);
    EXPECT_EQ(stream.findings()[0].kind, SecretKind::kPrivateKey);
    EXPECT_EQ(stream.findings()[0].offset, key_start);
    EXPECT_EQ(stream.findings()[0].length, text.find("\nafter") - key_start);
  }
}

TEST(StreamRedactorTest, PrivateKeyEndLineSplitAcrossChunks) {
  Redactor r = Make({});
  const size_t window = r.stream_window();
  std::string text = "-----BEGIN PRIVATE KEY-----\n" + std::string(2 * window, 'Q') + "\n";
  const size_t end_line = text.size();
  text += "-----END PRIVATE KEY-----\nvisible\n";
  for (size_t split = end_line; split < end_line + 26; ++split) {
    EXPECT_EQ(StreamInPieces(r, text, {window, split}), "[REDACTED:private_key]\nvisible\n")
        << split;
  }
}

TEST(StreamRedactorTest, UnterminatedPrivateKeyIsRedactedToTheEnd) {
  Redactor r = Make({});
  const std::string text =
      "ok\n-----BEGIN EC PRIVATE KEY-----\n" + std::string(3 * r.stream_window(), 'Z');
  EXPECT_EQ(StreamInPieces(r, text, {100, 5000, 70000}), "ok\n[REDACTED:private_key]");
  EXPECT_EQ(StreamInPieces(r, "ok\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE", {10}),
            "ok\n[REDACTED:private_key]");
}

TEST(StreamRedactorTest, TokenLongerThanTheWindowFailsClosed) {
  Redactor r = Make({});
  const size_t window = r.stream_window();
  const std::string text = "token ghp_" + std::string(3 * window, 'a') + "B7 next words\n";
  EXPECT_EQ(r.Redact(text), "token [REDACTED:github_token] next words\n");
  EXPECT_EQ(StreamInPieces(r, text, {window / 2, window + 3, 2 * window}),
            "token [REDACTED:github_token] next words\n");
}

TEST(StreamRedactorTest, HugeInputInBoundedMemory) {
  Redactor r = Make({"the-registered-secret-77"});
  StreamRedactor stream(r);
  std::string block;
  while (block.size() < (1u << 20)) {
    block += "ld: warning: relocation in section .text has no effect; the-registered-secret-77\n";
  }
  const size_t per_block = r.Scan(block).size();
  std::string out;
  size_t max_out = 0;
  const int blocks = 96;  // 96 MiB
  for (int i = 0; i < blocks; ++i) {
    for (size_t pos = 0; pos < block.size(); pos += 65536) {
      out.clear();
      stream.Write(std::string_view(block).substr(pos, 65536), &out);
      max_out = std::max(max_out, out.size());
      ASSERT_LE(stream.held_back(), r.stream_window());
      ASSERT_EQ(out.find("registered"), std::string::npos);
    }
  }
  out.clear();
  stream.Finish(&out);
  EXPECT_EQ(stream.finding_count(), per_block * blocks);
  EXPECT_EQ(stream.findings().size(), 1024u);  // max_stream_findings
  EXPECT_LE(max_out, 65536 + r.stream_window());
}

TEST(StreamRedactorTest, RedactStreamCopiesBetweenDescriptors) {
  Redactor r = Make({"pipe-secret-value-1"});
  int in[2], out[2];
  ASSERT_EQ(pipe(in), 0);
  ASSERT_EQ(pipe(out), 0);
  UniqueFd in_read(in[0]), in_write(in[1]), out_read(out[0]), out_write(out[1]);
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i) + " pipe-secret-value-1\n";
  std::thread writer([&] {
    EXPECT_TRUE(WriteAll(in_write.get(), text).ok());
    in_write.Reset();
  });
  std::string result;
  std::thread reader([&] {
    char buf[8192];
    ssize_t n;
    while ((n = read(out_read.get(), buf, sizeof buf)) > 0) result.append(buf, n);
  });
  absl::Status status = RedactStream(r, in_read.get(), out_write.get());
  out_write.Reset();
  writer.join();
  reader.join();
  ASSERT_TRUE(status.ok()) << Message(status);
  EXPECT_EQ(result, r.Redact(text));
}

// A log kept up to its cap may end inside a registered secret (and its encodings): with
// cut_at_end the start of the secret left at the end is redacted, however long the input and
// wherever the cut falls; without it the input's end is left as it is.
TEST(StreamRedactorTest, RedactStreamRedactsASecretCutAtTheEnd) {
  const std::string secret = "cut-secret-value-0042";
  Redactor r = Make({secret});
  std::string body;
  for (int i = 0; i < 5000; ++i) body += "line " + std::to_string(i) + " " + secret + "\n";
  auto run = [&](const std::string& text, bool cut) {
    char path[] = "/tmp/airlock-redact-cut-XXXXXX";
    UniqueFd file(mkstemp(path));
    ::unlink(path);
    EXPECT_TRUE(WriteAll(file.get(), text).ok());
    ::lseek(file.get(), 0, SEEK_SET);
    int pipe_fds[2];
    EXPECT_EQ(pipe2(pipe_fds, 0), 0);
    UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
    std::string result;
    std::thread reader([&] {
      char buf[8192];
      ssize_t n;
      while ((n = read(read_end.get(), buf, sizeof buf)) > 0) result.append(buf, n);
    });
    EXPECT_TRUE(RedactStream(r, file.get(), write_end.get(), cut).ok());
    write_end.Reset();
    reader.join();
    return result;
  };
  for (size_t keep : {size_t{1}, size_t{7}, secret.size() - 1}) {
    std::string text = body + secret.substr(0, keep);
    std::string out = run(text, true);
    EXPECT_EQ(out, r.Redact(body) + "[REDACTED:secret]") << keep;
    EXPECT_EQ(run(text, false), r.Redact(body) + secret.substr(0, keep)) << keep;
  }
  // A whole secret at the end is an ordinary one; an end unlike any secret stays.
  EXPECT_EQ(run(body + secret, true), r.Redact(body) + "[REDACTED:secret]");
  EXPECT_EQ(run(body + "zzz", true), r.Redact(body) + "zzz");
}

TEST(StreamRedactorTest, RedactStreamReportsReadErrors) {
  Redactor r = Make({});
  absl::Status status = RedactStream(r, -1, 1);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(Message(status), HasSubstr("read input"));
}

}  // namespace
}  // namespace airlock
