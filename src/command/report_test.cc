#include "command/report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/status.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "redact/redactor.h"

namespace airlock {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;
using ::testing::StartsWith;

// ---- Real toolchains: the test writes a broken file, runs the tool and analyses its output.

struct ToolRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class RealToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/airlock-report-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)RemoveTree(dir_); }

  void Write(const std::string& name, std::string_view text) {
    ASSERT_TRUE(WriteFileAtomic(dir_ + "/" + name, text).ok());
  }

  // Skips the test when `tool` is not installed.
  bool Have(const std::string& tool) {
    return std::system(("command -v " + tool + " >/dev/null 2>&1").c_str()) == 0;
  }

  // Runs `command` with /bin/sh in the test's directory.
  ToolRun Sh(const std::string& command) {
    ToolRun run;
    const std::string line = "cd '" + dir_ + "' && (" + command + ") >'" + dir_ + "/.out' 2>'" +
                             dir_ + "/.err' </dev/null";
    const int status = std::system(line.c_str());
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    run.out = ReadFile(dir_ + "/.out").value_or("");
    run.err = ReadFile(dir_ + "/.err").value_or("");
    return run;
  }

  FailureAnalysis Analyze(const ToolRun& run) {
    FailureAnalysis a =
        AnalyzeOutput(run.exit_code == 0 ? Classification::kOk : Classification::kExitNonzero,
                      run.exit_code, run.out, run.err);
    last_ = run;
    return a;
  }

  std::string Dump(const FailureAnalysis& a) {
    std::string s = fmt::format("kind={} detail={}\n", ToString(a.kind), a.detail);
    for (const std::string& line : a.key_lines) s += "  | " + line + "\n";
    return s + "--- stderr:\n" + last_.err + "--- stdout:\n" + last_.out;
  }

  std::string dir_;
  ToolRun last_;
};

#define REQUIRE_TOOL(tool) \
  if (!Have(tool)) GTEST_SKIP() << tool << " is not installed"

constexpr char kUndeclared[] = "int main() {\n  int x = y + 1;\n  return x\n}\n";

TEST_F(RealToolTest, GccCompilationError) {
  REQUIRE_TOOL("gcc");
  Write("b.c", kUndeclared);
  FailureAnalysis a = Analyze(Sh("gcc -c b.c"));
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << Dump(a);
  EXPECT_EQ(a.detail, "b.c:2") << Dump(a);
  ASSERT_THAT(a.key_lines, SizeIs(2)) << Dump(a);
  EXPECT_THAT(a.key_lines[0], StartsWith("b.c:2:11: error: "));
  EXPECT_THAT(a.key_lines[1], StartsWith("b.c:3:11: error: expected"));
}

TEST_F(RealToolTest, ClangCompilationError) {
  REQUIRE_TOOL("clang");
  Write("b.c", kUndeclared);
  FailureAnalysis a = Analyze(Sh("clang -c b.c"));
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << Dump(a);
  EXPECT_THAT(a.key_lines, Contains("b.c:2:11: error: use of undeclared identifier 'y'"))
      << Dump(a);
}

TEST_F(RealToolTest, GxxErrorWithColoursOn) {
  REQUIRE_TOOL("g++");
  Write("d.cc", "#include <vector>\nint main() { std::vector<int> v; v.push_bak(1); }\n");
  ToolRun run = Sh("g++ -fdiagnostics-color=always -c d.cc");
  ASSERT_THAT(run.err, HasSubstr("\x1b["));
  FailureAnalysis a = Analyze(run);
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << Dump(a);
  ASSERT_THAT(a.key_lines, Not(IsEmpty())) << Dump(a);
  EXPECT_THAT(a.key_lines[0], StartsWith("d.cc:2:36: error: "));
  for (const std::string& line : a.key_lines) EXPECT_THAT(line, Not(HasSubstr("\x1b")));
}

TEST_F(RealToolTest, MissingHeaderIsAMissingDependency) {
  for (const char* cc : {"gcc", "clang"}) {
    if (!Have(cc)) continue;
    Write("a.c", "#include <stdio.h>\n#include \"zlibx.h\"\nint main() { return 0; }\n");
    FailureAnalysis a = Analyze(Sh(std::string(cc) + " -c a.c"));
    EXPECT_EQ(a.kind, FailureKind::kMissingDependency) << cc << Dump(a);
    EXPECT_EQ(a.detail, "zlibx.h") << cc << Dump(a);
    EXPECT_THAT(a.key_lines[0], StartsWith("a.c:2:10: fatal error: ")) << cc;
  }
}

TEST_F(RealToolTest, LinkErrorIsACompilationError) {
  REQUIRE_TOOL("gcc");
  Write("c.c", "int f(void);\nint main(void) { return f(); }\n");
  FailureAnalysis a = Analyze(Sh("gcc c.c -o c"));
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << Dump(a);
  EXPECT_THAT(a.key_lines, Contains(HasSubstr("undefined reference to `f'"))) << Dump(a);
}

TEST_F(RealToolTest, MakeAroundACompilationError) {
  REQUIRE_TOOL("make");
  REQUIRE_TOOL("gcc");
  Write("b.c", kUndeclared);
  Write("Makefile", "all:\n\tgcc -c b.c\n");
  FailureAnalysis a = Analyze(Sh("make"));
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << Dump(a);
  EXPECT_THAT(a.key_lines, Contains(StartsWith("b.c:2:11: error:")));
  EXPECT_THAT(a.key_lines, Contains("make: *** [Makefile:2: all] Error 1"));
}

