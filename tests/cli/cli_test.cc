// `airlock run` and `airlock spec` as a user (or an agent's harness) calls them: exit codes,
// stdout/stderr, and the --json CommandResult.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

#include "common/files.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace airlock {
namespace {

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `airlock ARGS...` with stdout and stderr captured to files.
Outcome Airlock(const std::string& args) {
  char out_path[] = "/tmp/airlock-cli-out-XXXXXX";
  char err_path[] = "/tmp/airlock-cli-err-XXXXXX";
  close(mkstemp(out_path));
  close(mkstemp(err_path));
  std::string cmd = std::string(AIRLOCK_BIN) + " " + args + " >" + out_path + " 2>" + err_path +
                    " </dev/null";
  int status = std::system(cmd.c_str());
  Outcome o;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.out = ReadFile(out_path).value_or("");
  o.err = ReadFile(err_path).value_or("");
  unlink(out_path);
  unlink(err_path);
  return o;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "airlock run needs root here";
    char tmpl[] = "/tmp/airlock-cli-logs-XXXXXX";
    logs_ = mkdtemp(tmpl);
  }
  void TearDown() override {
    if (!logs_.empty()) (void)RemoveTree(logs_);
  }
  std::string Run(const std::string& rest) { return "run --log-dir " + logs_ + " " + rest; }
  std::string logs_;
};

TEST_F(CliTest, ExitCodeIsTheCommands) {
  Outcome o = Airlock(Run("-- sh -c 'echo out; echo err >&2; exit 7'"));
  EXPECT_EQ(o.exit_code, 7);
  EXPECT_EQ(o.out, "out\n");
  EXPECT_NE(o.err.find("err\n"), std::string::npos);
  EXPECT_NE(o.err.find("airlock: EXIT_NONZERO · exit 7"), std::string::npos) << o.err;
}

// Repeatable flags take one value each, so whatever follows `--` belongs to the command, even
// right after --mount or --env (an option-like argument such as `-c` once ended in exit 2).
TEST_F(CliTest, EverythingAfterTheSeparatorIsTheCommand) {
  Outcome o = Airlock(Run("--mount /usr:/opt/usr:ro --env A=1 --env B=2 -- sh -c 'echo $A$B' -c"));
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "12\n");
  Outcome dash = Airlock(Run("--env A=1 -- echo --json --env"));
  EXPECT_EQ(dash.exit_code, 0) << dash.err;
  EXPECT_EQ(dash.out, "--json --env\n");
}

TEST_F(CliTest, JsonIsTheCommandResult) {
  Outcome o = Airlock(Run("--json -- sh -c 'echo hello'"));
  EXPECT_EQ(o.exit_code, 0) << o.err;
  nlohmann::json j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["classification"], "OK");
  EXPECT_EQ(j["stdout_preview"], "hello\n");
  EXPECT_EQ(j["stdout_bytes"], 6);
  for (const char* key : {"command_id", "exit_code", "signal", "duration_ms", "timed_out",
                          "truncated", "stderr_bytes", "stderr_preview", "stdout_sha256",
                          "raw_log", "usage", "violations", "degraded"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  // The raw log is kept where --log-dir says.
  EXPECT_EQ(j["raw_log"].get<std::string>().rfind(logs_, 0), 0u);
  EXPECT_EQ(ReadFile(j["raw_log"].get<std::string>()).value_or("?"), "hello\n");
}

TEST_F(CliTest, TimeoutAndSignals) {
  Outcome o = Airlock(Run("--timeout 500ms -- sleep 30"));
  EXPECT_EQ(o.exit_code, 128 + 9);
  EXPECT_NE(o.err.find("COMMAND_TIMEOUT"), std::string::npos) << o.err;
}

TEST_F(CliTest, BadFlagsAreOneLineAndExit2) {
  for (const char* args : {"--memory abc -- true", "--level 7 -- true", "--pids x -- true",
                           "--mount /x -- true", "--env NOEQUALS -- true", "--timeout -1s -- true",
                           "--network wifi -- true", "--allow-degraded=seccomp -- true",
                           "--spec /no/such/file.yaml -- true"}) {
    Outcome o = Airlock(Run(args));
    EXPECT_EQ(o.exit_code, 2) << args << ": " << o.err;
    EXPECT_EQ(o.err.rfind("airlock: ", 0), 0u) << args << ": " << o.err;
    EXPECT_EQ(o.out, "") << args;
  }
  Outcome missing = Airlock("run");
  EXPECT_EQ(missing.exit_code, 2);
}

TEST_F(CliTest, SandboxErrorIs125) {
  // A level this backend cannot provide fails closed before anything runs.
  Outcome o = Airlock(Run("--level 3 -- true"));
  EXPECT_EQ(o.exit_code, 125) << o.err;
  EXPECT_NE(o.err.find("level 3 (gvisor) is not served by the native backend"), std::string::npos)
      << o.err;
  o = Airlock(Run("--mount /definitely/missing:/opt/x -- true"));
  EXPECT_EQ(o.exit_code, 125) << o.err;
  EXPECT_NE(o.err.find("/definitely/missing"), std::string::npos) << o.err;
}

TEST_F(CliTest, RiskClassCanOnlyBeTightened) {
  Outcome o = Airlock(Run("--risk R1 --level 1 -- true"));
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find("level"), std::string::npos) << o.err;
  o = Airlock(Run("--risk R0 --level 2 -- true"));  // tighter than R0's level 1: allowed
  EXPECT_EQ(o.exit_code, 0) << o.err;
}

TEST_F(CliTest, SpecCheckAndExplain) {
  Outcome ok = Airlock(std::string("spec check ") + AIRLOCK_EXAMPLES "/full.yaml");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  char bad[] = "/tmp/airlock-bad-spec-XXXXXX.yaml";
  int fd = mkstemps(bad, 5);
  ASSERT_TRUE(WriteAll(fd, "resources:\n  memoryMb: 0\nbogus: 1\n").ok());
  close(fd);
  Outcome o = Airlock(std::string("spec check ") + bad);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("resources.memoryMb"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("bogus"), std::string::npos) << o.err;
  unlink(bad);
  Outcome e = Airlock(std::string("spec explain ") + AIRLOCK_EXAMPLES "/minimal.json");
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_NE(e.out.find("memoryMb: 512"), std::string::npos) << e.out;
}

TEST_F(CliTest, SecretsFromTheEnvironmentAreNeverPassedIn) {
  Outcome o = Airlock("run --log-dir " + logs_ + " --env VISIBLE=1 -- env");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_NE(o.out.find("VISIBLE=1"), std::string::npos);
  EXPECT_EQ(o.out.find("PWD="), std::string::npos) << "the caller's environment leaked in";
}

}  // namespace
}  // namespace airlock
