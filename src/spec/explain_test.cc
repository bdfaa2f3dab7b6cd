#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/parse.h"

namespace airlock::spec {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const ParseOptions kAnyHost{HostLevels{.gvisor = true, .microvm = true}};

SandboxSpec ParseOrDie(std::string_view text) {
  absl::StatusOr<SandboxSpec> spec = ParseSpec(text, Format::kAuto, kAnyHost);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : SandboxSpec{};
}

void ExpectRoundTrip(const SandboxSpec& spec) {
  std::string text = ExplainSpec(spec);
  absl::StatusOr<SandboxSpec> again = ParseSpec(text, Format::kYaml, kAnyHost);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  EXPECT_EQ(*again, spec) << text;
}

TEST(ExplainSpecTest, ShowsEveryFieldAndParsesBack) {
  std::string text = ExplainSpec(SandboxSpec{});
  for (const char* line :
       {"\nversion: 1\n", "\nriskClass: null  # none: level, network and approval are as written\n",
        "\nlevel: 2  # hardened: ", "\nruntime: native  # ", "\n  memoryMb: 512\n",
        "\n  maxLogBytes: 33554432\n", "\n  paths: [/sandbox/artifacts]\n", "\napproval: none\n",
        "\nenv: {}\n", "\n  mounts: []\n",
        "\n  binaryThresholdKb: 1024  # larger binaries need an allowBinaries entry\n",
        "\n  deny: []  # added to the built-in rules (docs/policy.md); never lifts them\n",
        "\n  strictShell: false  # check shell text as far as it parses; note the rest\n"}) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  ExpectRoundTrip(SandboxSpec{});
}

TEST(ExplainSpecTest, NotesWhatTheRiskClassDerived) {
  SandboxSpec spec = ParseOrDie("riskClass: R2\nnetwork: {allowHosts: [registry.npmjs.org:443]}\n");
  std::string text = ExplainSpec(spec);
  EXPECT_THAT(text, HasSubstr("# Risk class R2 (dependency upgrade) derives level 2, network "
                              "dependency-egress and approval\n# beforePr.\n"));
  EXPECT_THAT(text, HasSubstr("\nriskClass: R2  # dependency upgrade\n"));
  EXPECT_THAT(text, HasSubstr("; R2 allows 2 or above\n"));
  EXPECT_THAT(text,
              HasSubstr("\n  profile: dependency-egress  # R2 allows at most dependency-egress\n"));
  EXPECT_THAT(text, HasSubstr("\n  allowHosts: [\"registry.npmjs.org:443\"]\n"));
  EXPECT_THAT(text, HasSubstr("\napproval: beforePr  # R2 requires at least beforePr\n"));
  EXPECT_THAT(text, Not(HasSubstr("Broker only")));
  ExpectRoundTrip(spec);
}

TEST(ExplainSpecTest, SaysR5IsBrokerOnly) {
  SandboxSpec spec = ParseOrDie("riskClass: R5\n");
  std::string text = ExplainSpec(spec);
  EXPECT_THAT(text,
              HasSubstr("# Broker only: no network at all; outside calls and secret leases go "
                        "only through the control\n# plane's brokered channel.\n"));
  EXPECT_THAT(text, HasSubstr("  profile: none  # R5 allows at most none (broker only)\n"));
  EXPECT_THAT(text, HasSubstr("\napproval: security  # R5 requires at least security\n"));
  ExpectRoundTrip(spec);
}

TEST(ExplainSpecTest, CommentLinesFitInOneHundredColumns) {
  std::string text = ExplainSpec(ParseOrDie("riskClass: R4\n"));
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    std::string_view line(text.data() + start, end - start);
    if (line.starts_with("#")) {
      EXPECT_LE(line.size(), 100u) << line;
    }
    start = end + 1;
  }
}

TEST(ExplainSpecTest, QuotesStringsThatYamlWouldRetype) {
  SandboxSpec spec;
  spec.env = {{"BOOL", "true"},     {"YES", "yes"},          {"NUM", "1"},
              {"FLOAT", "1.5e3"},   {"NULL_WORD", "null"},   {"TILDE", "~"},
              {"EMPTY", ""},        {"COLON", "a: b"},       {"HASH", "#x"},
              {"ALIAS", "*a"},      {"ANCHOR", "&a"},        {"DASH", "- x"},
              {"QUOTE", "it's \""}, {"NEWLINE", "a\nb\tc"},  {"UNICODE", "h\u00e9llo \u2603"},
              {"BRACKETS", "[x]"},  {"LEADING_SPACE", " x"}, {"DOT_INF", ".inf"},
              {"HEX", "0x1F"},      {"OCTAL", "0o17"},       {"PERCENT", "%TAG"},
              {"AT", "@x"},         {"BACKTICK", "`x`"},     {"PIPE", "|"}};
  spec.hostname = "true";
  spec.cache = Cache{CacheMode::kReadOnly, "0755"};
  ASSERT_TRUE(Validate(spec).empty());
  ExpectRoundTrip(spec);
  std::string text = ExplainSpec(spec);
  EXPECT_THAT(text, HasSubstr("\n  YES: \"yes\"\n"));
  EXPECT_THAT(text, HasSubstr("\nhostname: \"true\"\n"));
}

TEST(ExplainSpecTest, RoundTripsTheFullExample) {
  SandboxSpec spec = ParseOrDie(R"({
    "runtime": "traced",
    "process": {"supervisor": "ptrace",
                "syscalls": [{"names": ["ioctl"], "action": "trace",
                              "args": [{"index": 1, "op": "masked_eq", "value": 21505,
                                        "mask": 65535}]},
                             {"names": ["read", "write"], "action": "allow"}]},
    "filesystem": {"tmpfs": [{"target": "/sandbox/tmp", "sizeMb": 16}],
                   "mounts": [{"source": "/srv/x", "target": "/sandbox/x", "mode": "rw"}]},
    "network": {"profile": "restricted-http",
                "httpRules": [{"host": "*.example.com:8080", "methods": [], "pathPrefixes": ["/"]}],
                "denyCidrs": ["2001:db8::/32"]},
    "secrets": {"leases": [{"name": "a/b", "purpose": "p: q", "ttlSeconds": 5}]},
    "resources": {"cpu": 0.1}
  })");
  ExpectRoundTrip(spec);
}

}  // namespace
}  // namespace airlock::spec
