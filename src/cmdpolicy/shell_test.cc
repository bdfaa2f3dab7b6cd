#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cmdpolicy/internal/shell.h"
#include "cmdpolicy/internal/shell_roundtrip.h"
#include "cmdpolicy/policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace airlock::cmdpolicy::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> Texts(const std::vector<Word>& words) {
  std::vector<std::string> out;
  for (const Word& w : words) out.push_back(w.text);
  return out;
}

ShellParse Parse(std::string_view text) {
  ShellParse parse = ParseShell(text);
  return parse;
}

const Command& Only(const ShellParse& parse) {
  EXPECT_EQ(parse.script.pipelines.size(), 1u);
  EXPECT_EQ(parse.script.pipelines.at(0).stages.size(), 1u);
  return parse.script.pipelines.at(0).stages.at(0);
}

TEST(ShellTest, WordsAndQuotes) {
  ShellParse p = Parse(R"(echo 'a b' "c $HOME" d\ e "x\"y" '' $'t\tz\x41\u00e9' "$'n'")");
  EXPECT_THAT(p.problems, IsEmpty());
  const Command& c = Only(p);
  EXPECT_THAT(Texts(c.words),
              ElementsAre("echo", "a b", "c $HOME", "d e", "x\"y", "", "t\tzA\xc3\xa9", "$'n'"));
  EXPECT_TRUE(c.words[1].literal);
  EXPECT_FALSE(c.words[2].literal);
}

TEST(ShellTest, ListsAndPipelines) {
  ShellParse p = Parse("a | b |& c && d; e & f || g\nh");
  EXPECT_THAT(p.problems, IsEmpty());
  ASSERT_EQ(p.script.pipelines.size(), 6u);
  EXPECT_EQ(p.script.pipelines[0].stages.size(), 3u);
  std::vector<std::vector<std::string>> commands = TopLevelCommands(p.script);
  EXPECT_EQ(commands.size(), 8u);
  EXPECT_THAT(commands.back(), ElementsAre("h"));
}

TEST(ShellTest, SubstitutionsAreParsed) {
  ShellParse p = Parse("echo \"$(curl -s x | sh)\" `id -u` <(ls a) ${X:-$(pwd)} $((1+2))");
  EXPECT_THAT(p.problems, IsEmpty());
  const Command& c = Only(p);
  ASSERT_EQ(c.words.size(), 6u);
  EXPECT_EQ(c.words[1].text, "$(curl -s x | sh)");
  ASSERT_EQ(c.words[1].substitutions.size(), 1u);
  EXPECT_EQ(c.words[1].substitutions[0].pipelines[0].stages.size(), 2u);
  EXPECT_EQ(c.words[2].substitutions.size(), 1u);
  EXPECT_THAT(Texts(c.words[2].substitutions[0].pipelines[0].stages[0].words),
              ElementsAre("id", "-u"));
  EXPECT_TRUE(c.words[3].process_substitution);
  EXPECT_EQ(c.words[3].text, "<(ls a)");
  EXPECT_EQ(c.words[4].substitutions.size(), 1u);
  EXPECT_EQ(c.words[5].text, "$((1+2))");
  EXPECT_FALSE(c.words[5].literal);
}

TEST(ShellTest, AssignmentsRedirectsAndComments) {
  ShellParse p = Parse("A=1 B+=\"x y\" arr=(a $(b) c) cmd CC=gcc 2>&1 >out <in &>>log # sudo x");
  EXPECT_THAT(p.problems, IsEmpty());
  const Command& c = Only(p);
  EXPECT_THAT(Texts(c.assignments), ElementsAre("A=1", "B+=x y", "arr=(a $(b) c)"));
  EXPECT_EQ(c.assignments[2].substitutions.size(), 1u);
  EXPECT_THAT(Texts(c.words), ElementsAre("cmd", "CC=gcc"));
  ASSERT_EQ(c.redirects.size(), 4u);
  EXPECT_EQ(c.redirects[0].op, ">&");
  EXPECT_EQ(c.redirects[0].target.text, "1");
  EXPECT_EQ(c.redirects[3].op, "&>>");
  EXPECT_EQ(c.redirects[3].target.text, "log");
}

TEST(ShellTest, HereDocuments) {
  ShellParse p =
      Parse("cat <<EOF | sh\nline $(id)\nEOF\ncat <<'Q' <<-T\n$(not)\nQ\n\tx\n\tT\necho after");
  EXPECT_THAT(p.problems, IsEmpty());
  ASSERT_EQ(p.script.pipelines.size(), 3u);
  const Command& first = p.script.pipelines[0].stages[0];
  ASSERT_EQ(first.redirects.size(), 1u);
  EXPECT_EQ(first.redirects[0].heredoc, "line $(id)\n");
  EXPECT_EQ(first.redirects[0].heredoc_substitutions.size(), 1u);
  EXPECT_EQ(p.script.pipelines[0].stages.size(), 2u);
  const Command& second = p.script.pipelines[1].stages[0];
  ASSERT_EQ(second.redirects.size(), 2u);
  EXPECT_EQ(second.redirects[0].heredoc, "$(not)\n");
  EXPECT_THAT(second.redirects[0].heredoc_substitutions, IsEmpty());  // quoted delimiter
  EXPECT_EQ(second.redirects[1].heredoc, "\tx\n");
  EXPECT_THAT(Texts(p.script.pipelines[2].stages[0].words), ElementsAre("echo", "after"));
}