TEST_F(RealToolTest, MakeMissingTool) {
  REQUIRE_TOOL("make");
  Write("Makefile", "all:\n\tprotoc-airlock-missing --version\n");
  FailureAnalysis a = Analyze(Sh("make"));
  EXPECT_EQ(a.kind, FailureKind::kMissingDependency) << Dump(a);
  EXPECT_EQ(a.detail, "protoc-airlock-missing") << Dump(a);
}

TEST_F(RealToolTest, CommandNotFoundExit127) {
  REQUIRE_TOOL("bash");
  FailureAnalysis a = Analyze(Sh("bash -c 'nosuchcmd-airlock --x'"));
  EXPECT_EQ(last_.exit_code, 127);
  EXPECT_EQ(a.kind, FailureKind::kCommandNotFound) << Dump(a);
  EXPECT_EQ(a.detail, "nosuchcmd-airlock");
  EXPECT_THAT(a.key_lines, ElementsAre("bash: line 1: nosuchcmd-airlock: command not found"));
}

TEST_F(RealToolTest, ScriptMissingAToolWithOtherExitCode) {
  FailureAnalysis a = Analyze(Sh("sh -c 'tool-airlock-missing --v; exit 3'"));
  EXPECT_EQ(last_.exit_code, 3);
  EXPECT_EQ(a.kind, FailureKind::kMissingDependency) << Dump(a);
  EXPECT_EQ(a.detail, "tool-airlock-missing") << Dump(a);
}

TEST_F(RealToolTest, PythonTracebackPointsAtTheRaisingFrame) {
  REQUIRE_TOOL("python3");
  Write("t.py", "def f(d):\n    return d['k']\n\nf({})\n");
  FailureAnalysis a = Analyze(Sh("python3 t.py"));
  EXPECT_EQ(a.kind, FailureKind::kUnknown) << Dump(a);
  EXPECT_THAT(a.key_lines, ElementsAre(dir_ + "/t.py:2: KeyError: 'k'")) << Dump(a);
}

TEST_F(RealToolTest, PythonStdlibFrameGivesWayToTheCallersFrame) {
  REQUIRE_TOOL("python3");
  Write("j.py", "import json\njson.loads('{bad')\n");
  FailureAnalysis a = Analyze(Sh("python3 j.py"));
  ASSERT_THAT(a.key_lines, SizeIs(1)) << Dump(a);
  EXPECT_THAT(a.key_lines[0], StartsWith(dir_ + "/j.py:2: json.decoder.JSONDecodeError: "));
}

TEST_F(RealToolTest, PythonMissingModule) {
  REQUIRE_TOOL("python3");
  FailureAnalysis a = Analyze(Sh("python3 -c 'import requests_airlock_missing'"));
  EXPECT_EQ(a.kind, FailureKind::kMissingDependency) << Dump(a);
  EXPECT_EQ(a.detail, "requests_airlock_missing");
}

TEST_F(RealToolTest, PythonSyntaxError) {
  REQUIRE_TOOL("python3");
  Write("s.py", "x = 1\ndef f(:\n    pass\n");
  FailureAnalysis a = Analyze(Sh("python3 s.py"));
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << Dump(a);
  EXPECT_THAT(a.key_lines, ElementsAre(dir_ + "/s.py:2: SyntaxError: invalid syntax")) << Dump(a);
}

TEST_F(RealToolTest, PythonUnittestFailures) {
  REQUIRE_TOOL("python3");
  Write("test_u.py",
        "import unittest\n"
        "class T(unittest.TestCase):\n"
        "    def test_add(self):\n"
        "        self.assertEqual(1 + 1, 3)\n"
        "    def test_err(self):\n"
        "        raise ValueError('boom')\n"
        "    def test_ok(self):\n"
        "        pass\n"
        "unittest.main()\n");
  FailureAnalysis a = Analyze(Sh("python3 test_u.py"));
  EXPECT_EQ(a.kind, FailureKind::kTestFailure) << Dump(a);
  EXPECT_EQ(a.detail, "test_err") << Dump(a);
  EXPECT_THAT(a.key_lines, Contains(dir_ + "/test_u.py:4: AssertionError: 2 != 3")) << Dump(a);
  EXPECT_THAT(a.key_lines, Contains(dir_ + "/test_u.py:6: ValueError: boom")) << Dump(a);
  EXPECT_THAT(a.key_lines, Contains("FAILED (failures=1, errors=1)")) << Dump(a);
}

TEST_F(RealToolTest, PythonNameResolutionFailure) {
  REQUIRE_TOOL("python3");
  FailureAnalysis a = Analyze(
      Sh("python3 -c \"import urllib.request; urllib.request.urlopen('http://pypi.invalid/x')\""));
  EXPECT_EQ(a.kind, FailureKind::kNetworkRequired) << Dump(a);
}

TEST_F(RealToolTest, NodeTypeErrorAtItsFrame) {
  REQUIRE_TOOL("node");
  Write("e.js", "const x = undefined;\nfunction g() { return x.foo; }\ng();\n");
  FailureAnalysis a = Analyze(Sh("node e.js"));
  EXPECT_EQ(a.kind, FailureKind::kUnknown) << Dump(a);
  EXPECT_THAT(a.key_lines,
              Contains(dir_ + "/e.js:2:25: TypeError: Cannot read properties of undefined "
                              "(reading 'foo')"))
      << Dump(a);
}

TEST_F(RealToolTest, NodeMissingModule) {
  REQUIRE_TOOL("node");
  FailureAnalysis a = Analyze(Sh("node -e \"require('lodash-airlock-missing')\""));
  EXPECT_EQ(a.kind, FailureKind::kMissingDependency) << Dump(a);
  EXPECT_EQ(a.detail, "lodash-airlock-missing");
  EXPECT_THAT(a.key_lines, Contains("Error: Cannot find module 'lodash-airlock-missing'"));
}

