#include "command/report.h"

#include <unistd.h>

#include <cstdio>

#include "common/files.h"
#include "gtest/gtest.h"

namespace airlock {
namespace {

// Output (stdout and stderr) of a shell command run here, for analysis of real tool output.
std::string ToolOutput(const std::string& script) {
  std::string cmd = "cd " + std::string(::testing::TempDir()) + " && (" + script + ") 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

bool HasLine(const FailureAnalysis& a, const std::string& part) {
  for (const std::string& l : a.key_lines) {
    if (l.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST(ReportTest, GccCompilationError) {
  std::string out = ToolOutput("printf 'int main() { return undefined_x; }\\n' > broken.c && gcc -c broken.c");
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 1, out);
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << out;
  EXPECT_TRUE(HasLine(a, "broken.c:1:")) << out;
  EXPECT_TRUE(HasLine(a, "undefined_x")) << out;
}

TEST(ReportTest, MissingHeaderIsAMissingDependency) {
  std::string out = ToolOutput("printf '#include <zlibzz.h>\\n' > inc.c && gcc -c inc.c");
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 1, out);
  EXPECT_EQ(a.kind, FailureKind::kMissingDependency) << out;
  EXPECT_EQ(a.detail, "zlibzz.h");
}

TEST(ReportTest, MakeAndClang) {
  std::string out = ToolOutput(
      "mkdir -p mk && cd mk && printf 'int f( {\\n' > a.c && "
      "printf 'all:\\n\\tclang -c a.c\\n' > Makefile && make");
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 2, out);
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << out;
  EXPECT_TRUE(HasLine(a, "a.c:1:")) << out;
  EXPECT_TRUE(HasLine(a, "make: ***")) << out;
}

TEST(ReportTest, PythonTracebackAndMissingModule) {
  std::string out = ToolOutput("python3 -c 'import json\ndef f():\n  return 1/0\nf()'");
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 1, out);
  EXPECT_EQ(a.kind, FailureKind::kUnknown) << out;
  EXPECT_TRUE(HasLine(a, "ZeroDivisionError: division by zero")) << out;
  out = ToolOutput("python3 -c 'import requestz_missing'");
  a = AnalyzeOutput(Classification::kExitNonzero, 1, out);
  EXPECT_EQ(a.kind, FailureKind::kMissingDependency) << out;
  EXPECT_EQ(a.detail, "requestz_missing");
  out = ToolOutput("python3 -c 'def f(:'");
  a = AnalyzeOutput(Classification::kExitNonzero, 1, out);
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << out;
}

TEST(ReportTest, PythonUnittestFailure) {
  std::string out = ToolOutput(
      "printf 'import unittest\\nclass T(unittest.TestCase):\\n  def test_x(self): "
      "self.assertEqual(1, 2)\\nunittest.main()\\n' > t.py && python3 t.py");
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 1, out);
  EXPECT_EQ(a.kind, FailureKind::kTestFailure) << out;
  EXPECT_TRUE(HasLine(a, "FAIL: test_x")) << out;
}

TEST(ReportTest, NodeMissingModule) {
  std::string out = ToolOutput("node -e \"require('left-padz')\"");
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 1, out);
  EXPECT_EQ(a.kind, FailureKind::kMissingDependency) << out;
  EXPECT_EQ(a.detail, "left-padz");
}

TEST(ReportTest, JavacError) {
  std::string out = ToolOutput("printf 'class A { int f() { return y; } }\\n' > A.java && javac A.java");
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 1, out);
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << out;
  EXPECT_TRUE(HasLine(a, "A.java:1: error: cannot find symbol")) << out;
}

TEST(ReportTest, CommandNotFound) {
  std::string out = ToolOutput("sh -c 'no-such-tool-xyz'");
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 127, out);
  EXPECT_EQ(a.kind, FailureKind::kCommandNotFound) << out;
}

