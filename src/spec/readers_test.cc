#include "spec/internal/readers.h"

#include <chrono>
#include <cmath>
#include <string>

#include "common/status.h"
#include "gtest/gtest.h"

namespace airlock::spec::internal {
namespace {

using nlohmann::json;

std::string ErrorOf(const absl::StatusOr<json>& result) {
  EXPECT_FALSE(result.ok());
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(Message(result.status()));
}

json YamlOrDie(const std::string& text) {
  absl::StatusOr<json> doc = ReadYaml(text);
  EXPECT_TRUE(doc.ok()) << doc.status();
  return doc.ok() ? *doc : json();
}

std::string Nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(ReadJsonTest, ReadsADocument) {
  absl::StatusOr<json> doc =
      ReadJson(R"({"a": [1, -2, 18446744073709551615, 1.5, "x", true, null]})");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(*doc, json::parse(R"({"a": [1, -2, 18446744073709551615, 1.5, "x", true, null]})"));
}

TEST(ReadJsonTest, RefusesDuplicateKeysWithTheirPath) {
  EXPECT_EQ(ErrorOf(ReadJson(R"({"level": 1, "level": 2})")), "level: duplicate key");
  EXPECT_EQ(
      ErrorOf(ReadJson(R"({"filesystem": {"mounts": [{}, {"target": "/a", "target": "/b"}]}})")),
      "filesystem.mounts[1].target: duplicate key");
  EXPECT_EQ(ErrorOf(ReadJson(R"({"env": {"A B": "1", "A B": "2"}})")),
            R"(env["A B"]: duplicate key)");
}

TEST(ReadJsonTest, ReportsSyntaxErrorsWithPosition) {
  EXPECT_EQ(ErrorOf(ReadJson(R"({"a": })")),
            "JSON parse error at line 1, column 7: syntax error while parsing value - unexpected "
            "'}'; expected '[', '{', or a literal");
  EXPECT_EQ(ErrorOf(ReadJson("")).substr(0, 31), "JSON parse error at line 1, col");
  EXPECT_EQ(ErrorOf(ReadJson("{} {}")).substr(0, 17), "JSON parse error ");
  // Comments are not JSON.
  EXPECT_EQ(ErrorOf(ReadJson("{} // c")).substr(0, 17), "JSON parse error ");
}

TEST(ReadJsonTest, BoundsNesting) {
  EXPECT_TRUE(ReadJson(Nested(kMaxDepth)).ok());
  std::string path;
  for (size_t i = 0; i < kMaxDepth; ++i) path += "[0]";
  EXPECT_EQ(ErrorOf(ReadJson(Nested(kMaxDepth + 1))), path + ": nested deeper than 32 levels");
  // A deep document is refused quickly, without recursion.
  EXPECT_FALSE(ReadJson(Nested(500'000)).ok());
}

TEST(ReadJsonTest, BoundsTheNumberOfValues) {
  std::string big = "[";
  for (size_t i = 0; i < kMaxNodes; ++i) big += "0,";
  big += "0]";
  EXPECT_EQ(ErrorOf(ReadJson(big)),
            "the document holds more than 100000 values (YAML aliases count every time they are "
            "used)");
}

TEST(ReadYamlTest, TypesPlainScalarsByTheCoreSchema) {
  json doc = YamlOrDie(R"(
int: 42
negative: -7
plus: +3
hex: 0x1F
octal: 0o17
leading_zero: 0755
big: 18446744073709551615
float: 1.5
exponent: 1e3
dot: .5
inf: -.inf
nan: .nan
yes_no: [yes, no, on, off, y, n]
bools: [true, True, TRUE, false, False, FALSE]
nulls: [~, null, Null, NULL]
empty:
string: hello world
version_like: 1.2.3
colon: a:b
)");
  EXPECT_EQ(doc["int"], json(42));
  EXPECT_EQ(doc["negative"], json(-7));
  EXPECT_EQ(doc["plus"], json(3));
  EXPECT_EQ(doc["hex"], json(31));
  EXPECT_EQ(doc["octal"], json(15));
  EXPECT_EQ(doc["leading_zero"], json(755));
  EXPECT_TRUE(doc["big"].is_number_unsigned());
  EXPECT_EQ(doc["big"].get<uint64_t>(), 18446744073709551615u);
  EXPECT_EQ(doc["float"], json(1.5));
  EXPECT_TRUE(doc["float"].is_number_float());
  EXPECT_EQ(doc["exponent"], json(1000.0));
  EXPECT_EQ(doc["dot"], json(0.5));
  EXPECT_EQ(doc["inf"].get<double>(), -INFINITY);
  EXPECT_TRUE(std::isnan(doc["nan"].get<double>()));
  EXPECT_EQ(doc["yes_no"], json::parse(R"(["yes", "no", "on", "off", "y", "n"])"));
  EXPECT_EQ(doc["bools"], json::parse("[true, true, true, false, false, false]"));
  EXPECT_EQ(doc["nulls"], json::parse("[null, null, null, null]"));
  EXPECT_TRUE(doc["empty"].is_null());
  EXPECT_EQ(doc["string"], json("hello world"));
  EXPECT_EQ(doc["version_like"], json("1.2.3"));
  EXPECT_EQ(doc["colon"], json("a:b"));
}

TEST(ReadYamlTest, QuotedAndBlockScalarsStayStrings) {
  json doc = YamlOrDie(R"(
single: '42'
double: "true"
null_word: "null"
literal: |
  7
folded: >
  1.5
)");
  EXPECT_EQ(doc["single"], json("42"));
  EXPECT_EQ(doc["double"], json("true"));
  EXPECT_EQ(doc["null_word"], json("null"));
  EXPECT_EQ(doc["literal"], json("7\n"));
  EXPECT_EQ(doc["folded"], json("1.5\n"));
}

TEST(ReadYamlTest, HonoursCoreTagsAndRefusesOthers) {
  json doc = YamlOrDie("a: !!str 42\nb: !!int '7'\nc: !!float 2\nd: !!bool 'true'\ne: !!null ''\n");
  EXPECT_EQ(doc, json::parse(R"({"a": "42", "b": 7, "c": 2.0, "d": true, "e": null})"));
  EXPECT_EQ(ErrorOf(ReadYaml("a: !!int abc\n")),
            R"(a: "abc" is not a valid "tag:yaml.org,2002:int" (line 1, column 4))");
  EXPECT_EQ(ErrorOf(ReadYaml("a: !custom x\n")),
            R"(a: unsupported tag "!custom" (line 1, column 4))");
  EXPECT_EQ(ErrorOf(ReadYaml("a: !!set {x}\n")),
            R"(a: unsupported tag "tag:yaml.org,2002:set" (line 1, column 4))");
}

TEST(ReadYamlTest, RefusesDuplicateKeysWithPathAndLine) {
  EXPECT_EQ(ErrorOf(ReadYaml("level: 1\nlevel: 2\n")), "level: duplicate key (line 2, column 1)");
  EXPECT_EQ(ErrorOf(ReadYaml("filesystem:\n  mounts:\n    - target: /a\n      target: /b\n")),
            "filesystem.mounts[0].target: duplicate key (line 4, column 7)");
  EXPECT_EQ(ErrorOf(ReadYaml("{a: 1, a: 2}")), "a: duplicate key (line 1, column 8)");
}

TEST(ReadYamlTest, ExpandsAliases) {
  json doc = YamlOrDie("base: &b {cpu: 2, memoryMb: 512}\ncopy: *b\nkey: &k name\n*k : 3\n");
  EXPECT_EQ(doc["copy"], doc["base"]);
  EXPECT_EQ(doc["name"], json(3));
}

TEST(ReadYamlTest, BoundsAliasExpansion) {
  // Billion laughs: nine levels of ten aliases each would expand to 10^9 values.
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += (k > 0 ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  auto start = std::chrono::steady_clock::now();
  std::string error = ErrorOf(ReadYaml(bomb));
  EXPECT_NE(error.find("the document holds more than 100000 values"), std::string::npos) << error;
  // Refused long before the expansion would finish (it stops near the budget; the bound here is
  // loose so sanitizer builds pass).
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(ReadYamlTest, BoundsNestingIncludingThroughAliases) {
  EXPECT_TRUE(ReadYaml(Nested(kMaxDepth)).ok());
  EXPECT_NE(ErrorOf(ReadYaml(Nested(kMaxDepth + 1))).find("nested deeper than 32 levels"),
            std::string::npos);
  // yaml-cpp's own guard stops deeper documents before our handler sees them.
  EXPECT_FALSE(ReadYaml(Nested(100'000)).ok());
  std::string deep_anchor =
      "a: &x " + Nested(20) + "\nb: " + std::string(20, '[') + "*x" + std::string(20, ']') + "\n";
  EXPECT_NE(ErrorOf(ReadYaml(deep_anchor)).find("nested deeper than 32 levels"), std::string::npos);
}

TEST(ReadYamlTest, RefusesWhatJsonCannotHold) {
  EXPECT_EQ(ErrorOf(ReadYaml("? [a]\n: 1\n")), "mapping keys must be scalars (line 1, column 3)");
  EXPECT_EQ(ErrorOf(ReadYaml("~: 1\n")), "mapping keys must not be null (line 1, column 1)");
  EXPECT_EQ(ErrorOf(ReadYaml("a: x\xff\n")), "a: invalid UTF-8 (line 1, column 4)");
  EXPECT_EQ(ReadYaml("a: \"\\xff\"\n")->at("a"), json("\u00ff"));
  EXPECT_EQ(ErrorOf(ReadYaml("a: &x [*x]\n")),
            "a[0]: an alias may not refer to a node that contains it (line 1, column 8)");
}

TEST(ReadYamlTest, WantsExactlyOneDocument) {
  EXPECT_EQ(ErrorOf(ReadYaml("")), "empty YAML document");
  EXPECT_EQ(ErrorOf(ReadYaml("# only a comment\n")), "empty YAML document");
  EXPECT_EQ(ErrorOf(ReadYaml("a: 1\n---\nb: 2\n")),
            "more than one YAML document (a spec is one document)");
  EXPECT_TRUE(ReadYaml("---\na: 1\n...\n").ok());
}

TEST(ReadYamlTest, ReportsSyntaxErrorsWithPosition) {
  EXPECT_EQ(ErrorOf(ReadYaml("a: [1, 2\n")).substr(0, 27), "YAML parse error at line 2,");
  EXPECT_EQ(ErrorOf(ReadYaml("a: *missing\n")),
            "YAML parse error at line 1, column 4: the referenced anchor is not defined");
}

TEST(ResolvePlainYamlScalarTest, MatchesTheReader) {
  EXPECT_EQ(ResolvePlainYamlScalar("12"), json(12));
  EXPECT_EQ(ResolvePlainYamlScalar("true"), json(true));
  EXPECT_TRUE(ResolvePlainYamlScalar("~").is_null());
  EXPECT_EQ(ResolvePlainYamlScalar("R2"), json("R2"));
  EXPECT_EQ(ResolvePlainYamlScalar("1e5"), json(100000.0));
}

}  // namespace
}  // namespace airlock::spec::internal