TEST_F(RealToolTest, NodeTestRunnerFailure) {
  REQUIRE_TOOL("node");
  Write("t.test.js",
        "const test = require('node:test');\n"
        "const assert = require('node:assert');\n"
        "test('adds', () => { assert.strictEqual(1 + 1, 3); });\n"
        "test('ok', () => {});\n");
  FailureAnalysis a = Analyze(Sh("node --test t.test.js"));
  EXPECT_EQ(a.kind, FailureKind::kTestFailure) << Dump(a);
  EXPECT_EQ(a.detail, "adds") << Dump(a);
  EXPECT_THAT(a.key_lines, Contains("not ok 1 - adds")) << Dump(a);
}

TEST_F(RealToolTest, NodeFetchNameResolution) {
  REQUIRE_TOOL("node");
  FailureAnalysis a =
      Analyze(Sh("node -e \"fetch('http://registry.invalid/x').catch(e => { console.error(e); "
                 "process.exit(1); })\""));
  EXPECT_EQ(a.kind, FailureKind::kNetworkRequired) << Dump(a);
  EXPECT_EQ(a.detail, "registry.invalid") << Dump(a);
}

TEST_F(RealToolTest, JavacCompilationError) {
  REQUIRE_TOOL("javac");
  Write("A.java",
        "public class A {\n  public static void main(String[] a) {\n    int x = foo();\n"
        "    String s = 1;\n  }\n}\n");
  FailureAnalysis a = Analyze(Sh("javac A.java"));
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << Dump(a);
  EXPECT_EQ(a.detail, "A.java:3");
  EXPECT_THAT(a.key_lines, ElementsAre("A.java:3: error: cannot find symbol",
                                       "A.java:4: error: incompatible types: int cannot be "
                                       "converted to String"))
      << Dump(a);
}

TEST_F(RealToolTest, JavacMissingPackage) {
  REQUIRE_TOOL("javac");
  Write("T.java", "import org.junit.Test;\npublic class T {}\n");
  FailureAnalysis a = Analyze(Sh("javac T.java"));
  EXPECT_EQ(a.kind, FailureKind::kMissingDependency) << Dump(a);
  EXPECT_EQ(a.detail, "org.junit");
}

TEST_F(RealToolTest, JavaExceptionAtItsFrame) {
  REQUIRE_TOOL("java");
  Write("B.java",
        "public class B {\n  public static void main(String[] a) {\n    Object o = null;\n"
        "    o.toString();\n  }\n}\n");
  FailureAnalysis a = Analyze(Sh("java B.java"));
  ASSERT_THAT(a.key_lines, SizeIs(1)) << Dump(a);
  EXPECT_THAT(a.key_lines[0], StartsWith("B.java:4: java.lang.NullPointerException: "));
}

TEST_F(RealToolTest, CurlAndGitNameResolution) {
  REQUIRE_TOOL("curl");
  FailureAnalysis a = Analyze(Sh("curl -sS http://host.invalid/"));
  EXPECT_EQ(a.kind, FailureKind::kNetworkRequired) << Dump(a);
  EXPECT_EQ(a.detail, "host.invalid");
  REQUIRE_TOOL("git");
  a = Analyze(Sh("git clone -q https://github.invalid/x/y"));
  EXPECT_EQ(a.kind, FailureKind::kNetworkRequired) << Dump(a);
  EXPECT_EQ(a.detail, "github.invalid");
}

// ---- Fixtures: toolchains that are not installed here, or that need the network.

std::string Fixture(const std::string& name) {
  absl::StatusOr<std::string> text = ReadFile(std::string(AIRLOCK_REPORT_TESTDATA) + "/" + name);
  EXPECT_TRUE(text.ok()) << Message(text.status());
  return text.value_or("");
}

// A fixture is stderr (*.stderr.txt), stdout (*.stdout.txt), or both merged (*.txt: given as
// stdout, as a CI log shows it).
FailureAnalysis AnalyzeFixture(const std::string& name, int exit_code = 1) {
  const std::string text = Fixture(name);
  const bool is_stderr = name.find(".stderr.") != std::string::npos;
  return AnalyzeOutput(Classification::kExitNonzero, exit_code, is_stderr ? "" : text,
                       is_stderr ? text : "");
}

std::string Dump(const FailureAnalysis& a) {
  std::string s = fmt::format("kind={} detail={}\n", ToString(a.kind), a.detail);
  for (const std::string& line : a.key_lines) s += "  | " + line + "\n";
  return s;
}

TEST(FixtureTest, MavenNetwork) {
  FailureAnalysis a = AnalyzeFixture("maven_network.txt");
  EXPECT_EQ(a.kind, FailureKind::kNetworkRequired) << Dump(a);
  EXPECT_EQ(a.detail, "repo.maven.apache.org");
  ASSERT_THAT(a.key_lines, SizeIs(1)) << Dump(a);
  EXPECT_THAT(a.key_lines[0], StartsWith("[ERROR] Plugin org.apache.maven.plugins"));
  EXPECT_THAT(a.key_lines[0], EndsWith("..."));
  EXPECT_EQ(a.key_lines[0].size(), kMaxKeyLineBytes);
}

TEST(FixtureTest, MavenCompilationError) {
  FailureAnalysis a = AnalyzeFixture("maven_compile.txt");
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << Dump(a);
  EXPECT_EQ(a.detail, "/work/demo/src/main/java/com/example/App.java:7") << Dump(a);
  EXPECT_THAT(a.key_lines,
              AllOf(Contains("/work/demo/src/main/java/com/example/App.java:7:17: cannot find "
                             "symbol"),
                    Contains("/work/demo/src/main/java/com/example/Util.java:12:9: incompatible "
                             "types: int cannot be converted to java.lang.String")))
      << Dump(a);
  EXPECT_THAT(a.key_lines, Not(Contains(HasSubstr("Help 1")))) << Dump(a);
}

