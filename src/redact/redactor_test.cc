#include "redact/redactor.h"

#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "redact/internal/test_helpers.h"

namespace airlock {
namespace {

using redact_testing::Make;
using redact_testing::Tok;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

TEST(RedactorTest, RedactsExplicitValues) {
  Redactor r = Make({"hunter2-lease-7731", "db-pass-9x8y7z"});
  EXPECT_EQ(r.Redact("login with hunter2-lease-7731 and db-pass-9x8y7z, twice: hunter2-lease-7731"),
            "login with [REDACTED:secret] and [REDACTED:secret], twice: [REDACTED:secret]");
  EXPECT_THAT(r.Scan("x hunter2-lease-7731"),
              ElementsAre(Finding{SecretKind::kExplicitValue, 2, 18}));
}

// A piece cut out of a longer output (a preview's window) may begin with the end of a secret
// or end with its start, even a secret longer than the piece; RedactCut redacts those parts.
TEST(RedactorTest, RedactCutRedactsTheCutPartsOfASecret) {
  const std::string secret = "abcdefgh-secret-12345";
  Redactor r = Make({secret});
  EXPECT_EQ(r.RedactCut("text ends abcdefgh-se", false, true), "text ends [REDACTED:secret]");
  EXPECT_EQ(r.RedactCut("text ends abcdefgh-se", false, false), "text ends abcdefgh-se");
  EXPECT_EQ(r.RedactCut("-12345 begins", true, false), "[REDACTED:secret] begins");
  EXPECT_EQ(r.RedactCut("-12345 begins", false, true), "-12345 begins");
  EXPECT_EQ(r.RedactCut("ret-12345 mid " + secret + " and a", true, true),
            "[REDACTED:secret] mid [REDACTED:secret] and [REDACTED:secret]");
  // A piece that is all end, or all start, of one secret.
  EXPECT_EQ(r.RedactCut("fgh-secret-12345", true, true), "[REDACTED:secret]");
  EXPECT_EQ(r.RedactCut("abcdefgh-s", true, true), "[REDACTED:secret]");
  EXPECT_EQ(r.RedactCut("no secret here", true, true), "no secret here");
  EXPECT_EQ(r.CutSecretAtEnd("xx abcd"), 4u);
  EXPECT_EQ(r.CutSecretAtEnd("xx abcdx"), 0u);
  // A detected format cut at the edge no longer matches its detector: a run of 8 or more token
  // characters there is taken for one (its 512 bytes nearest the cut at most); a shorter word
  // is left.
  EXPECT_EQ(r.CutSecretAtEnd("token: ghp_aBcDeFgHiJ"), 14u);
  EXPECT_EQ(r.CutSecretAtEnd("a short word"), 0u);
  EXPECT_EQ(r.CutSecretAtEnd("x " + std::string(1000, 'Q')), 512u);
  EXPECT_EQ(Make({}).RedactCut("glpat-aBcDeFgHiJ tail of a line", true, true),
            "[REDACTED:secret] tail of a line");
  EXPECT_EQ(Make({}).RedactCut("a line that ends in xoxb-12345678", false, true),
            "a line that ends in [REDACTED:secret]");
  // A secret longer than the piece.
  const std::string long_secret = "L0ng-" + std::string(9000, 'q') + "-end";
  Redactor l = Make({long_secret});
  std::string piece = std::string(100, 'z') + long_secret.substr(0, 5000);
  EXPECT_EQ(l.RedactCut(piece, false, true), std::string(100, 'z') + "[REDACTED:secret]");
  EXPECT_EQ(Make({}).RedactCut("plain", true, true), "plain");
  // A whole secret at the edge whose own end starts a registered value is redacted whole.
  Redactor w = Make({"s3cr3t-value-xyzs"});
  EXPECT_EQ(w.RedactCut("log: s3cr3t-value-xyzs", false, true), "log: [REDACTED:secret]");
  Redactor pem = Make({"-----abc-secret-----"});
  EXPECT_EQ(pem.RedactCut("-----abc-secret----- after", true, false), "[REDACTED:secret] after");
}

TEST(RedactorTest, RefusesShortValuesWithoutEchoingThem) {
  absl::StatusOr<Redactor> r = Redactor::Create({"long-enough-value", "abc123"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(r.status()), HasSubstr("secret value #1 is 6 bytes long; the minimum is 8"));
  EXPECT_THAT(Message(r.status()), Not(HasSubstr("abc123")));

  EXPECT_FALSE(Redactor::Create({""}).ok());
  RedactorOptions options;
  options.min_secret_length = 6;
  EXPECT_TRUE(Redactor::Create({"abc123"}, options).ok());
  options.min_secret_length = 2;
  EXPECT_EQ(Redactor::Create({}, options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RedactorTest, DuplicateAndPrefixValues) {
  Redactor r = Make({"abcdefgh", "abcdefgh", "abcdefghijkl"});
  // The longer value wins where both match, so no tail of it is left behind.
  EXPECT_EQ(r.Redact("[abcdefghijkl] [abcdefgh]"), "[[REDACTED:secret]] [[REDACTED:secret]]");
}

TEST(RedactorTest, OverlappingOccurrencesAreAllCovered) {
  Redactor r = Make({"abcabcab"});
  // Occurrences at 0 and 3 overlap; the marker covers both.
  EXPECT_THAT(r.Scan("abcabcabcab!"), ElementsAre(Finding{SecretKind::kExplicitValue, 0, 8},
                                                  Finding{SecretKind::kExplicitValue, 3, 8}));
  EXPECT_EQ(r.Redact("abcabcabcab!"), "[REDACTED:secret]!");
  // Two different values overlapping partly.
  Redactor two = Make({"alpha-bravo-1", "bravo-1-charlie"});
  EXPECT_EQ(two.Redact("<alpha-bravo-1-charlie>"), "<[REDACTED:secret]>");
}

TEST(RedactorTest, ExplicitValueOverlappingADetectorFinding) {
  // The explicit value starts inside a credential value and ends after it.
  Redactor r = Make({"Zq9xLm2k;tail"});
  const std::string text = "api_key=Qw8Zq9xLm2k;tail end";
  EXPECT_THAT(r.Scan(text), ElementsAre(Finding{SecretKind::kCredential, 8, 11},
                                        Finding{SecretKind::kExplicitValue, 11, 13}));
  EXPECT_EQ(r.Redact(text), "api_key=[REDACTED:credential] end");
}

TEST(RedactorTest, EncodedFormsOfExplicitValues) {
  Redactor r = Make({"P4ss w0rd/x!"});
  // As a URL or form value.
  EXPECT_EQ(r.Redact("GET /login?pw=P4ss%20w0rd%2Fx%21&next=/"),
            "GET /login?pw=[REDACTED:secret]&next=/");
  // Inside base64 at every alignment: "Basic base64(user:value)" and with 0..2 bytes before.
  for (std::string prefix : {"", "u", "us", "user:", "admin:"}) {
    static constexpr char kAlphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string plain = prefix + "P4ss w0rd/x!" + "@tail";
    std::string b64;
    for (size_t i = 0; i < plain.size(); i += 3) {
      uint32_t v = static_cast<unsigned char>(plain[i]) << 16;
      if (i + 1 < plain.size()) v |= static_cast<unsigned char>(plain[i + 1]) << 8;
      if (i + 2 < plain.size()) v |= static_cast<unsigned char>(plain[i + 2]);
      b64.push_back(kAlphabet[(v >> 18) & 63]);
      b64.push_back(kAlphabet[(v >> 12) & 63]);
      b64.push_back(i + 1 < plain.size() ? kAlphabet[(v >> 6) & 63] : '=');
      b64.push_back(i + 2 < plain.size() ? kAlphabet[v & 63] : '=');
    }
    std::vector<Finding> findings = r.Scan("Authorization: X " + b64);
    ASSERT_EQ(findings.size(), 1u) << prefix << " " << b64;
    EXPECT_EQ(findings[0].kind, SecretKind::kExplicitValue);
    EXPECT_GE(findings[0].length, 14u);  // 12 bytes carry 16 characters, all but 1-2 edges
  }
}

TEST(RedactorTest, ExplicitValuesOnlyTurnsDetectorsOff) {
  RedactorOptions options;
  options.detectors = Detectors::kExplicitValuesOnly;
  Redactor r = Make({"my-explicit-secret"}, options);
  EXPECT_EQ(r.Redact(Tok("AKIA", "IOSFODNN7EXAMPLE my-explicit-secret")),
            Tok("AKIA", "IOSFODNN7EXAMPLE [REDACTED:secret]"));
}

TEST(RedactorTest, NoSecretsNoChange) {
  Redactor r = Make({});
  const std::string text = "make: *** [Makefile:12: all] Error 1\n";
  EXPECT_THAT(r.Scan(text), IsEmpty());
  EXPECT_EQ(r.Redact(text), text);
  EXPECT_EQ(r.Redact(""), "");
}

TEST(RedactorTest, BinaryValuesAndInput) {
  const std::string value("\x00\x01secret\xff\xfe", 10);
  Redactor r = Make({value});
  std::string text("\x00\x00\xff", 3);
  text += value + std::string("\x80\x00", 2);
  EXPECT_EQ(r.Redact(text),
            std::string("\x00\x00\xff", 3) + "[REDACTED:secret]" + std::string("\x80\x00", 2));
}

TEST(RedactorTest, ConstMethodsAreThreadSafe) {
  Redactor r = Make({"shared-secret-value-1"});
  std::string text;
  for (int i = 0; i < 2000; ++i) {
    text += "line " + std::to_string(i) + " shared-secret-value-1 password=Xk9#mQ2vLp\n";
  }
  const std::string expected = r.Redact(text);
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      Redactor copy = r;  // copies share the compiled state
      ok[t] = copy.Redact(text) == expected && r.Scan(text).size() == 4000;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(ok, testing::Each(1));
}

TEST(RedactorTest, LargeInputIsScannedWhole) {
  Redactor r = Make({"needle-in-haystack-42"});
  std::string text;
  const std::string line = "[  42%] Building CXX object src/x/CMakeFiles/x.dir/y.cc.o\n";
  while (text.size() < (16u << 20)) text += line;
  text += "needle-in-haystack-42";
  text += line;
  std::vector<Finding> findings = r.Scan(text);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].offset, text.size() - line.size() - 21);
  std::string redacted = r.Redact(text);
  EXPECT_EQ(redacted.size(), text.size() - 21 + std::string("[REDACTED:secret]").size());
}

TEST(RedactorTest, KindNames) {
  EXPECT_STREQ(ToString(SecretKind::kExplicitValue), "secret");
  EXPECT_STREQ(ToString(SecretKind::kPrivateKey), "private_key");
  EXPECT_STREQ(ToString(SecretKind::kCredential), "credential");
}

}  // namespace
}  // namespace airlock
