#include "spec/patterns.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace airlock::spec {
namespace {

bool Matches(const char* pattern, std::vector<std::string> argv) {
  EXPECT_EQ(ArgvPatternProblem(pattern), "") << pattern;
  return MatchArgvPattern(ParseArgvPattern(pattern), argv);
}

TEST(ArgvPatternTest, ParsesWordKinds) {
  ArgvPattern p = ParseArgvPattern("  terraform\t**  apply * --force*  ");
  ASSERT_EQ(p.words.size(), 5u);
  EXPECT_EQ(p.words[0], (PatternWord{PatternWord::Kind::kText, "terraform"}));
  EXPECT_EQ(p.words[1].kind, PatternWord::Kind::kAnyCount);
  EXPECT_EQ(p.words[2], (PatternWord{PatternWord::Kind::kText, "apply"}));
  EXPECT_EQ(p.words[3].kind, PatternWord::Kind::kOne);
  EXPECT_EQ(p.words[4], (PatternWord{PatternWord::Kind::kText, "--force*"}));
}

TEST(ArgvPatternTest, MatchesAPrefixOfTheArgv) {
  EXPECT_TRUE(Matches("npm publish", {"npm", "publish"}));
  EXPECT_TRUE(Matches("npm publish", {"npm", "publish", "--tag", "next"}));
  EXPECT_FALSE(Matches("npm publish", {"npm", "--tag", "next", "publish"}));
  EXPECT_FALSE(Matches("npm publish", {"npm"}));
  EXPECT_FALSE(Matches("npm publish", {"pnpm", "publish"}));
  EXPECT_TRUE(Matches("npm", {"npm"}));
}

TEST(ArgvPatternTest, ProgramIsComparedByBasename) {
  EXPECT_TRUE(Matches("terraform apply", {"/usr/local/bin/terraform", "apply"}));
  EXPECT_TRUE(Matches("terraform apply", {"./terraform", "apply"}));
  EXPECT_FALSE(Matches("terraform apply", {"/opt/terraform/bin", "apply"}));
  EXPECT_FALSE(Matches("terraform apply", {"terraform-wrapper", "apply"}));
}

TEST(ArgvPatternTest, StarIsExactlyOneArgument) {
  EXPECT_TRUE(Matches("git * push", {"git", "-C", "push"}));
  EXPECT_FALSE(Matches("git * push", {"git", "push"}));
  EXPECT_FALSE(Matches("git * push", {"git", "-C", "dir", "push"}));
}

TEST(ArgvPatternTest, DoubleStarIsAnyNumberOfArguments) {
  EXPECT_TRUE(Matches("terraform ** apply", {"terraform", "apply"}));
  EXPECT_TRUE(Matches("terraform ** apply", {"terraform", "-chdir=x", "apply", "-auto-approve"}));
  EXPECT_FALSE(Matches("terraform ** apply", {"terraform", "plan", "-out", "applyplan"}));
  EXPECT_TRUE(Matches("a ** b ** c", {"a", "x", "b", "y", "b", "z", "c"}));
  EXPECT_FALSE(Matches("a ** b ** c", {"a", "x", "c", "y", "b"}));
  EXPECT_TRUE(Matches("a ** * c", {"a", "x", "y", "c"}));
  EXPECT_FALSE(Matches("a ** * c", {"a", "c"}));
}

TEST(ArgvPatternTest, StarInsideAWordStaysInThatWord) {
  EXPECT_TRUE(Matches("git push --force*", {"git", "push", "--force-with-lease"}));
  EXPECT_TRUE(Matches("git push --force*", {"git", "push", "--force"}));
  EXPECT_FALSE(Matches("git push --force*", {"git", "push", "-f"}));
  EXPECT_TRUE(Matches("rm *-rf*", {"rm", "-rf", "/"}));
}

TEST(ArgvPatternTest, MatchedWordsEndAtTheLastConcreteWord) {
  ArgvPattern p = ParseArgvPattern("terraform ** apply");
  std::vector<std::string> argv = {"terraform", "-chdir=x", "apply", "-auto-approve"};
  EXPECT_EQ(MatchedArgvWords(p, argv), 3u);
  EXPECT_EQ(MatchedArgvWords(ParseArgvPattern("npm"), {"npm", "x"}), 1u);
  EXPECT_EQ(MatchedArgvWords(ParseArgvPattern("npm y"), {"npm", "x"}), 0u);
}

TEST(ArgvPatternTest, LongArgvsStayCheap) {
  // The two-pointer match backtracks only to the last "**": 20k words against a pattern of
  // many stars finishes at once (an exponential matcher would not).
  std::vector<std::string> argv = {"a"};
  for (int i = 0; i < 20000; ++i) argv.push_back("x");
  ArgvPattern p = ParseArgvPattern("a ** x ** x ** x ** x ** x ** y");
  EXPECT_FALSE(MatchArgvPattern(p, argv));
  argv.push_back("y");
  EXPECT_TRUE(MatchArgvPattern(p, argv));
}

TEST(PathGlobTest, Problems) {
  EXPECT_EQ(PathGlobProblem("/sandbox/artifacts/**/*.png"), "");
  EXPECT_EQ(PathGlobProblem("/sandbox/artifacts/a*b/c"), "");
  EXPECT_EQ(PathGlobProblem(""), "must not be empty");
  EXPECT_EQ(PathGlobProblem("x/y"), "\"x/y\" is not an absolute path");
  EXPECT_EQ(PathGlobProblem("/a//b"), "must not contain \"//\"");
  EXPECT_EQ(PathGlobProblem("/a/b/"), "must not end with \"/\"");
  EXPECT_EQ(PathGlobProblem("/a/./b"), "must not contain \".\" segments");
  EXPECT_EQ(PathGlobProblem("/a/**b"), "\"/a/**b\": \"**\" must be a whole path segment");
}

TEST(PathGlobTest, Matches) {
  EXPECT_TRUE(MatchPathGlob("/sandbox/artifacts/dist/*.whl", "/sandbox/artifacts/dist/a.whl"));
  EXPECT_FALSE(MatchPathGlob("/sandbox/artifacts/dist/*.whl", "/sandbox/artifacts/dist/x/a.whl"));
  EXPECT_FALSE(MatchPathGlob("/sandbox/artifacts/dist/*.whl", "/sandbox/artifacts/dist/a.whl.sig"));
  EXPECT_TRUE(MatchPathGlob("/sandbox/artifacts/**/*.png", "/sandbox/artifacts/a.png"));
  EXPECT_TRUE(MatchPathGlob("/sandbox/artifacts/**/*.png", "/sandbox/artifacts/x/y/a.png"));
  EXPECT_FALSE(MatchPathGlob("/sandbox/artifacts/**/*.png", "/sandbox/workspace/a.png"));
  EXPECT_TRUE(MatchPathGlob("/sandbox/artifacts/**", "/sandbox/artifacts/x/y"));
  EXPECT_FALSE(MatchPathGlob("/sandbox/artifacts/app", "/sandbox/artifacts/app2"));
  EXPECT_TRUE(MatchPathGlob("/sandbox/artifacts/app", "/sandbox/artifacts/app"));
}

TEST(WordGlobTest, Matches) {
  EXPECT_TRUE(MatchWordGlob("", ""));
  EXPECT_FALSE(MatchWordGlob("", "a"));
  EXPECT_TRUE(MatchWordGlob("*", ""));
  EXPECT_TRUE(MatchWordGlob("a*b*c", "aXXbYYbc"));
  EXPECT_FALSE(MatchWordGlob("a*b*c", "aXXbYYb"));
  EXPECT_TRUE(MatchWordGlob("**", "anything"));
  std::string long_text(100000, 'a');
  EXPECT_FALSE(MatchWordGlob("*a*a*a*b", long_text));
}

}  // namespace
}  // namespace airlock::spec