TEST(FixtureTest, MavenTestFailure) {
  FailureAnalysis a = AnalyzeFixture("maven_test.txt");
  EXPECT_EQ(a.kind, FailureKind::kTestFailure) << Dump(a);
  EXPECT_EQ(a.detail, "CalculatorTest.testAdd") << Dump(a);
  EXPECT_THAT(a.key_lines,
              Contains("CalculatorTest.java:14: java.lang.AssertionError: expected:<4> but "
                       "was:<3>"))
      << Dump(a);
}

TEST(FixtureTest, GradleCompilationError) {
  FailureAnalysis a = AnalyzeFixture("gradle_compile.txt");
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << Dump(a);
  EXPECT_THAT(a.key_lines[0], StartsWith("/home/user/demo/app/src/main/java/demo/App.java:9: "
                                         "error: cannot find symbol"));
}

TEST(FixtureTest, GradleTestFailure) {
  FailureAnalysis a = AnalyzeFixture("gradle_test.txt");
  EXPECT_EQ(a.kind, FailureKind::kTestFailure) << Dump(a);
  EXPECT_EQ(a.detail, "AppTest > appHasAGreeting()");
  EXPECT_THAT(a.key_lines, Contains("AppTest.java:12: org.opentest4j.AssertionFailedError"));
  EXPECT_THAT(a.key_lines, Contains("AppTest > handlesEmptyInput() FAILED"));
}

TEST(FixtureTest, GradleMissingDependency) {
  FailureAnalysis a = AnalyzeFixture("gradle_dependency.txt");
  EXPECT_EQ(a.kind, FailureKind::kMissingDependency) << Dump(a);
  EXPECT_EQ(a.detail, "com.example:nonexistent-lib:1.2.3");
}

TEST(FixtureTest, GoBuild) {
  FailureAnalysis a = AnalyzeFixture("go_build.stderr.txt");
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << Dump(a);
  EXPECT_EQ(a.detail, "./main.go:8");
  EXPECT_THAT(a.key_lines, ElementsAre("./main.go:8:2: undefined: greet",
                                       "./main.go:11:14: cannot use \"three\" (untyped string "
                                       "constant) as int value in assignment",
                                       "./util.go:5:1: missing return"));
}

TEST(FixtureTest, GoMissingPackages) {
  FailureAnalysis a = AnalyzeFixture("go_missing.stderr.txt");
  EXPECT_EQ(a.kind, FailureKind::kMissingDependency) << Dump(a);
  EXPECT_EQ(a.detail, "github.com/google/uuid");
  EXPECT_THAT(a.key_lines, SizeIs(2)) << Dump(a);
}

TEST(FixtureTest, GoNetwork) {
  FailureAnalysis a = AnalyzeFixture("go_network.stderr.txt");
  EXPECT_EQ(a.kind, FailureKind::kNetworkRequired) << Dump(a);
  EXPECT_EQ(a.detail, "proxy.golang.org");
}

TEST(FixtureTest, GoTestFailure) {
  FailureAnalysis a = AnalyzeFixture("go_test.stdout.txt");
  EXPECT_EQ(a.kind, FailureKind::kTestFailure) << Dump(a);
  EXPECT_EQ(a.detail, "TestAdd");
  EXPECT_THAT(a.key_lines, Contains("calc_test.go:9: Add(1, 2) = 4; want 3"));
  EXPECT_THAT(a.key_lines, Contains("--- FAIL: TestAdd (0.00s)"));
}

TEST(FixtureTest, GoPanic) {
  FailureAnalysis a = AnalyzeFixture("go_panic.stderr.txt", 2);
  EXPECT_EQ(a.kind, FailureKind::kUnknown) << Dump(a);
  EXPECT_THAT(a.key_lines,
              Contains("/home/user/demo/main.go:12: panic: runtime error: index out of range "
                       "[5] with length 3"))
      << Dump(a);
}

TEST(FixtureTest, PytestFailure) {
  FailureAnalysis a = AnalyzeFixture("pytest_failure.stdout.txt");
  EXPECT_EQ(a.kind, FailureKind::kTestFailure) << Dump(a);
  EXPECT_EQ(a.detail, "tests/test_calc.py::test_add");
  EXPECT_THAT(a.key_lines, Contains("tests/test_calc.py:7: AssertionError"));
  EXPECT_THAT(a.key_lines, Contains("FAILED tests/test_calc.py::test_add - assert 3 == 4"));
  EXPECT_THAT(a.key_lines, Contains("E       assert 3 == 4"));
}

TEST(FixtureTest, PytestCollectionErrorIsAMissingDependency) {
  FailureAnalysis a = AnalyzeFixture("pytest_missing_module.stdout.txt", 2);
  EXPECT_EQ(a.kind, FailureKind::kMissingDependency) << Dump(a);
  EXPECT_EQ(a.detail, "requests");
}

TEST(FixtureTest, JestFailure) {
  FailureAnalysis a = AnalyzeFixture("jest_failure.stderr.txt");
  EXPECT_EQ(a.kind, FailureKind::kTestFailure) << Dump(a);
  EXPECT_EQ(a.detail, "src/sum.test.js");
  EXPECT_THAT(a.key_lines, Contains("● sum › adds 1 + 2 to equal 3"));
  EXPECT_THAT(a.key_lines, Contains("Expected: 4"));
}

