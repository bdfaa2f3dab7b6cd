// `airlock run` and `airlock spec` as a user (or an agent's harness) calls them: exit codes,
// stdout/stderr, and the --json CommandResult.
#include <dirent.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/files.h"
#include "fmt/format.h"
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
  std::string cmd =
      std::string(AIRLOCK_BIN) + " " + args + " >" + out_path + " 2>" + err_path + " </dev/null";
  int status = std::system(cmd.c_str());
  Outcome o;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.out = ReadFile(out_path).value_or("");
  o.err = ReadFile(err_path).value_or("");
  unlink(out_path);
  unlink(err_path);
  return o;
}

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.insert(e->d_name);
    }
    closedir(d);
  }
  return names;
}

// The pid of a process whose command line is exactly `argv`, or 0.
pid_t ProcessWithCmdline(const std::vector<std::string>& argv) {
  std::string want;
  for (const std::string& a : argv) want += a + '\0';
  for (const std::string& name : Entries("/proc")) {
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (ReadFile("/proc/" + name + "/cmdline").value_or("") == want) return std::stoi(name);
  }
  return 0;
}

// Polls `probe` for up to 30 s (a sanitizer build's start under load) until it returns non-zero;
// that value, or 0.
pid_t WaitFor(const std::function<pid_t()>& probe) {
  for (int i = 0; i < 3000; ++i) {
    if (pid_t p = probe(); p != 0) return p;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

// The sandboxes (sb-...) with a cgroup under `base`, in any v1 hierarchy or in the v2 tree.
std::set<std::string> SandboxesUnder(const std::string& base) {
  std::set<std::string> ids;
  std::vector<std::string> dirs = {"/sys/fs/cgroup/" + base};
  for (const std::string& h : Entries("/sys/fs/cgroup")) {
    dirs.push_back(fmt::format("/sys/fs/cgroup/{}/{}", h, base));
  }
  for (const std::string& dir : dirs) {
    for (const std::string& id : Entries(dir)) {
      if (id.rfind("sb-", 0) == 0) ids.insert(id);
    }
  }
  return ids;
}

// Starts `airlock ARGS...` in the background with its sandboxes' cgroups under `base` (so that a
// test finds its own), stdout to `out_path` (or /dev/null) and stderr to /dev/null.
pid_t StartAirlock(const std::string& base, const std::vector<std::string>& args,
                   const char* out_path = nullptr) {
  std::vector<char*> argv = {const_cast<char*>("airlock")};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("AIRLOCK_CGROUP_BASE", base.c_str(), 1);
    int null = open("/dev/null", O_RDWR);
    dup2(out_path != nullptr ? open(out_path, O_WRONLY) : null, 1);
    dup2(null, 2);
    execv(AIRLOCK_BIN, argv.data());
    _exit(127);
  }
  return pid;
}

// Removes the cgroup subtree `base` from every hierarchy (innermost first). A sandbox whose
// airlock was killed may still have processes exiting in it: tried again for up to 10 s.
void RemoveCgroupsOnce(const std::string& base);
void RemoveCgroups(const std::string& base) {
  for (int i = 0; i < 1000; ++i) {
    RemoveCgroupsOnce(base);
    bool left = access(("/sys/fs/cgroup/" + base).c_str(), F_OK) == 0;
    for (const std::string& h : Entries("/sys/fs/cgroup")) {
      if (access(fmt::format("/sys/fs/cgroup/{}/{}", h, base).c_str(), F_OK) == 0) left = true;
    }
    if (!left) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "cgroups left under " << base;
}
void RemoveCgroupsOnce(const std::string& base) {
  std::function<void(const std::string&)> remove = [&](const std::string& dir) {
    for (const std::string& e : Entries(dir)) {
      std::string path = dir + "/" + e;
      DIR* d = opendir(path.c_str());
      if (d == nullptr) continue;
      closedir(d);
      remove(path);
    }
    rmdir(dir.c_str());
  };
  remove("/sys/fs/cgroup/" + base);
  for (const std::string& h : Entries("/sys/fs/cgroup")) remove("/sys/fs/cgroup/" + h + "/" + base);
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

// The command permission policy refuses `sudo ...` before any sandbox is made: exit 126, the
// result POLICY_BLOCKED naming the rule, and the command never ran (no marker file appears).
TEST_F(CliTest, CommandPolicyRefusesBeforeTheSandboxIsMade) {
  std::string marker = logs_ + "/ran";
  Outcome o = Airlock(Run("--json -- sudo touch " + marker));
  EXPECT_EQ(o.exit_code, 126) << o.err;
  nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  EXPECT_EQ(j.value("classification", ""), "POLICY_BLOCKED") << o.out;
  EXPECT_NE(o.out.find("privilege-escalation/sudo"), std::string::npos) << o.out;
  EXPECT_FALSE(ReadFile(marker).ok());
}

TEST_F(CliTest, JsonIsTheCommandResult) {
  Outcome o = Airlock(Run("--json -- sh -c 'echo hello'"));
  EXPECT_EQ(o.exit_code, 0) << o.err;
  nlohmann::json j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["classification"], "OK");
  EXPECT_EQ(j["stdout_preview"], "hello\n");
  EXPECT_EQ(j["stdout_bytes"], 6);
  for (const char* key : {"command_id", "exit_code", "signal", "duration_ms", "timed_out",
                          "truncated", "stderr_bytes", "stderr_preview", "stdout_sha256", "raw_log",
                          "usage", "violations", "degraded"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  // The raw log is kept where --log-dir says.
  EXPECT_EQ(j["raw_log"].get<std::string>().rfind(logs_, 0), 0u);
  EXPECT_EQ(ReadFile(j["raw_log"].get<std::string>()).value_or("?"), "hello\n");

  // A command that prints nothing keeps no log: no file, and no path in the result.
  size_t logs_before = std::distance(std::filesystem::directory_iterator(logs_),
                                     std::filesystem::directory_iterator());
  Outcome quiet = Airlock(Run("--json -- true"));
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(nlohmann::json::parse(quiet.out)["raw_log"], "");
  EXPECT_EQ(static_cast<size_t>(std::distance(std::filesystem::directory_iterator(logs_),
                                              std::filesystem::directory_iterator())),
            logs_before);
  Outcome human = Airlock(Run("-- true"));
  EXPECT_EQ(human.err.find(" log "), std::string::npos) << human.err;
}

TEST_F(CliTest, TimeoutAndSignals) {
  Outcome o = Airlock(Run("--timeout 500ms -- sleep 30"));
  EXPECT_EQ(o.exit_code, 128 + 9);
  EXPECT_NE(o.err.find("COMMAND_TIMEOUT"), std::string::npos) << o.err;
}

TEST_F(CliTest, BadFlagsAreOneLineAndExit2) {
  for (const char* args :
       {"--memory abc -- true", "--level 7 -- true", "--pids x -- true", "--mount /x -- true",
        "--env NOEQUALS -- true", "--timeout -1s -- true", "--network wifi -- true",
        "--allow-degraded=seccomp -- true", "--spec /no/such/file.yaml -- true",
        // A bare number would be bytes, not the spec's MiB; over the spec's 7-day maximum.
        "--memory 512 -- true", "--json --memory 100K -- true", "--timeout 200h -- true",
        // Host paths that do not exist.
        "--workspace /definitely/missing -- true", "--mount /definitely/missing:/opt/x -- true",
        "--json --rootfs /definitely/missing -- true",
        // Two problems at once: still one line.
        "--risk R0 --network open -- true"}) {
    Outcome o = Airlock(Run(args));
    EXPECT_EQ(o.exit_code, 2) << args << ": " << o.err;
    EXPECT_EQ(o.err.rfind("airlock: ", 0), 0u) << args << ": " << o.err;
    EXPECT_EQ(o.err.find('\n'), o.err.size() - 1) << args << ": " << o.err;
    EXPECT_EQ(o.out, "") << args << ": a usage error prints no result, even with --json";
  }
  Outcome missing = Airlock("run");
  EXPECT_EQ(missing.exit_code, 2);
}

// A flag that lands on a part of the spec file of another type (`resources: 5` and --memory) is
// the spec's error, named with its field (it once aborted airlock with an uncaught exception);
// a --risk below the spec's riskClass, a --trace-all that would replace the spec's stricter
// default action and a --trace of a call the spec's default or the engine's profile refuses are
// refused, as they would loosen the spec.
TEST_F(CliTest, FlagsCannotBreakOrLoosenTheSpecFile) {
  struct Case {
    const char* spec;
    const char* flags;
    const char* error;
  };
  for (const Case& c : std::vector<Case>{
           {"resources: 5\n", "--memory 1G", "resources: expected object, got integer"},
           {"env: [1]\n", "--env A=b", "env: expected object, got array"},
           {"filesystem:\n  mounts: 3\n", "--mount /tmp:/x:ro",
            "filesystem.mounts: expected array, got integer"},
           {"[1, 2]\n", "--memory 1G", "(root): expected object, got array"},
           {"process:\n  syscallDefaultAction: 5\n", "--supervisor notify",
            "process.syscallDefaultAction: expected string, got integer"},
           {"process: 5\n", "--supervisor notify", "process: expected object, got integer"},
           {"riskClass: R2\n", "--risk R0",
            "--risk R0: lower than the spec's riskClass R2; a risk class can only be raised"},
           {"riskClass: r0\n", "--risk R1",
            "riskClass: \"r0\" is not one of: R0, R1, R2, R3, R4, R5"},
           {"process:\n  supervisor: notify\n  syscallDefaultAction: kill\n", "--trace-all",
            "--trace-all: the spec's syscallDefaultAction is kill"},
           // A traced call runs: one the spec's default refuses, or one the engine's profile
           // does not allow (a rule would widen it), would run because of a flag.
           {"process:\n  supervisor: ptrace\n  syscallDefaultAction: errno(EACCES)\n",
            "--trace mkdir", "--trace mkdir: the spec's syscallDefaultAction is errno(EACCES)"},
           {"process:\n  supervisor: ptrace\n", "--trace process_mrelease",
            "--trace process_mrelease: the sandbox's seccomp profile does not allow "
            "process_mrelease"},
       }) {
    std::string path = logs_ + "/spec.yaml";
    ASSERT_TRUE(WriteFileAtomic(path, c.spec).ok());
    Outcome o = Airlock(Run(fmt::format("--spec {} {} -- true", path, c.flags)));
    EXPECT_EQ(o.exit_code, 2) << c.spec << c.flags << ": " << o.err;
    EXPECT_EQ(o.err.rfind(fmt::format("airlock: {}", c.error), 0), 0u) << o.err;
  }
  // Raising the risk class is the caller's to do.
  ASSERT_TRUE(WriteFileAtomic(logs_ + "/spec.yaml", "riskClass: R0\n").ok());
  EXPECT_EQ(Airlock(Run("--spec " + logs_ + "/spec.yaml --risk R1 -- true")).exit_code, 0);
}

// Risk class R0 is mechanical and read-only: the workspace it is given is bound read-only, so
// the command reads it and writes nothing to the host.
TEST_F(CliTest, RiskClassR0GetsAReadOnlyWorkspace) {
  const std::string ws = logs_ + "/ws";
  ASSERT_EQ(mkdir(ws.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomic(ws + "/a.txt", "data\n").ok());
  ASSERT_EQ(chmod((ws + "/a.txt").c_str(), 0644), 0);
  Outcome o = Airlock(
      Run("--risk R0 --workspace " + ws + " -- sh -c 'cat a.txt; touch b.txt || echo refused'"));
  EXPECT_EQ(o.out.rfind("data\nrefused\n", 0), 0u) << o.out << o.err;
  EXPECT_FALSE(std::filesystem::exists(ws + "/b.txt"));
  // A spec file of class R0 raised by --risk keeps what R0 derived: the read-only workspace.
  ASSERT_TRUE(WriteFileAtomic(logs_ + "/r0.yaml", "riskClass: R0\n").ok());
  o = Airlock(Run("--spec " + logs_ + "/r0.yaml --risk R1 --workspace " + ws +
                  " -- sh -c 'touch b.txt || echo refused'"));
  EXPECT_EQ(o.out.rfind("refused\n", 0), 0u) << o.out << o.err;
  EXPECT_FALSE(std::filesystem::exists(ws + "/b.txt"));
}

TEST_F(CliTest, ALevelOtherThanOneOrTwoIsAUsageError) {
  // `airlock run` is the native backend: a level it does not provide is refused before anything
  // runs, with exit 2 as a risk class that needs level 3 or 4 is.
  for (const char* args : {"--level 3 -- true", "--level 4 --json -- true", "--level 0 -- true",
                           "--risk R4 -- true"}) {
    Outcome o = Airlock(Run(args));
    EXPECT_EQ(o.exit_code, 2) << args << ": " << o.err;
    EXPECT_EQ(o.out, "") << args;
    EXPECT_NE(o.err.find("level"), std::string::npos) << args << ": " << o.err;
  }
  EXPECT_NE(Airlock(Run("--level 3 -- true"))
                .err.find("level 3 (gvisor): airlock run provides levels 1 and 2"),
            std::string::npos);
  EXPECT_NE(Airlock(Run("--level 0 -- true")).err.find("level 0 is `airlock interp`"),
            std::string::npos);
  // So is what a valid spec asks for and this backend never provides.
  for (const char* spec :
       {"process:\n  capabilities: [CAP_NET_RAW]\n", "process:\n  noNewPrivs: false\n"}) {
    ASSERT_TRUE(WriteFileAtomic(logs_ + "/spec.yaml", spec).ok());
    Outcome o = Airlock(Run("--spec " + logs_ + "/spec.yaml -- true"));
    EXPECT_EQ(o.exit_code, 2) << spec << o.err;
    EXPECT_NE(o.err.find("process."), std::string::npos) << o.err;
  }
}

TEST_F(CliTest, SandboxErrorIs125) {
  // With --json the sandbox error is a CommandResult with every field.
  Outcome o = Airlock(Run("--json --tools-dir /definitely/missing -- true"));
  EXPECT_EQ(o.exit_code, 125) << o.err;
  nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << o.out;
  EXPECT_EQ(j["classification"], "SANDBOX_ERROR");
  EXPECT_NE(j["error"].get<std::string>().find("airlock-init not found"), std::string::npos);
  for (const char* field :
       {"command_id", "exit_code", "signal", "duration_ms", "timed_out", "truncated",
        "stdout_bytes", "stderr_bytes", "stdout_preview", "stderr_preview", "stdout_sha256",
        "raw_log", "usage", "violations", "degraded"}) {
    EXPECT_TRUE(j.contains(field)) << field;
  }
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

TEST_F(CliTest, SupervisorFlagsReportWhatTheCommandDid) {
  for (const char* mode : {"notify", "ptrace"}) {
    Outcome o =
        Airlock(Run(fmt::format("--json --supervisor {} -- sh -c 'cat /etc/hostname'", mode)));
    ASSERT_EQ(o.exit_code, 0) << o.err;
    nlohmann::json j = nlohmann::json::parse(o.out);
    ASSERT_TRUE(j.contains("syscalls")) << o.out;
    EXPECT_EQ(j["syscalls"]["supervisor"], mode);
    // Without rules, the supervisor reports programs, files and connections.
    EXPECT_EQ(j["syscalls"]["execs"][0]["path"], "/usr/bin/sh") << j["syscalls"].dump(1);
    EXPECT_EQ(j["syscalls"]["execs"][1]["argv"], nlohmann::json({"cat", "/etc/hostname"}));
    bool hostname = false;
    for (const auto& f : j["syscalls"]["files"]) hostname |= f["path"] == "/etc/hostname";
    EXPECT_TRUE(hostname) << j["syscalls"].dump(1);
  }
  Outcome human = Airlock(Run("--supervisor ptrace -- true"));
  EXPECT_EQ(human.exit_code, 0);
  EXPECT_NE(human.err.find("airlock: syscalls (ptrace): "), std::string::npos) << human.err;
  EXPECT_NE(human.err.find("airlock:   exec /usr/bin/true"), std::string::npos) << human.err;
}

TEST_F(CliTest, DenyAndTraceFlags) {
  Outcome o =
      Airlock(Run("--json --supervisor notify --deny mkdir=EDQUOT,mkdirat=EDQUOT "
                  "--trace getcwd -- sh -c 'mkdir /sandbox/tmp/x; pwd'"));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  nlohmann::json j = nlohmann::json::parse(o.out);
  EXPECT_NE(j["stderr_preview"].get<std::string>().find("Disk quota exceeded"), std::string::npos);
  EXPECT_EQ(j["syscalls"]["denied"], 1);
  EXPECT_EQ(j["violations"][0]["kind"], "syscall");
  EXPECT_EQ(j["violations"][0]["data"]["action"], "errno(EDQUOT)");
  Outcome no_supervisor = Airlock(Run("--trace openat -- true"));
  EXPECT_EQ(no_supervisor.exit_code, 2);
  EXPECT_NE(no_supervisor.err.find("--trace and --trace-all need --supervisor notify or ptrace"),
            std::string::npos)
      << no_supervisor.err;
  Outcome bad_rule = Airlock(Run("--supervisor ptrace --trace ptrace -- true"));
  EXPECT_EQ(bad_rule.exit_code, 2);
  EXPECT_NE(bad_rule.err.find("process.syscalls[0].names[0]: ptrace is always denied"),
            std::string::npos)
      << bad_rule.err;
}

// Case 49 of the escape list: killing the supervisor's process (here all of `airlock run`)
// leaves nothing of the sandbox running unsupervised.
TEST_F(CliTest, KillingTheSupervisorKillsTheSandbox) {
  for (const char* mode : {"notify", "ptrace"}) {
    SCOPED_TRACE(mode);
    std::string base = fmt::format("airlock-cli-orphan-{}", getpid());
    std::string marker = fmt::format("4242.{}", getpid());
    pid_t airlock = StartAirlock(base, {"run", "--log-dir", logs_, "--supervisor", mode,
                                        "--trace-all", "--", "sleep", marker});
    pid_t sleeper = WaitFor([&] { return ProcessWithCmdline({"sleep", marker}); });
    ASSERT_GT(sleeper, 0) << "the sandboxed command never started";
    ASSERT_EQ(kill(airlock, SIGKILL), 0);
    waitpid(airlock, nullptr, 0);
    EXPECT_EQ(WaitFor([&] {
                return ProcessWithCmdline({"sleep", marker}) == 0 ? 1 : 0;
              }),
              1)
        << "the sandboxed command outlived its supervisor";
    // What the killed airlock could not clean up: its cgroups and its run directory, named by
    // the sandbox id as its cgroup is (never another test's, which may run at the same time).
    for (const std::string& id : SandboxesUnder(base)) (void)RemoveTree("/run/airlock/" + id);
    RemoveCgroups(base);
  }
}

// Ctrl-C (or SIGTERM, SIGHUP from a closed terminal) on `airlock run` while the command runs,
// with a background process of its own: the whole tree is killed, the sandbox's cgroups and run
// directory are removed as after any run, and airlock exits 128 + the signal with the result
// saying what happened.
TEST_F(CliTest, InterruptingAirlockRunKillsTheCommandAndRemovesTheSandbox) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    SCOPED_TRACE(sig);
    std::string base = fmt::format("airlock-cli-interrupt-{}", getpid());
    std::string marker = fmt::format("4343.{}", getpid());
    char out_path[] = "/tmp/airlock-cli-out-XXXXXX";
    close(mkstemp(out_path));
    std::string script = fmt::format("sleep {} & sleep {}; wait", marker, marker);
    pid_t airlock = StartAirlock(
        base, {"run", "--json", "--log-dir", logs_, "--", "sh", "-c", script}, out_path);
    ASSERT_GT(WaitFor([&] {
                return ProcessWithCmdline({"sleep", marker});
              }),
              0)
        << "the sandboxed command never started";
    ASSERT_EQ(kill(airlock, sig), 0);
    int status = 0;
    ASSERT_EQ(waitpid(airlock, &status, 0), airlock);
    ASSERT_TRUE(WIFEXITED(status)) << "airlock died of the signal instead of handling it";
    EXPECT_EQ(WEXITSTATUS(status), 128 + sig);
    EXPECT_EQ(ProcessWithCmdline({"sleep", marker}), 0) << "a process of the command survived";
    nlohmann::json result =
        nlohmann::json::parse(ReadFile(out_path).value_or("{}"), nullptr, false);
    unlink(out_path);
    ASSERT_TRUE(result.is_object());
    EXPECT_EQ(result.value("signal", 0), SIGKILL);
    EXPECT_EQ(result.value("error", ""),
              fmt::format("interrupted by SIG{}: the command was killed and its sandbox removed",
                          sigabbrev_np(sig)));
    // Nothing left: no sandbox cgroup under the base, on v1 or v2, and so no run directory
    // (named by the same id, removed in the same step).
    for (const std::string& id : SandboxesUnder(base)) {
      ADD_FAILURE() << "sandbox left behind: " << base << "/" << id;
      (void)RemoveTree("/run/airlock/" + id);
    }
    RemoveCgroups(base);
  }
}

// A second signal ends airlock at once, as the default action of the first would have (the user
// no longer waits for the cleanup). SIGINT then SIGTERM, sent back to back (two SIGINTs could
// merge into one while pending): airlock dies of the SIGTERM, and the command dies with it.
TEST_F(CliTest, ASecondInterruptEndsAirlockAtOnce) {
  std::string base = fmt::format("airlock-cli-interrupt2-{}", getpid());
  std::string marker = fmt::format("4444.{}", getpid());
  pid_t airlock = StartAirlock(base, {"run", "--log-dir", logs_, "--", "sleep", marker});
  ASSERT_GT(WaitFor([&] { return ProcessWithCmdline({"sleep", marker}); }), 0);
  ASSERT_EQ(kill(airlock, SIGINT), 0);
  ASSERT_EQ(kill(airlock, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(airlock, &status, 0), airlock);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_EQ(WaitFor([&] {
              return ProcessWithCmdline({"sleep", marker}) == 0 ? 1 : 0;
            }),
            1)
      << "the sandboxed command outlived airlock";
  for (const std::string& id : SandboxesUnder(base)) (void)RemoveTree("/run/airlock/" + id);
  RemoveCgroups(base);
}

// Case 50: a mode the host cannot provide is an error, never a run without it. Here an outer
// seccomp filter (as a container runtime's would) takes ptrace, or pidfd_getfd, away.
TEST_F(CliTest, UnavailableSupervisorModeIsAnError) {
  struct Case {
    const char* mode;
    int nr;
    int err;
    const char* message;
  };
  for (const Case& c :
       {Case{"ptrace", SYS_ptrace, EPERM,
             "process.supervisor ptrace: this process may not trace others here (PTRACE_SEIZE: "
             "Operation not permitted)"},
        Case{"notify", SYS_pidfd_getfd, ENOSYS,
             "process.supervisor notify: the kernel has no pidfd_getfd (Linux 5.6 or later)"}}) {
    char err_path[] = "/tmp/airlock-cli-err-XXXXXX";
    int err_fd = mkstemp(err_path);
    pid_t child = fork();
    if (child == 0) {
      dup2(err_fd, 2);
      struct sock_filter code[] = {
          BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(c.nr), 0, 1),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | static_cast<uint32_t>(c.err)),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      };
      struct sock_fprog prog = {4, code};
      // In a sanitizer build, LeakSanitizer's check at exit needs ptrace, which the filter may
      // deny: it would end airlock with its own error instead of 125.
      const char* asan = getenv("ASAN_OPTIONS");
      std::string asan_options = std::string(asan ? asan : "") + ":detect_leaks=0";
      setenv("ASAN_OPTIONS", asan_options.c_str(), 1);
      prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
      if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) _exit(99);
      execl(AIRLOCK_BIN, "airlock", "run", "--log-dir", logs_.c_str(), "--supervisor", c.mode, "--",
            "true", nullptr);
      _exit(127);
    }
    int status = 0;
    waitpid(child, &status, 0);
    close(err_fd);
    std::string err = ReadFile(err_path).value_or("");
    unlink(err_path);
    EXPECT_EQ(WEXITSTATUS(status), 125) << c.mode << ": " << err;
    EXPECT_NE(err.find(c.message), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace airlock