// Toolchains not installed here: fixtures copied from their documented output formats.
TEST(ReportTest, FixturesForOtherToolchains) {
  struct Case {
    const char* output;
    FailureKind kind;
    const char* key;
  } cases[] = {
      {"=================================== FAILURES ===================================\n"
       "___________________________________ test_add ___________________________________\n"
       "E       assert 3 == 4\n"
       "FAILED tests/test_calc.py::test_add - assert 3 == 4\n"
       "========================= 1 failed, 2 passed in 0.03s ==========================\n",
       FailureKind::kTestFailure, "FAILED tests/test_calc.py::test_add"},
      {"# example.com/m\n./main.go:12:2: undefined: fooBar\n", FailureKind::kCompilationError,
       "./main.go:12:2: undefined: fooBar"},
      {"--- FAIL: TestParse (0.00s)\n    parse_test.go:20: got 1 want 2\nFAIL\n",
       FailureKind::kTestFailure, "--- FAIL: TestParse"},
      {"main.go:3:8: package github.com/x/y is not in std (/usr/lib/go/src/github.com/x/y)\n",
       FailureKind::kMissingDependency, "is not in std"},
      {"> Task :compileJava FAILED\nsrc/main/java/A.java:3: error: ';' expected\n",
       FailureKind::kCompilationError, "A.java:3: error"},
      {"e: file:///w/src/Main.kt:4:5 Unresolved reference: foo\n", FailureKind::kCompilationError,
       "Main.kt:4:5"},
      {"3 tests completed, 1 failed\n> Task :test FAILED\n", FailureKind::kTestFailure,
       "3 tests completed, 1 failed"},
      {"[ERROR] /w/src/main/java/A.java:[3,10] cannot find symbol\n[ERROR] COMPILATION ERROR\n",
       FailureKind::kCompilationError, "A.java:[3,10]"},
      {"[ERROR] Tests run: 4, Failures: 1, Errors: 0, Skipped: 0\n", FailureKind::kTestFailure,
       "Failures: 1"},
      {"npm ERR! code E404\nnpm ERR! 404 Not Found - GET https://registry.npmjs.org/left-padz - "
       "Not found\nnpm ERR! 404  'left-padz@*' is not in this registry.\n",
       FailureKind::kMissingDependency, "npm ERR! code E404"},
      {"npm ERR! code ENOTFOUND\nnpm ERR! network request to https://registry.npmjs.org/x failed, "
       "reason: getaddrinfo ENOTFOUND registry.npmjs.org\n",
       FailureKind::kNetworkRequired, "ENOTFOUND registry.npmjs.org"},
      {"curl: (6) Could not resolve host: pypi.org\n", FailureKind::kNetworkRequired, "pypi.org"},
      {"Tests:       1 failed, 3 passed, 4 total\n", FailureKind::kTestFailure, "1 failed"},
  };
  for (const Case& c : cases) {
    FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 1, c.output);
    EXPECT_EQ(a.kind, c.kind) << c.output;
    EXPECT_TRUE(HasLine(a, c.key)) << c.output;
  }
}

TEST(ReportTest, ClassificationDecidesFirst) {
  EXPECT_EQ(AnalyzeOutput(Classification::kOk, 0, "error: x").kind, FailureKind::kNone);
  EXPECT_EQ(AnalyzeOutput(Classification::kCommandTimeout, -1, "").kind, FailureKind::kTimeout);
  EXPECT_EQ(AnalyzeOutput(Classification::kResourceExhaustedMemory, -1, "").kind,
            FailureKind::kOutOfMemory);
  EXPECT_EQ(AnalyzeOutput(Classification::kPolicyBlocked, -1, "").kind,
            FailureKind::kPolicyBlocked);
}

TEST(ReportTest, KeyLinesAreBoundedAndDeduplicated) {
  std::string out;
  for (int i = 0; i < 500; ++i) out += "a.c:1:1: error: " + std::string(i % 2 ? 500 : 10, 'x') + "\n";
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 1, out);
  EXPECT_EQ(a.key_lines.size(), 2u);  // two distinct lines, repeated
  for (const std::string& l : a.key_lines) EXPECT_LE(l.size(), kMaxKeyLineBytes);
  std::string many;
  for (int i = 0; i < 500; ++i) many += "f" + std::to_string(i) + ".c:1:1: error: e\n";
  EXPECT_EQ(AnalyzeOutput(Classification::kExitNonzero, 1, many).key_lines.size(), kMaxKeyLines);
}

TEST(ReportTest, LargeOutputIsLinear) {
  std::string big(32 << 20, 'x');
  for (size_t i = 100; i < big.size(); i += 100) big[i] = '\n';
  big += "\nx.c:9:1: error: the one\n";
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 1, big);
  EXPECT_EQ(a.kind, FailureKind::kCompilationError);
}

TEST(ReportTest, RenderedReportIsOneScreen) {
  CommandSpec c{.argv = {"make", "test", "ARG=with space"}};
  CommandResult r;
  r.classification = Classification::kExitNonzero;
  r.exit_code = 2;
  r.duration_ms = 1234;
  r.failure = FailureKind::kCompilationError;
  r.raw_log = "/var/lib/airlock/logs/cmd-1.log";
  for (int i = 0; i < 20; ++i) r.key_lines.push_back("a.c:1: error: " + std::string(150, 'y'));
  std::string report = RenderReport(c, r);
  EXPECT_EQ(report.rfind("$ make test 'ARG=with space'\nexit 2 (EXIT_NONZERO) after 1.2 s", 0), 0u)
      << report;
  EXPECT_NE(report.find("likely failure: compilation error"), std::string::npos);
  size_t lines = 0;
  size_t start = 0;
  for (size_t nl; (nl = report.find('\n', start)) != std::string::npos; start = nl + 1) {
    ++lines;
    EXPECT_LE(nl - start, 100u) << report.substr(start, nl - start);
  }
  EXPECT_LE(lines, 40u);
}

}  // namespace
}  // namespace airlock