TEST(FixtureTest, NpmPackageNotFound) {
  for (const char* name : {"npm_e404.stderr.txt", "npm9_e404.stderr.txt"}) {
    FailureAnalysis a = AnalyzeFixture(name);
    EXPECT_EQ(a.kind, FailureKind::kMissingDependency) << name << Dump(a);
    EXPECT_THAT(a.detail, StartsWith("left-pad")) << name;
    EXPECT_THAT(a.key_lines, Not(Contains(HasSubstr("complete log")))) << name << Dump(a);
    EXPECT_THAT(a.key_lines, Not(Contains(HasSubstr("tarball")))) << name << Dump(a);
  }
}

TEST(FixtureTest, NpmNameResolution) {
  FailureAnalysis a = AnalyzeFixture("npm_enotfound.stderr.txt");
  EXPECT_EQ(a.kind, FailureKind::kNetworkRequired) << Dump(a);
  EXPECT_EQ(a.detail, "registry.invalid");
}

// A bare "error: " is not rustc's alone: git and pip print it too, and neither is a compilation
// error. rustc's own bare errors come with their " --> file:line:col".
TEST(FixtureTest, ABareErrorLineIsNotACompilationError) {
  for (const char* text :
       {"error: pathspec 'nosuchbranch' did not match any file(s) known to git\n",
        "error: subprocess-exited-with-error\n"}) {
    FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 1, "", text);
    EXPECT_NE(a.kind, FailureKind::kCompilationError) << Dump(a);
    EXPECT_THAT(a.key_lines, Contains(std::string(text).substr(0, std::string(text).size() - 1)));
  }
  FailureAnalysis rust =
      AnalyzeOutput(Classification::kExitNonzero, 101, "",
                    "error: expected one of `!` or `::`, found `x`\n --> src/main.rs:2:5\n");
  EXPECT_EQ(rust.kind, FailureKind::kCompilationError) << Dump(rust);
  EXPECT_EQ(rust.detail, "src/main.rs:2");
}

TEST(FixtureTest, CargoAndTsc) {
  FailureAnalysis a = AnalyzeFixture("cargo_build.stderr.txt", 101);
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << Dump(a);
  EXPECT_THAT(a.key_lines, Contains("error[E0425]: cannot find value `y` in this scope"));
  EXPECT_THAT(a.key_lines, Contains("--> src/main.rs:3:13"));
  EXPECT_EQ(a.detail, "src/main.rs:3");
  a = AnalyzeFixture("tsc.stdout.txt", 2);
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << Dump(a);
  EXPECT_EQ(a.detail, "src/index.ts:4");
  EXPECT_THAT(a.key_lines,
              ElementsAre("src/index.ts:4:7: error TS2322: Type 'string' is not assignable to "
                          "type 'number'.",
                          "src/index.ts:9:1: error TS2304: Cannot find name 'consol'."));
}

// ---- Merged streams (the command wrapper analyses its kept log, stdout and stderr together).

TEST_F(RealToolTest, MergedStreams) {
  REQUIRE_TOOL("gcc");
  Write("b.c", kUndeclared);
  ToolRun run = Sh("gcc -c b.c 2>&1");
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, run.exit_code, run.out);
  EXPECT_EQ(a.kind, FailureKind::kCompilationError) << run.out;
  EXPECT_THAT(a.key_lines, Contains(StartsWith("b.c:2:11: error: "))) << run.out;
}

TEST(MergedOutputTest, ShortFixturesForOtherToolchains) {
  struct Case {
    const char* output;
    FailureKind kind;
    const char* key;
  } cases[] = {
      {"=================================== FAILURES ===================================\n"
       "E       assert 3 == 4\n"
       "FAILED tests/test_calc.py::test_add - assert 3 == 4\n"
       "========================= 1 failed, 2 passed in 0.03s ==========================\n",
       FailureKind::kTestFailure, "FAILED tests/test_calc.py::test_add"},
      {"# example.com/m\n./main.go:12:2: undefined: fooBar\n", FailureKind::kCompilationError,
       "./main.go:12:2: undefined: fooBar"},
      {"--- FAIL: TestParse (0.00s)\n    parse_test.go:20: got 1 want 2\nFAIL\n",
       FailureKind::kTestFailure, "parse_test.go:20: got 1 want 2"},
      {"main.go:3:8: package github.com/x/y is not in std (/usr/lib/go/src/github.com/x/y)\n",
       FailureKind::kMissingDependency, "is not in std"},
      {"> Task :compileJava FAILED\nsrc/main/java/A.java:3: error: ';' expected\n",
       FailureKind::kCompilationError, "A.java:3: error"},
      {"e: file:///w/src/Main.kt:4:5 Unresolved reference: foo\n", FailureKind::kCompilationError,
       "/w/src/Main.kt:4:5: Unresolved reference: foo"},
      {"e: /w/src/Main.kt: (4, 5): Unresolved reference: foo\n", FailureKind::kCompilationError,
       "/w/src/Main.kt:4:5: Unresolved reference: foo"},
      {"3 tests completed, 1 failed\n> Task :test FAILED\n", FailureKind::kTestFailure,
       "3 tests completed, 1 failed"},
      {"[ERROR] /w/src/main/java/A.java:[3,10] cannot find symbol\n[ERROR] COMPILATION ERROR\n",
       FailureKind::kCompilationError, "/w/src/main/java/A.java:3:10: cannot find symbol"},
      {"[ERROR] Tests run: 4, Failures: 1, Errors: 0, Skipped: 0\n", FailureKind::kTestFailure,
       "Failures: 1"},
      {"npm ERR! code E404\nnpm ERR! 404 Not Found - GET https://registry.npmjs.org/left-padz - "
       "Not found\nnpm ERR! 404  'left-padz@*' is not in this registry.\n",
       FailureKind::kMissingDependency, "'left-padz@*' is not in this registry"},
      {"npm ERR! code ENOTFOUND\nnpm ERR! network request to https://registry.npmjs.org/x failed, "
       "reason: getaddrinfo ENOTFOUND registry.npmjs.org\n",
       FailureKind::kNetworkRequired, "ENOTFOUND registry.npmjs.org"},
      {"curl: (6) Could not resolve host: pypi.org\n", FailureKind::kNetworkRequired, "pypi.org"},
      {"Tests:       1 failed, 3 passed, 4 total\n", FailureKind::kTestFailure, "1 failed"},
      {"airlock: cannot run no-such-program: No such file or directory\n",
       FailureKind::kCommandNotFound, "cannot run no-such-program"},
  };
  for (const Case& c : cases) {
    FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero,
                                      c.kind == FailureKind::kCommandNotFound ? 127 : 1, c.output);
    EXPECT_EQ(a.kind, c.kind) << c.output << Dump(a);
    EXPECT_THAT(a.key_lines, Contains(HasSubstr(c.key))) << c.output << Dump(a);
  }
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 127,
                                    "airlock: cannot run no-such-program: No such file or "
                                    "directory\n");
  EXPECT_EQ(a.detail, "no-such-program");
}