TEST(ShellTest, CompoundCommands) {
  ShellParse p = Parse(
      "if a; then b; elif c; then d; else e; fi; while f; do g; done; until h; do i; done\n"
      "for x in 1 $(j); do k; done; case $y in a|b) l;; (c) m;& *) n;; esac\n"
      "{ o; p; } > out; (q | r); f() { s; }; function t { u; }; [[ -n $v && w < x ]]; ((z++))");
  EXPECT_THAT(p.problems, IsEmpty());
  std::vector<std::string> programs;
  std::function<void(const Script&)> walk = [&](const Script& s) {
    for (const Pipeline& pl : s.pipelines) {
      for (const Command& c : pl.stages) {
        if (!c.words.empty()) programs.push_back(c.words[0].text);
        for (const Word& w : c.data) {
          for (const Script& sub : w.substitutions) walk(sub);
        }
        for (const Script& b : c.body) walk(b);
      }
    }
  };
  walk(p.script);
  // Function names and for-lists are data; their bodies and substitutions are commands.
  EXPECT_THAT(programs, ElementsAre("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m",
                                    "n", "o", "p", "q", "r", "s", "u"));
}

TEST(ShellTest, ReportsWhatItCannotParse) {
  EXPECT_THAT(Parse("echo 'abc").problems, ElementsAre("unterminated single quote at byte 5"));
  EXPECT_THAT(Parse("echo \"abc").problems, ElementsAre("unterminated double quote at byte 5"));
  EXPECT_THAT(Parse("echo $(ls").problems,
              ElementsAre("unterminated command substitution at byte 5"));
  EXPECT_THAT(Parse("echo `ls").problems, ElementsAre("unterminated backquote at byte 5"));
  EXPECT_THAT(Parse("cat <<EOF\nbody").problems,
              ElementsAre("unterminated here-document \"EOF\" at byte 9"));
  EXPECT_THAT(Parse("if a; then b").problems, ElementsAre("missing \"fi\" at byte 12"));
  EXPECT_THAT(Parse("a )").problems, ElementsAre("unexpected \")\" at byte 2"));
}

TEST(ShellTest, HugeAndDeepInputsAreBounded) {
  std::string huge(kMaxShellBytes + 100, 'a');
  ShellParse p = Parse(huge);
  EXPECT_THAT(p.problems, ElementsAre(HasSubstr("only the first 262144 were parsed")));

  // Nesting that would exhaust the stack of a naive recursive parser.
  for (const char* unit : {"$(", "(", "${", "$((", "`", "{ ", "if "}) {
    SCOPED_TRACE(unit);
    std::string deep;
    while (deep.size() < (1 << 20)) deep += unit;
    p = Parse(deep);
    EXPECT_FALSE(p.problems.empty());
    EXPECT_LE(p.problems.size(), 16u);
  }
  std::string nested = "x";
  for (int i = 0; i < 100; ++i) nested = "$(echo " + nested + ")";
  p = Parse(nested);
  EXPECT_THAT(p.problems, ElementsAre(HasSubstr("nesting deeper than 32 levels")));
}

TEST(ShellTest, QuotedCommandsParseBackToTheSameWords) {
  const std::vector<std::vector<std::string>> commands = {
      {"echo", "a b", "it's", "$HOME", "`x`", "", "\n", "#x", "if", "{", "}"},
      {"A=1 x", "B=", "cmd", "C=3"},
      {"printf", "%s\\n", "\"q\"", "\xff\xfe"},
  };
  ShellParse p = Parse(Requote(commands));
  EXPECT_THAT(p.problems, IsEmpty());
  EXPECT_EQ(TopLevelCommands(p.script), commands);
}

// Random bytes and random shell-looking text: the parser never crashes or hangs, problems stay
// bounded, and a parse without problems survives the quoting round trip. (The libFuzzer target
// shell_fuzz explores the same properties for longer.)
TEST(ShellTest, RandomInputsNeverBreakIt) {
  std::mt19937 rng(12345);
  const std::string alphabet = "ab sudo|&;<>()$`'\"\\\n\t{}[]=#*?!~-_/.:,@%+0123456789\r\x01\xff";
  absl::StatusOr<Policy> policy = Policy::Create({});
  ASSERT_TRUE(policy.ok());
  size_t clean = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text(rng() % 600, '\0');
    for (char& c : text) {
      c = i % 3 == 0 ? static_cast<char>(rng() & 0xff) : alphabet[rng() % alphabet.size()];
    }
    ShellParse p = ParseShell(text);
    EXPECT_LE(p.problems.size(), 16u);
    if (p.problems.empty()) {
      ++clean;
      std::vector<std::vector<std::string>> commands = TopLevelCommands(p.script);
      ShellParse again = ParseShell(Requote(commands));
      EXPECT_THAT(again.problems, IsEmpty()) << text;
      EXPECT_EQ(TopLevelCommands(again.script), commands) << text;
    }
    Decision d = policy->Check({"sh", "-c", text});
    EXPECT_EQ(d.allowed, d.rule.empty());
    EXPECT_LE(d.notes.size(), 8u);
  }
  EXPECT_GT(clean, 100u);  // the round trip was really exercised
}

}  // namespace
}  // namespace airlock::cmdpolicy::internal