// ---- Rules that do not depend on one toolchain.

TEST(AnalyzeOutputTest, SuccessHasNoReport) {
  FailureAnalysis a = AnalyzeOutput(Classification::kOk, 0, "ok\n", "warning: x\n");
  EXPECT_EQ(a.kind, FailureKind::kNone);
  EXPECT_THAT(a.key_lines, IsEmpty());
}

TEST(AnalyzeOutputTest, TheClassificationDecidesLimitsAndPolicy) {
  const std::string err = "main.c:1:1: error: x\n";
  EXPECT_EQ(AnalyzeOutput(Classification::kCommandTimeout, -1, "", err).kind,
            FailureKind::kTimeout);
  EXPECT_EQ(AnalyzeOutput(Classification::kResourceExhaustedMemory, -1, "", err).kind,
            FailureKind::kOutOfMemory);
  EXPECT_EQ(AnalyzeOutput(Classification::kPolicyBlocked, 1, "", err).kind,
            FailureKind::kPolicyBlocked);
  FailureAnalysis net = AnalyzeOutput(Classification::kNetworkRequired, 6, "",
                                      "curl: (6) Could not resolve host: example.com\n");
  EXPECT_EQ(net.kind, FailureKind::kNetworkRequired);
  EXPECT_EQ(net.detail, "example.com");
  // The key lines are still there for a timeout.
  EXPECT_THAT(AnalyzeOutput(Classification::kCommandTimeout, -1, "", err).key_lines,
              ElementsAre("main.c:1:1: error: x"));
  EXPECT_EQ(AnalyzeOutput(Classification::kOutputLimit, 1, "", err).kind,
            FailureKind::kCompilationError);
}

TEST(AnalyzeOutputTest, PrecedenceNetworkThenDependencyThenCompileThenTest) {
  const std::string net =
      "ERROR: Could not find a version that satisfies the requirement "
      "flask\nWARNING: Failed to establish a new connection: [Errno -3] "
      "Temporary failure in name resolution host='pypi.org'\n";
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 1, "", net);
  EXPECT_EQ(a.kind, FailureKind::kNetworkRequired);
  EXPECT_EQ(a.detail, "pypi.org");
  a = AnalyzeOutput(Classification::kExitNonzero, 1, "--- FAIL: TestX (0.00s)\n",
                    "./x.go:3:2: undefined: y\n");
  EXPECT_EQ(a.kind, FailureKind::kCompilationError);
  a = AnalyzeOutput(Classification::kExitNonzero, 1, "",
                    "JavaScript heap out of memory\nsomething failed\n");
  EXPECT_EQ(a.kind, FailureKind::kOutOfMemory);
  EXPECT_EQ(a.detail, "JavaScript heap out of memory");
}

TEST(AnalyzeOutputTest, NonMatchingOutputFallsBackToItsLastLines) {
  std::string err;
  for (int i = 0; i < 50; ++i) err += fmt::format("step {}\n", i);
  err += "\n\n";
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 3, "out\n", err);
  EXPECT_EQ(a.kind, FailureKind::kUnknown);
  EXPECT_THAT(a.key_lines, ElementsAre("step 45", "step 46", "step 47", "step 48", "step 49"));
  a = AnalyzeOutput(Classification::kCommandTimeout, -1, "still running 1\nstill running 2", "");
  EXPECT_THAT(a.key_lines, ElementsAre("still running 1", "still running 2"));
}

TEST(AnalyzeOutputTest, KeyLinesAreBoundedDedupedAndInOrder) {
  std::string err;
  for (int i = 0; i < 100; ++i) {
    err +=
        fmt::format("src/f{}.c:{}:1: error: problem {} {}\n", i, i + 1, i, std::string(300, 'x'));
    err += "src/same.c:1:1: error: repeated\n";
  }
  err += "make: *** [Makefile:3: all] Error 1\n";
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 2, "", err);
  ASSERT_THAT(a.key_lines, SizeIs(kMaxKeyLines));
  EXPECT_THAT(a.key_lines[0], StartsWith("src/f0.c:1:1: error: problem 0 xxx"));
  EXPECT_EQ(a.key_lines[1], "src/same.c:1:1: error: repeated");
  EXPECT_THAT(a.key_lines[2], StartsWith("src/f1.c:2:1: error: problem 1"));
  EXPECT_THAT(a.key_lines[19], StartsWith("src/f18.c:19:1:"));
  for (const std::string& line : a.key_lines) EXPECT_LE(line.size(), kMaxKeyLineBytes);
  EXPECT_EQ(a.key_lines[0].size(), kMaxKeyLineBytes);
  EXPECT_EQ(a.detail, "src/f0.c:1");
}

TEST(AnalyzeOutputTest, ContextLinesFillWhatKeyLinesLeave) {
  const std::string err =
      "make[1]: *** [sub.mk:4: x.o] Error 1\nsrc/a.c:1:1: error: bad\nmake: *** [all] Error 2\n";
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 2, "", err);
  EXPECT_THAT(a.key_lines, ElementsAre("make[1]: *** [sub.mk:4: x.o] Error 1",
                                       "src/a.c:1:1: error: bad", "make: *** [all] Error 2"));
}

TEST(AnalyzeOutputTest, CarriageReturnsAndControlCharacters) {
  FailureAnalysis a = AnalyzeOutput(
      Classification::kExitNonzero, 1, "",
      "C:\\x>build\r\nmain.c:3:1: error: bad\tthing\x07\r\nbash: foo-x: command not found\r\n");
  EXPECT_THAT(a.key_lines,
              ElementsAre("main.c:3:1: error: bad thing?", "bash: foo-x: command not found"));
  EXPECT_EQ(a.detail, "foo-x");
}

TEST(AnalyzeOutputTest, StdoutAndStderrBothCount) {
  FailureAnalysis a =
      AnalyzeOutput(Classification::kExitNonzero, 1, "FAILED tests/t.py::test_a - assert 0\n",
                    "warning: deprecated\n");
  EXPECT_EQ(a.kind, FailureKind::kTestFailure);
  EXPECT_THAT(a.key_lines, ElementsAre("FAILED tests/t.py::test_a - assert 0"));
}

TEST(AnalyzeOutputTest, BinaryAndHugeInput) {
  std::string out;
  for (int i = 0; i < (1 << 20); ++i) out.push_back(static_cast<char>((i * 7919) & 0xff));
  std::string log;
  const std::string line = "[ 42%] Building CXX object src/engine/CMakeFiles/e.dir/mounts.cc.o\n";
  while (log.size() < (32u << 20)) {
    log += line;
    if (log.size() % 997 == 0) log += "src/x.cc:1:1: warning: unused [-Wunused]\n";
  }
  log += "src/late.cc:9:3: error: the only error\n";
  FailureAnalysis a = AnalyzeOutput(Classification::kExitNonzero, 1, out, log);
  EXPECT_EQ(a.kind, FailureKind::kCompilationError);
  EXPECT_THAT(a.key_lines, ElementsAre("src/late.cc:9:3: error: the only error"));
  // Every line an error: bounded output, and no slower than linear.
  std::string errors;
  while (errors.size() < (8u << 20)) errors += "Error: something failed at step 12\n";
  a = AnalyzeOutput(Classification::kExitNonzero, 1, "", errors);
  EXPECT_THAT(a.key_lines, ElementsAre("Error: something failed at step 12"));
}

// ---- The rendered report.

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

size_t Columns(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

void ExpectFitsOneScreen(const std::string& report) {
  std::vector<std::string> lines = Lines(report);
  EXPECT_LE(lines.size(), kReportLines) << report;
  for (const std::string& line : lines) EXPECT_LE(Columns(line), kReportColumns) << line;
}

TEST(RenderReportTest, CompilationFailure) {
  CommandSpec spec;
  spec.argv = {"make", "-j2", "CFLAGS=-O2 -g"};
  spec.workdir = "/sandbox/workspace/app";
  CommandResult r;
  r.classification = Classification::kExitNonzero;
  r.exit_code = 2;
  r.duration_ms = 12345;
  r.stdout_bytes = 2048;
  r.stderr_bytes = 300;
  r.failure = FailureKind::kCompilationError;
  r.failure_detail = "src/main.c:3";
  r.key_lines = {"src/main.c:3:5: error: 'x' undeclared", "make: *** [Makefile:2: all] Error 1"};
  r.raw_log = "/var/lib/airlock/logs/cmd-1.log";
  const std::string report = RenderReport(spec, r);
  EXPECT_EQ(report,
            "$ make -j2 'CFLAGS=-O2 -g'\n"
            "  in /sandbox/workspace/app\n"
            "exit 2 after 12.3 s [EXIT_NONZERO]\n"
            "likely failure: compilation error: src/main.c:3\n"
            "key lines:\n"
            "  src/main.c:3:5: error: 'x' undeclared\n"
            "  make: *** [Makefile:2: all] Error 1\n"
            "output: stdout 2.0 KiB, stderr 300 B\n"
            "raw log: /var/lib/airlock/logs/cmd-1.log (redacted; not quoted here)\n");
}

TEST(RenderReportTest, TimeoutSignalsLimitsAndViolations) {
  CommandSpec spec;
  spec.argv = {"sleep", "100"};
  spec.timeout = std::chrono::milliseconds(30000);
  CommandResult r;
  r.classification = Classification::kCommandTimeout;
  r.timed_out = true;
  r.exit_code = -1;
  r.signal = 9;
  r.duration_ms = 30012;
  r.failure = FailureKind::kTimeout;
  std::string report = RenderReport(spec, r);
  EXPECT_THAT(report, HasSubstr("timed out after 30.0 s (limit 30.0 s) [COMMAND_TIMEOUT]\n"));
  EXPECT_THAT(report, HasSubstr("likely failure: timeout\n"));
  // The CPU time limit (cpuTimeSeconds) ended it, not the wall clock.
  r.timed_out = false;
  r.duration_ms = 1104;
  report = RenderReport(spec, r);
  EXPECT_THAT(report, HasSubstr("stopped at its CPU time limit after 1.1 s [COMMAND_TIMEOUT]"));
  EXPECT_THAT(report, Not(HasSubstr("timed out")));

  r = CommandResult{};
  r.classification = Classification::kResourceExhaustedMemory;
  r.exit_code = -1;
  r.signal = 9;
  r.duration_ms = 800;
  r.failure = FailureKind::kOutOfMemory;
  r.usage.memory_peak_bytes = 512 << 20;
  r.usage.oom_kills = 1;
  r.stderr_preview = "allocating\nstill allocating\n";
  report = RenderReport(spec, r);
  EXPECT_THAT(report, HasSubstr("killed by SIGKILL after 800 ms [RESOURCE_EXHAUSTED_MEMORY]\n"));
  EXPECT_THAT(report, HasSubstr("memory: the sandbox's limit was reached (peak 512.0 MiB, 1 OOM "
                                "kill)\n"));
  EXPECT_THAT(report, HasSubstr("last lines of stderr:\n  allocating\n  still allocating\n"));

  r = CommandResult{};
  r.classification = Classification::kPolicyBlocked;
  r.exit_code = 1;
  r.failure = FailureKind::kPolicyBlocked;
  for (int i = 0; i < 5; ++i) {
    r.violations.push_back({"BlockedNetworkEgress", fmt::format("connect 10.0.0.{}:443", i), {}});
  }
  r.degraded = {"landlock", "seccomp-notify"};
  report = RenderReport(spec, r);
  EXPECT_THAT(report, HasSubstr("blocked: BlockedNetworkEgress: connect 10.0.0.0:443\n"));
  EXPECT_THAT(report, HasSubstr("blocked: 2 more\n"));
  EXPECT_THAT(report, HasSubstr("degraded protections: landlock, seccomp-notify\n"));
}

TEST(RenderReportTest, CommandRefusedBeforeItRan) {
  CommandSpec spec;
  spec.argv = {"sudo", "make", "install"};
  CommandResult r;
  r.classification = Classification::kPolicyBlocked;
  r.exit_code = 126;
  r.failure = FailureKind::kPolicyBlocked;
  r.failure_detail = "privilege-escalation/sudo";
  r.violations.push_back({kCommandPolicyViolation,
                          "privilege-escalation/sudo: gains privileges",
                          {{"instead", "run it as the sandbox user"}}});
  r.violations.push_back({"BlockedNetworkEgress", "connect 10.0.0.1:443", {{"instead", ""}}});
  const std::string report = RenderReport(spec, r);
  EXPECT_THAT(report, HasSubstr("not run: refused by the command policy [POLICY_BLOCKED]\n"));
  EXPECT_THAT(report, Not(HasSubstr("exit 126")));
  EXPECT_THAT(report, HasSubstr("blocked: command_policy: privilege-escalation/sudo: gains "
                                "privileges\ninstead: run it as the sandbox user\n"));
  // An empty or missing piece of advice adds no line.
  EXPECT_THAT(report, HasSubstr("blocked: BlockedNetworkEgress: connect 10.0.0.1:443\noutput:"));
}

TEST(RenderReportTest, FitsOneScreenWhateverTheInput) {
  CommandSpec spec;
  spec.argv = {"python3", "-c", std::string(500, 'x'), "\xc3\xa9\xc3\xa9\xc3\xa9"};
  CommandResult r;
  r.classification = Classification::kSandboxError;
  r.exit_code = -1;
  r.error = "create cgroup: " + std::string(300, 'e') + "\nsecond line";
  r.failure = FailureKind::kUnknown;
  r.failure_detail = std::string(300, 'd');
  for (int i = 0; i < 20; ++i) r.key_lines.push_back(std::string(200, 'k'));
  for (int i = 0; i < 10; ++i) r.violations.push_back({"seccomp", std::string(200, 'v'), {}});
  r.degraded.assign(30, "protection");
  r.truncated = true;
  r.raw_log = std::string(200, 'l');
  const std::string report = RenderReport(spec, r);
  ExpectFitsOneScreen(report);
  EXPECT_THAT(report, HasSubstr("; truncated at the log limit"));
  EXPECT_THAT(report, HasSubstr("sandbox error: create cgroup: eee"));
}

TEST(RenderReportTest, KeyLinesGiveWayWhenTheScreenIsFull) {
  CommandSpec spec;
  spec.argv = {"x"};
  CommandResult r;
  r.classification = Classification::kPolicyBlocked;
  r.exit_code = 1;
  for (int i = 0; i < 50; ++i) r.key_lines.push_back(fmt::format("line {}", i));
  r.degraded = {"a"};
  const std::string report = RenderReport(spec, r);
  ExpectFitsOneScreen(report);
  EXPECT_THAT(Lines(report), SizeIs(kReportLines));
  EXPECT_THAT(report, HasSubstr("more)\n"));
}

TEST(RenderReportTest, RedactsTheCommandLine) {
  absl::StatusOr<Redactor> redactor = Redactor::Create({"lease-secret-123456"});
  ASSERT_TRUE(redactor.ok());
  CommandSpec spec;
  spec.argv = {"curl", "-H", "X-Token: lease-secret-123456", "https://api.example.com"};
  CommandResult r;
  r.exit_code = 0;
  const std::string report = RenderReport(spec, r, &*redactor);
  EXPECT_THAT(report,
              StartsWith("$ curl -H 'X-Token: [REDACTED:secret]' https://api.example.com\n"));
  EXPECT_THAT(report, Not(HasSubstr("likely failure")));
}

}  // namespace
}  // namespace airlock
