// Functional tests of the native backend: what a command sees and gets back.
#include "engine/native_sandbox.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "common/files.h"
#include "common/status.h"
#include "engine/testing/sandbox_fixture.h"
#include "fmt/format.h"

namespace airlock::engine {
namespace {

// Writes `content` to `path` in the sandbox through the file API (parents made).
absl::Status PutFile(NativeSandbox& sb, const std::string& path, const std::string& content) {
  ASSIGN_OR_RETURN(auto t, sb.WriteFileInto(path, 0644, 1 << 20, true));
  absl::Status written = WriteAll(t->fd(), content);
  absl::Status finished = t->Finish().status();
  return finished.ok() ? written : finished;  // a refusal closes the pipe: its reason wins
}

// Every test runs without a supervisor, under notify and under ptrace.
class NativeSandboxTest : public testing::SupervisedSandboxTest {};

TEST_P(NativeSandboxTest, RunsACommandAndCapturesOutput) {
  CommandResult r = Shell("echo hello; echo oops >&2; exit 3");
  EXPECT_EQ(r.classification, Classification::kExitNonzero);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.stdout_preview, "hello\n");
  EXPECT_EQ(r.stderr_preview, "oops\n");
  EXPECT_EQ(r.stdout_bytes, 6);
  EXPECT_EQ(r.stdout_sha256, "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
  EXPECT_FALSE(r.truncated);
  EXPECT_TRUE(r.degraded.empty());
}

TEST_P(NativeSandboxTest, FailureReportNamesTheLikelyCauseAndKeyLines) {
  CommandResult r = Shell("printf 'int main(void) { return nope; }\\n' > m.c && gcc -c m.c");
  EXPECT_EQ(r.classification, Classification::kExitNonzero);
  EXPECT_EQ(r.failure, FailureKind::kCompilationError) << r.stderr_preview;
  ASSERT_FALSE(r.key_lines.empty());
  EXPECT_NE(r.key_lines[0].find("m.c:1:"), std::string::npos) << r.key_lines[0];
  EXPECT_NE(r.report.find("likely failure: compilation error"), std::string::npos) << r.report;
  EXPECT_NE(r.report.find("m.c:1:"), std::string::npos) << r.report;
}

TEST_P(NativeSandboxTest, CreatesFromAMultiThreadedProcess) {
  // The child of clone3 inherits glibc's list of the caller's threads but not the threads: any
  // libc call that synchronises them (setresuid, for one) would hang it. Keep threads busy here.
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  CommandResult r = RunOnce({"true"});
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(r.classification, Classification::kOk);
}

TEST_P(NativeSandboxTest, SuccessIsOk) {
  CommandResult r = RunOnce({"true"});
  EXPECT_EQ(r.classification, Classification::kOk);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.signal, 0);
}

// A sleep stopped and continued resumes through restart_syscall, which the profile must allow
// (job control, the v1 freezer's pause/resume and ptrace stops all take this path; it killed the
// sleeper with SIGSYS before).
TEST_P(NativeSandboxTest, StoppedAndContinuedSleepCarriesOn) {
  CommandResult r =
      Shell("sleep 1 & p=$!; sleep 0.2; kill -STOP $p; kill -CONT $p; wait $p; echo status $?");
  EXPECT_EQ(r.stdout_preview, "status 0\n") << r.stderr_preview;
  EXPECT_EQ(r.classification, Classification::kOk);
}

TEST_P(NativeSandboxTest, IdentityAndLayout) {
  CommandResult r = Shell(
      "id; hostname; pwd; echo $HOME $TMPDIR; ls -d /sandbox/*; "
      "stat -c '%a %U' /sandbox/workspace /sandbox/tmp /sandbox/home; readlink /tmp || mount | "
      "grep -c ' /tmp '");
  EXPECT_EQ(r.classification, Classification::kOk) << r.stderr_preview;
  EXPECT_EQ(r.stdout_preview,
            "uid=10001(sandbox) gid=10001(sandbox) groups=10001(sandbox)\n"
            "sandbox\n/sandbox/workspace\n/sandbox/home /sandbox/tmp\n"
            "/sandbox/artifacts\n/sandbox/control\n/sandbox/home\n/sandbox/tmp\n/sandbox/tools\n"
            "/sandbox/workspace\n"
            "755 sandbox\n1777 sandbox\n755 sandbox\n1\n");
}

TEST_P(NativeSandboxTest, StdinWorkdirAndSeveralCommands) {
  auto sandbox = Create(TestSpec());
  ASSERT_NE(sandbox, nullptr);
  auto r1 =
      sandbox->Exec({.argv = {"sh", "-c", "cat > data; mkdir sub"}, .stdin_data = "payload"}, {});
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(r1->classification, Classification::kOk) << r1->stderr_preview;
  auto r2 = sandbox->Exec(
      {.argv = {"sh", "-c", "pwd; cat ../data"}, .workdir = "/sandbox/workspace/sub"}, {});
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->stdout_preview, "/sandbox/workspace/sub\npayload");
  auto r3 = sandbox->Exec({.argv = {"pwd"}, .workdir = "/nonexistent"}, {});
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3->classification, Classification::kSandboxError);
  EXPECT_NE(r3->error.find("workdir"), std::string::npos) << r3->error;
  DestroyAndCheckGone(std::move(sandbox));
}

TEST_P(NativeSandboxTest, CommandNotFoundIs127) {
  CommandResult r = RunOnce({"no-such-program"});
  EXPECT_EQ(r.classification, Classification::kExitNonzero);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.stderr_preview.find("cannot run no-such-program: No such file or directory"),
            std::string::npos)
      << r.stderr_preview;
}

TEST_P(NativeSandboxTest, HostWorkspaceIsWritableAndOwnedByItsOwner) {
  char tmpl[] = "/tmp/airlock-ws-XXXXXX";
  std::string ws = mkdtemp(tmpl);
  ASSERT_TRUE(WriteFileAtomic(ws + "/input.txt", "from host\n").ok());
  spec::SandboxSpec s = TestSpec();
  s.filesystem.workspace = ws;
  CommandResult r = Shell("true");  // warm-up keeps the next assertion focused
  auto sandbox = Create(s);
  ASSERT_NE(sandbox, nullptr);
  auto out = sandbox->Exec(
      {.argv = {"sh", "-c", "cat input.txt; echo made > output.txt; stat -c %U input.txt"}}, {});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->classification, Classification::kOk) << out->stderr_preview;
  EXPECT_EQ(out->stdout_preview, "from host\nsandbox\n");
  DestroyAndCheckGone(std::move(sandbox));
  EXPECT_EQ(*ReadFile(ws + "/output.txt"), "made\n");
  struct stat st;
  ASSERT_EQ(stat((ws + "/output.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "files the sandbox creates belong to the workspace's owner";
  ASSERT_TRUE(RemoveTree(ws).ok());
}

// A read-only workspace (workspaceMode ro, which risk class R0 derives): the host directory's files
// are read, and a write, a new file or a removal fails with EROFS, leaving the host unchanged;
// without a host directory the tmpfs workspace is read-only too.
TEST_P(NativeSandboxTest, ReadOnlyWorkspaceIsReadButNeverWritten) {
  char tmpl[] = "/tmp/airlock-ws-XXXXXX";
  std::string ws = mkdtemp(tmpl);
  ASSERT_EQ(chmod(ws.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomic(ws + "/input.txt", "from host\n").ok());
  ASSERT_EQ(chmod((ws + "/input.txt").c_str(), 0666), 0);
  spec::SandboxSpec s = TestSpec();
  s.filesystem.workspace = ws;
  s.filesystem.workspace_mode = spec::MountMode::kReadOnly;
  const std::string script =
      "cat /sandbox/workspace/input.txt 2>&1; echo x >> /sandbox/workspace/input.txt; "
      "touch /sandbox/workspace/new; rm -f /sandbox/workspace/input.txt; true";
  CommandResult r = RunOnce(s, {"sh", "-c", script});
  EXPECT_EQ(r.stdout_preview, "from host\n");
  EXPECT_NE(r.stderr_preview.find("Read-only file system"), std::string::npos) << r.stderr_preview;
  EXPECT_EQ(*ReadFile(ws + "/input.txt"), "from host\n");
  EXPECT_FALSE(std::filesystem::exists(ws + "/new"));
  ASSERT_TRUE(RemoveTree(ws).ok());

  s.filesystem.workspace.clear();
  r = RunOnce(s, {"sh", "-c", "touch /sandbox/workspace/new 2>&1; ls -A /sandbox/workspace"});
  EXPECT_NE(r.stdout_preview.find("Read-only file system"), std::string::npos) << r.stdout_preview;
}

TEST_P(NativeSandboxTest, ReadOnlyMountAndExtraTmpfs) {
  char tmpl[] = "/tmp/airlock-ro-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);  // the sandbox user is "other" to host files
  ASSERT_TRUE(WriteFileAtomic(dir + "/f", "ro data").ok());
  spec::SandboxSpec s = TestSpec();
  s.filesystem.mounts.push_back({dir, "/opt/data", spec::MountMode::kReadOnly});
  s.filesystem.tmpfs.push_back({"/scratch", 1, 64, true});
  auto sandbox = Create(s);
  ASSERT_NE(sandbox, nullptr);
  auto r =
      sandbox->Exec({.argv = {"sh", "-c",
                              "cat /opt/data/f; echo; touch /opt/data/g 2>&1 | grep -o "
                              "'Read-only file system'; echo x > /scratch/y && cat /scratch/y"}},
                    {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stdout_preview, "ro data\nRead-only file system\nx\n") << r->stderr_preview;
  DestroyAndCheckGone(std::move(sandbox));
  ASSERT_TRUE(RemoveTree(dir).ok());
}

TEST_P(NativeSandboxTest, Level1HasAWritableRootAndNoLandlock) {
  spec::SandboxSpec s = TestSpec();
  s.level = spec::Level::kBasic;
  s.filesystem.read_only_root = false;
  CommandResult r = RunOnce(
      s, {"sh", "-c", "echo x > /newfile && cat /newfile; touch /usr/x 2>&1 | grep -c Read-only"});
  EXPECT_EQ(r.stdout_preview, "x\n1\n") << r.stderr_preview;
}

TEST_P(NativeSandboxTest, UsageIsReported) {
  CommandResult r = RunOnce({"python3", "-c", "b = bytearray(64 << 20); sum(range(3000000))"});
  EXPECT_EQ(r.classification, Classification::kOk) << r.stderr_preview;
  EXPECT_GT(r.usage.memory_peak_bytes, 64 << 20);
  EXPECT_GT(r.usage.cpu_user_ms + r.usage.cpu_system_ms, 10);
  EXPECT_GE(r.usage.pids_peak, 1);
}

TEST_P(NativeSandboxTest, MissingMountSourceIsAClearError) {
  spec::SandboxSpec s = TestSpec();
  s.filesystem.mounts.push_back({"/does/not/exist", "/opt/x", spec::MountMode::kReadOnly});
  auto sandbox = TryCreate(s);
  ASSERT_FALSE(sandbox.ok());
  EXPECT_NE(sandbox.status().ToString().find("/does/not/exist"), std::string::npos)
      << sandbox.status();
}

TEST_P(NativeSandboxTest, UnknownDegradedProtectionIsRejected) {
  auto sandbox = TryCreate(TestSpec(), {"seccomp"});
  ASSERT_FALSE(sandbox.ok());
  EXPECT_EQ(sandbox.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(sandbox.status().ToString().find("unknown protection \"seccomp\""), std::string::npos);
}

TEST_P(NativeSandboxTest, UnsupportedSpecFeaturesFailClosed) {
  spec::SandboxSpec s = TestSpec();
  s.network.profile = spec::NetworkProfile::kOpen;
  auto sandbox = TryCreate(s);
  ASSERT_FALSE(sandbox.ok());
  EXPECT_EQ(sandbox.status().code(), absl::StatusCode::kFailedPrecondition);
  s = TestSpec();
  s.level = spec::Level::kGvisor;
  EXPECT_EQ(TryCreate(s).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(NativeSandboxTest, OutputLimitKillsWhenAsked) {
  spec::SandboxSpec s = TestSpec();
  s.resources.max_log_bytes = 1 << 16;
  s.resources.output_limit_action = spec::OutputLimitAction::kKill;
  CommandResult r = RunOnce(s, {"sh", "-c", "yes"});
  EXPECT_EQ(r.classification, Classification::kOutputLimit);
  EXPECT_TRUE(r.truncated);
  EXPECT_GE(r.stdout_bytes, 1 << 16);
}

TEST_P(NativeSandboxTest, CpuTimeLimit) {
  spec::SandboxSpec s = TestSpec();
  s.resources.cpu_time_seconds = 1;
  CommandResult r = RunOnce(s, {"sh", "-c", "while :; do :; done"});
  EXPECT_EQ(r.classification, Classification::kCommandTimeout);
  // Stopped at its second of CPU, however long a busy host took to give it that second.
  EXPECT_GE(r.usage.cpu_user_ms + r.usage.cpu_system_ms, 1000);
  EXPECT_LT(r.usage.cpu_user_ms + r.usage.cpu_system_ms, 2500);
  EXPECT_LT(r.duration_ms, 30000);
}

TEST_P(NativeSandboxTest, KeepBackgroundLeavesServersRunningBetweenCommands) {
  auto sandbox = Create(TestSpec());
  ASSERT_NE(sandbox, nullptr);
  auto r1 = sandbox->Exec({.argv = {"sh", "-c", "sleep 100 > /dev/null 2>&1 & echo started"}},
                          {.keep_background = true});
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->stdout_preview, "started\n");
  // The background shell may not have exec'd sleep yet (under a supervisor the exec waits on
  // it): ask until it has, then it must still be there, alone.
  absl::StatusOr<CommandResult> r2;
  for (int i = 0; i < 100; ++i) {
    r2 = sandbox->Exec({.argv = {"sh", "-c", "pgrep -c sleep"}}, {});
    ASSERT_TRUE(r2.ok());
    if (r2->stdout_preview != "0\n") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(r2->stdout_preview, "1\n");
  DestroyAndCheckGone(std::move(sandbox));
}

TEST_P(NativeSandboxTest, RunsOnACgroupV2TreeAndReportsWhatIsMissing) {
  // Hosts that mount the controllers on v1 still have a v2 tree without them: the engine runs
  // there only when told to go without those limits, and says so in every result.
  CgroupOptions options;
  options.version = CgroupOptions::Version::kV2;
  options.base = "airlock-test";
  auto v2 = CgroupDriver::Detect(options);
  if (!v2.ok()) GTEST_SKIP() << "no cgroup v2 tree here: " << v2.status();
  std::vector<std::string> missing;
  for (auto [c, name] : {std::pair{Controller::kMemory, "cgroup-memory"},
                         {Controller::kPids, "cgroup-pids"},
                         {Controller::kCpu, "cgroup-cpu"}}) {
    if (!(*v2)->HasController(c)) missing.push_back(name);
  }
  SandboxOptions o;
  o.spec = Supervised(TestSpec());
  o.tools_dir = AIRLOCK_TEST_TOOLS_DIR;
  o.cgroups = v2->get();
  if (!missing.empty()) {
    auto refused = NativeSandbox::Create(o);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.status().ToString().find("--allow-degraded=" + missing[0]), std::string::npos)
        << refused.status();
    // And how to provide it.
    EXPECT_NE(refused.status().ToString().find("cgroup.subtree_control"), std::string::npos)
        << refused.status();
  }
  o.allow_degraded = missing;
  auto sandbox = NativeSandbox::Create(o);
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  auto r = (*sandbox)->Exec({.argv = {"sh", "-c", "sleep 1000 & echo started; sleep 1000"},
                             .timeout = std::chrono::milliseconds(500)},
                            {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->classification, Classification::kCommandTimeout);
  EXPECT_EQ(r->stdout_preview, "started\n");
  EXPECT_EQ(r->degraded, missing);
  pid_t init = (*sandbox)->init_pid();
  std::string id = (*sandbox)->id().value();
  ASSERT_TRUE((*sandbox)->Destroy().ok());
  EXPECT_NE(kill(init, 0), 0);
  EXPECT_EQ((*v2)->Open(id).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(NativeSandboxTest, SupervisorReportsWhatTheCommandDid) {
  // Programs by full path: a PATH search shows as one attempt per directory tried.
  CommandResult r = Shell("/usr/bin/cat /etc/hostname; exec /usr/bin/true");
  EXPECT_EQ(r.classification, Classification::kOk) << r.stderr_preview;
  EXPECT_EQ(r.stdout_preview, "sandbox\n");
  if (supervisor_ == spec::SupervisorMode::kNone) {
    EXPECT_EQ(r.syscalls, SyscallReport{});
    EXPECT_FALSE(ToJson(r).contains("syscalls"));
    return;
  }
  EXPECT_EQ(r.syscalls.supervisor, spec::ToString(supervisor_));
  std::vector<std::string> programs;
  for (const ExecRecord& e : r.syscalls.execs) programs.push_back(e.path);
  EXPECT_EQ(programs, (std::vector<std::string>{"/bin/sh", "/usr/bin/cat", "/usr/bin/true"}))
      << ToJson(r.syscalls).dump(1);
  bool hostname = false;
  for (const FileAccess& f : r.syscalls.files)
    hostname |= f.path == "/etc/hostname" && f.mode == "r";
  EXPECT_TRUE(hostname) << ToJson(r.syscalls).dump(1);
  EXPECT_EQ(r.syscalls.denied, 0);
}

TEST_P(NativeSandboxTest, SyscallRulesDenyWithTheirErrnoAndReportIt) {
  spec::SandboxSpec s = TestSpec();
  s.process.syscalls = {{{"mkdirat", "mkdir"}, {}, "errno(EDQUOT)"}};
  CommandResult r = RunOnce(s, {"sh", "-c", "mkdir /sandbox/tmp/d; echo $?"});
  EXPECT_EQ(r.stdout_preview, "1\n");
  EXPECT_NE(r.stderr_preview.find("Disk quota exceeded"), std::string::npos) << r.stderr_preview;
  if (supervisor_ == spec::SupervisorMode::kNone) {
    EXPECT_TRUE(r.violations.empty()) << "without a supervisor the filter answers alone";
    return;
  }
  ASSERT_EQ(r.syscalls.denied_calls.size(), 1u) << ToJson(r.syscalls).dump(1);
  EXPECT_EQ(r.syscalls.denied_calls[0].action, "errno(EDQUOT)");
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].kind, "syscall");
  EXPECT_EQ(r.violations[0].detail, "mkdir denied by process.syscalls[0] (errno(EDQUOT))");
  // The command went on and succeeded: OK. One that fails after a denial was blocked by policy.
  EXPECT_EQ(r.classification, Classification::kOk);
  EXPECT_EQ(RunOnce(s, {"mkdir", "/sandbox/tmp/d"}).classification, Classification::kPolicyBlocked);
}

TEST_P(NativeSandboxTest, KillRuleIsPolicyBlocked) {
  spec::SandboxSpec s = TestSpec();
  s.process.syscalls = {{{"mkdirat", "mkdir"}, {}, "kill"}};
  CommandResult direct = RunOnce(s, {"mkdir", "/sandbox/tmp/d"});
  EXPECT_EQ(direct.classification, Classification::kPolicyBlocked);
  ASSERT_FALSE(direct.violations.empty());
  CommandResult r = RunOnce(s, {"sh", "-c", "mkdir /sandbox/tmp/d; echo survived"});
  if (supervisor_ == spec::SupervisorMode::kNone) {
    // The filter alone kills the process that made the call (SECCOMP_RET_KILL_PROCESS).
    EXPECT_EQ(direct.violations[0].kind, "seccomp");
    EXPECT_EQ(direct.signal, SIGSYS);
    EXPECT_EQ(r.stdout_preview, "survived\n");
    return;
  }
  // A supervisor kills the whole command.
  EXPECT_EQ(direct.violations[0].kind, "syscall");
  EXPECT_EQ(r.classification, Classification::kPolicyBlocked);
  EXPECT_EQ(r.stdout_preview, "");
  EXPECT_TRUE(r.syscalls.killed);
  EXPECT_EQ(r.syscalls.error, "kill of process.syscalls[0] killed the command at mkdir");
}

// airlock-init (and the file-operation workers it forks) run under the profile in every mode;
// under notify it is the profile less its listener check, which its commands add back.
TEST_P(NativeSandboxTest, AirlockInitRunsUnderTheProfile) {
  auto sandbox = TryCreate(TestSpec());
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  auto status = ReadFile(fmt::format("/proc/{}/status", (*sandbox)->init_pid()));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_NE(status->find("\nSeccomp:\t2\n"), std::string::npos) << *status;
  EXPECT_NE(status->find("\nSeccomp_filters:\t1\n"), std::string::npos) << *status;
  ASSERT_TRUE((*sandbox)->Destroy().ok());
}

TEST_P(NativeSandboxTest, RulesThatWouldLetAnAlwaysDeniedCallThroughAreRefused) {
  spec::SandboxSpec s = TestSpec();
  s.process.syscalls = {{{"read"}, {}, "allow"}, {{"bpf"}, {}, "allow"}};
  auto sandbox = TryCreate(s);
  ASSERT_FALSE(sandbox.ok());
  EXPECT_EQ(sandbox.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sandbox.status().message(),
            "process.syscalls[1].names[0]: bpf is always denied; no rule can let it through (only "
            "errno and kill rules may name it)");
}

INSTANTIATE_TEST_SUITE_P(Supervisors, NativeSandboxTest, testing::SupervisorModes(),
                         testing::SupervisorModeName);

}  // namespace
}  // namespace airlock::engine

namespace airlock::engine {
namespace {

class ConcurrentCommandsTest : public testing::SandboxTest {};

// Attack: a sandbox user whose host id (host_id_base + uid, 10^9 + uid by default) wraps past
// 2^32 onto a real host account: uid 3294967296 would map to host uid 0, 3294967338 to gid 42.
// Expected: the spec's validation refuses such an id (SpecValidateTest), and the engine, given
// one anyway, refuses any base and id whose sum leaves the host's id space, naming both, before
// anything is made.
TEST_F(ConcurrentCommandsTest, AUserBeyondTheHostsIdSpaceIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "ids are mapped only as root";
  spec::SandboxSpec wraps = TestSpec();
  wraps.user.uid = 3294967296u;
  auto refused = TryCreate(wraps);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().ToString().find("user 3294967296:10001 with host id base 1000000000 "
                                             "is outside the host's id space"),
            std::string::npos)
      << refused.status();
  SandboxOptions o;
  o.spec = TestSpec();
  o.tools_dir = AIRLOCK_TEST_TOOLS_DIR;
  o.cgroups = cgroups_.get();
  o.host_id_base = UINT32_MAX - 5000;  // + 10001 leaves the 32 bits
  refused = NativeSandbox::Create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().ToString().find("outside the host's id space"), std::string::npos)
      << refused.status();
  o.host_id_base = 1000000000;
  auto made = NativeSandbox::Create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  DestroyAndCheckGone(*std::move(made));
}

TEST_F(ConcurrentCommandsTest, SignalReachesTheProcessGroupAndIdsAreTheCallers) {
  auto sb = Create(TestSpec());
  ASSERT_NE(sb, nullptr);
  CommandId id = CommandId::New();
  // The signal goes only once the trap is set, that is once "ready" has been streamed.
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  ExecOptions o{.command_id = id};
  o.on_output = [&](OutputCapture::Stream, std::string_view) {
    std::lock_guard lock(mu);
    ready = true;
    cv.notify_all();
  };
  auto c = sb->Start({.argv = {"/bin/sh", "-c",
                               "trap 'echo got term; exit 5' TERM; "
                               "echo ready; while :; do sleep 0.05; done"}},
                     o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->id(), id);
  // Output is pumped by Wait, so Wait runs beside the signal.
  absl::StatusOr<CommandResult> r = absl::UnknownError("not waited");
  std::thread waiter([&] { r = (*c)->Wait(); });
  bool signalled = false;
  {
    std::unique_lock lock(mu);
    if (cv.wait_for(lock, std::chrono::seconds(20), [&] { return ready; })) {
      signalled = (*c)->Signal(SIGTERM).ok();
    }
  }
  if (!signalled) (void)(*c)->Kill();
  waiter.join();
  ASSERT_TRUE(signalled);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->command_id, id);
  EXPECT_EQ(r->exit_code, 5);
  EXPECT_EQ(r->stdout_preview, "ready\ngot term\n");
  c->reset();
  DestroyAndCheckGone(std::move(sb));
}

// Streamed output arrives while the command runs, and a registered secret never appears in it,
// even when the command writes it in two pieces.
TEST_F(ConcurrentCommandsTest, StreamedOutputIsLiveAndRedacted) {
  auto sb = Create(TestSpec());
  ASSERT_NE(sb, nullptr);
  const std::string secret = "s3cr3t-Value-7f2c9a41";
  std::mutex mu;
  std::string streamed;
  std::optional<std::chrono::steady_clock::time_point> first_seen;
  ExecOptions o;
  o.secrets = {secret};
  o.on_output = [&](OutputCapture::Stream s, std::string_view chunk) {
    std::lock_guard lock(mu);
    if (s == OutputCapture::kStdout) streamed.append(chunk);
    if (!first_seen && streamed.find("tick 1") != std::string::npos) {
      first_seen = std::chrono::steady_clock::now();
    }
  };
  auto r = sb->Exec({.argv = {"/bin/sh", "-c",
                              "for i in 1 2 3; do echo tick $i; sleep 0.3; done; "
                              "printf 's3cr3t-Va'; sleep 0.2; printf 'lue-7f2c9a41 end\\n'"}},
                    o);
  const auto finished = std::chrono::steady_clock::now();
  ASSERT_TRUE(r.ok()) << r.status();
  // "tick 1" is printed at least 0.8 s before the command ends; it must arrive then, not
  // with the rest at the end.
  ASSERT_TRUE(first_seen.has_value());
  EXPECT_GT(finished - *first_seen, std::chrono::milliseconds(500))
      << "the first line arrived only at the end";
  EXPECT_EQ(streamed.find(secret), std::string::npos) << streamed;
  EXPECT_EQ(streamed.find("s3cr3t-Va"), std::string::npos) << streamed;
  EXPECT_NE(streamed.find("[REDACTED"), std::string::npos) << streamed;
  EXPECT_NE(streamed.find("tick 3\n"), std::string::npos);
  EXPECT_NE(streamed.find(" end\n"), std::string::npos);
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(ConcurrentCommandsTest, PausedSandboxUsesNoCpuAndResumes) {
  auto sb = Create(TestSpec());
  ASSERT_NE(sb, nullptr);
  auto spin = sb->Start({.argv = {"/bin/sh", "-c", "while :; do :; done"}}, {});
  ASSERT_TRUE(spin.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(sb->Pause().ok());
  auto before = sb->cgroup().Stats();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto after = sb->cgroup().Stats();
  ASSERT_TRUE(before.ok() && after.ok());
  int64_t used =
      (after->cpu_user_us + after->cpu_system_us) - (before->cpu_user_us + before->cpu_system_us);
  EXPECT_LT(used, 20000) << "a paused sandbox used " << used << " us of CPU in 500 ms";
  ASSERT_TRUE(sb->Resume().ok());
  // Resumed, it spins again: 50 ms of CPU soon (within 10 s however busy the host is).
  int64_t ran = 0;
  for (int i = 0; i < 200 && ran <= 50000; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto resumed = sb->cgroup().Stats();
    ASSERT_TRUE(resumed.ok());
    ran = (resumed->cpu_user_us + resumed->cpu_system_us) -
          (after->cpu_user_us + after->cpu_system_us);
  }
  EXPECT_GT(ran, 50000) << "a resumed sandbox did not run";
  (*spin)->Kill();
  EXPECT_TRUE((*spin)->Wait().ok());
  EXPECT_TRUE((*spin)->killed()) << "the kill ended a command that would have spun on";
  spin->reset();
  // A kill asked for after the command ended on its own (here, after Wait) changes nothing.
  auto quick = sb->Start({.argv = {"/bin/true"}}, {});
  ASSERT_TRUE(quick.ok()) << quick.status();
  absl::StatusOr<CommandResult> done = (*quick)->Wait();
  ASSERT_TRUE(done.ok()) << done.status();
  (*quick)->Kill();
  EXPECT_FALSE((*quick)->killed());
  EXPECT_EQ(done->exit_code, 0);
  quick->reset();
  DestroyAndCheckGone(std::move(sb));
}

// Concurrent commands, without a supervisor and under each supervisor mode.
class SupervisedConcurrentCommandsTest : public testing::SupervisedSandboxTest {};

// A long-running server and short commands share one sandbox; each result is its own, and so
// is each supervisor's report (it names only that command's programs).
TEST_P(SupervisedConcurrentCommandsTest, CommandsRunSideBySide) {
  auto sb = Create(TestSpec());
  ASSERT_NE(sb, nullptr);
  auto server = sb->Start({.argv = {"/bin/sh", "-c", "echo up; exec /usr/bin/sleep 30"}}, {});
  ASSERT_TRUE(server.ok()) << server.status();
  // The server must have reached its sleep before it is killed (under ptrace its start is slow
  // enough for the short jobs to finish first): wait until a sleep shows in the sandbox's /proc.
  bool sleeping = false;
  for (int i = 0; i < 200 && !sleeping; ++i) {
    auto ps = sb->Exec({.argv = {"/bin/sh", "-c", "cat /proc/[0-9]*/comm"}}, {});
    ASSERT_TRUE(ps.ok()) << ps.status();
    sleeping = ps->stdout_preview.find("sleep\n") != std::string::npos;
    if (!sleeping) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(sleeping) << "the server never reached its sleep";
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto r = sb->Exec({.argv = {"/usr/bin/echo", fmt::format("job{}", i)}}, {});
      if (!r.ok() || r->stdout_preview != fmt::format("job{}\n", i)) return;
      std::vector<std::string> programs;
      for (const ExecRecord& e : r->syscalls.execs) programs.push_back(e.path);
      if (supervisor_ == spec::SupervisorMode::kNone
              ? r->syscalls.execs.empty()
              : programs == std::vector<std::string>{"/usr/bin/echo"}) {
        ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4);
  (*server)->Kill();
  auto r = (*server)->Wait();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_EQ(r->stdout_preview, "up\n");
  EXPECT_LT(r->duration_ms, 20000);
  if (supervisor_ != spec::SupervisorMode::kNone) {
    std::vector<std::string> programs;
    for (const ExecRecord& e : r->syscalls.execs) programs.push_back(e.path);
    EXPECT_EQ(programs, (std::vector<std::string>{"/bin/sh", "/usr/bin/sleep"}))
        << ToJson(r->syscalls).dump(1);
  }
  server->reset();
  DestroyAndCheckGone(std::move(sb));
}

// A kill issued the moment a command starts (before it may even have joined its cgroup, or a
// supervisor attached to it) still ends it: by the kill, not by its deadline.
TEST_P(SupervisedConcurrentCommandsTest, KillRightAfterStartEndsTheCommand) {
  spec::SandboxSpec spec = TestSpec();
  spec.resources.command_timeout_seconds = 5;
  auto sb = Create(spec);
  ASSERT_NE(sb, nullptr);
  for (int i = 0; i < 5; ++i) {
    auto c = sb->Start({.argv = {"/bin/sh", "-c", "while :; do sleep 1; done"}}, {});
    ASSERT_TRUE(c.ok()) << c.status();
    (*c)->Kill();
    auto r = (*c)->Wait();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->timed_out);
    EXPECT_EQ(r->signal, SIGKILL);
  }
  DestroyAndCheckGone(std::move(sb));
}

INSTANTIATE_TEST_SUITE_P(Supervisors, SupervisedConcurrentCommandsTest, testing::SupervisorModes(),
                         testing::SupervisorModeName);

// A command nobody waits for is killed and cleaned up when its handle goes.
TEST_F(ConcurrentCommandsTest, DroppedCommandIsKilled) {
  auto sb = Create(TestSpec());
  ASSERT_NE(sb, nullptr);
  {
    auto c = sb->Start({.argv = {"sleep", "100"}}, {});
    ASSERT_TRUE(c.ok());
  }
  auto procs = sb->cgroup().Processes();
  ASSERT_TRUE(procs.ok());
  EXPECT_EQ(procs->size(), 1u) << "only airlock-init should be left";
  DestroyAndCheckGone(std::move(sb));
}

}  // namespace
}  // namespace airlock::engine

namespace airlock::engine {
namespace {

// Commands' cgroups are made ahead of time and removed after the result (off the critical path);
// each command still has a fresh cgroup of its own, so what it reports is its own.
class CommandCgroupTest : public testing::SandboxTest {};

// airlock-init carries the seccomp profile itself and every command inherits it (instead of
// loading and compiling it per command): a command, and a file worker, must each still run under
// exactly that one filter, in strict mode, from their first instruction.
TEST_F(CommandCgroupTest, CommandsAndFileWorkersInheritExactlyTheProfileFilter) {
  auto sb = Create(TestSpec());
  ASSERT_NE(sb, nullptr);
  auto r = sb->Exec(
      {.argv = {"sh", "-c", "grep -E '^Seccomp(_filters)?:' /proc/self/status /proc/1/status"}},
      {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_preview,
            "/proc/self/status:Seccomp:\t2\n/proc/self/status:Seccomp_filters:\t1\n"
            "/proc/1/status:Seccomp:\t2\n/proc/1/status:Seccomp_filters:\t1\n")
      << r->stderr_preview;
  // The attack the profile exists for, from a command: a new user namespace. Refused.
  auto ns = sb->Exec({.argv = {"unshare", "--user", "true"}}, {});
  ASSERT_TRUE(ns.ok()) << ns.status();
  EXPECT_EQ(ns->exit_code, 1);
  EXPECT_NE(ns->stderr_preview.find("unshare failed: Operation not permitted"), std::string::npos)
      << ns->stderr_preview;
  // File operations run in a worker forked by airlock-init, now under the filter too.
  absl::Status put = PutFile(*sb, "/sandbox/tmp/f", "x");
  ASSERT_TRUE(put.ok()) << put;
  auto read = sb->Exec({.argv = {"cat", "/sandbox/tmp/f"}}, {});
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->stdout_preview, "x");
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(CommandCgroupTest, EachCommandReportsItsOwnUsage) {
  auto sb = Create(TestSpec());
  ASSERT_NE(sb, nullptr);
  // The first command: 64 MiB, CPU, and four processes at once.
  auto big = sb->Exec({.argv = {"python3", "-c",
                                "import subprocess; b = bytearray(64 << 20); sum(range(3000000)); "
                                "ps = [subprocess.Popen(['sleep', '0.2']) for _ in range(3)]; "
                                "[p.wait() for p in ps]"}},
                      {});
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_EQ(big->classification, Classification::kOk) << big->stderr_preview;
  ASSERT_GT(big->usage.memory_peak_bytes, 64 << 20);
  ASSERT_GT(big->usage.cpu_user_ms + big->usage.cpu_system_ms, 10);
  ASSERT_GE(big->usage.pids_peak, 4);
  // The next one, `true`, must not inherit any of it: peaks and CPU are its own.
  auto small = sb->Exec({.argv = {"/bin/true"}}, {});
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->classification, Classification::kOk);
  EXPECT_LT(small->usage.memory_peak_bytes, 16 << 20);
  EXPECT_LT(small->usage.cpu_user_ms + small->usage.cpu_system_ms,
            big->usage.cpu_user_ms + big->usage.cpu_system_ms);
  EXPECT_EQ(small->usage.pids_peak, 1);
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(CommandCgroupTest, AnOomKillIsReportedOnlyByItsCommand) {
  spec::SandboxSpec s = TestSpec();
  s.resources.memory_mb = 64;
  auto sb = Create(s);
  ASSERT_NE(sb, nullptr);
  auto bomb =
      sb->Exec({.argv = {"python3", "-c", "b = [bytearray(1 << 20) for _ in range(1000)]"}}, {});
  ASSERT_TRUE(bomb.ok()) << bomb.status();
  EXPECT_EQ(bomb->classification, Classification::kResourceExhaustedMemory);
  EXPECT_GE(bomb->usage.oom_kills, 1);
  for (int i = 0; i < 2; ++i) {
    auto next = sb->Exec({.argv = {"/bin/true"}}, {});
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(next->classification, Classification::kOk);
    EXPECT_EQ(next->usage.oom_kills, 0);
  }
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(CommandCgroupTest, KillingOneCommandLeavesTheOthers) {
  // Two commands started back to back (the second may get a cgroup made on its own thread,
  // the first the one made ahead): killing the first's tree must not touch the second.
  auto sb = Create(TestSpec());
  ASSERT_NE(sb, nullptr);
  auto first = sb->Start({.argv = {"sh", "-c", "sleep 100 & sleep 100"}}, {});
  ASSERT_TRUE(first.ok()) << first.status();
  // It waits for a file that a third command makes once the first is gone.
  auto second = sb->Start(
      {.argv = {"sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.02; done; echo alive"}}, {});
  ASSERT_TRUE(second.ok()) << second.status();
  (*first)->Kill();
  auto killed = (*first)->Wait();
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(killed->signal, SIGKILL);
  auto go = sb->Exec({.argv = {"touch", "/tmp/go"}}, {});
  ASSERT_TRUE(go.ok()) << go.status();
  auto survived = (*second)->Wait();
  ASSERT_TRUE(survived.ok()) << survived.status();
  EXPECT_EQ(survived->classification, Classification::kOk) << survived->stderr_preview;
  EXPECT_EQ(survived->stdout_preview, "alive\n");
  first->reset();
  second->reset();
  DestroyAndCheckGone(std::move(sb));
}

}  // namespace
}  // namespace airlock::engine

namespace airlock::engine {
namespace {

class SandboxFilesTest : public testing::SandboxTest {
 protected:
  // As in airlockd and airlock-shim: a write into a transfer the sandbox refused (its pipe
  // closed) is EPIPE, not a signal that ends the process.
  static void SetUpTestSuite() { ::signal(SIGPIPE, SIG_IGN); }

  static absl::StatusOr<std::string> Get(NativeSandbox& sb, const std::string& path) {
    ASSIGN_OR_RETURN(auto t, sb.ReadFileFrom(path, 1 << 20));
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(t->fd(), buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    RETURN_IF_ERROR(t->Finish().status());
    return out;
  }
};

TEST_F(SandboxFilesTest, FilesGoInAndOutAsTheSandboxUser) {
  auto sb = Create(TestSpec());
  ASSERT_NE(sb, nullptr);
  ASSERT_TRUE(PutFile(*sb, "/sandbox/workspace/src/main.py", "print('hi')\n").ok());
  auto r = sb->Exec({.argv = {"/bin/sh", "-c",
                              "python3 src/main.py; stat -c %u src/main.py; "
                              "echo made > /sandbox/artifacts/out.txt"}},
                    {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stdout_preview, "hi\n10001\n");
  auto out = Get(*sb, "/sandbox/artifacts/out.txt");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "made\n");
  auto list = sb->ListFiles("/sandbox/workspace/src");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "main.py");
  EXPECT_EQ((*list)[0].size, 12);
  ASSERT_TRUE(sb->MakeDirectory("/sandbox/tmp/a/b", true).ok());
  EXPECT_EQ(sb->StatFile("/sandbox/tmp/a/b")->type, init::FileType::kDirectory);
  ASSERT_TRUE(sb->RemoveFile("/sandbox/tmp/a", true).ok());
  EXPECT_EQ(sb->StatFile("/sandbox/tmp/a").status().code(), absl::StatusCode::kNotFound);
  DestroyAndCheckGone(std::move(sb));
}

// Attack: a command plants symlinks to host-looking paths and to the sandbox's own secrets-free
// system files; the file API is then asked to read, write and list through them, and to act
// outside the file areas. Outcome: PermissionDenied every time, nothing read or written.
TEST_F(SandboxFilesTest, FileApiStaysInsideTheFileAreas) {
  auto sb = Create(TestSpec());
  ASSERT_NE(sb, nullptr);
  auto r = sb->Exec({.argv = {"/bin/sh", "-c",
                              "ln -s /etc/passwd /sandbox/workspace/pw; "
                              "ln -s /etc /sandbox/workspace/etc; "
                              "ln -s ../control /sandbox/workspace/ctl"}},
                    {});
  ASSERT_TRUE(r.ok());
  for (const char* path :
       {"/sandbox/workspace/pw", "/sandbox/workspace/etc/passwd",
        "/sandbox/workspace/ctl/spec.json", "/etc/passwd", "/sandbox/control/spec.json",
        "/sandbox/tools/airlock-init", "/sandbox/workspace/../control/spec.json", "relative.txt"}) {
    EXPECT_EQ(Get(*sb, path).status().code(), absl::StatusCode::kPermissionDenied) << path;
  }
  EXPECT_EQ(PutFile(*sb, "/sandbox/workspace/etc/evil", "x").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(sb->ListFiles("/sandbox/workspace/etc").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(PutFile(*sb, "/usr/bin/evil", "x").code(), absl::StatusCode::kPermissionDenied);
  DestroyAndCheckGone(std::move(sb));
}

TEST_F(SandboxFilesTest, AbandonedAndOversizedWritesLeaveTheOldFile) {
  auto sb = Create(TestSpec());
  ASSERT_NE(sb, nullptr);
  ASSERT_TRUE(PutFile(*sb, "/sandbox/workspace/f", "old").ok());
  {
    auto t = sb->WriteFileInto("/sandbox/workspace/f", 0644, 1 << 20, false);
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(WriteAll((*t)->fd(), "partial new conte").ok());
    (*t)->Abandon();
  }
  auto big = sb->WriteFileInto("/sandbox/workspace/f", 0644, 10, false);
  ASSERT_TRUE(big.ok());
  (void)WriteAll((*big)->fd(), std::string(100, 'x'));
  EXPECT_EQ((*big)->Finish().status().code(), absl::StatusCode::kResourceExhausted);
  // The worker's answer comes after the abandoned one's cleanup; give it a moment to be sure.
  auto content = Get(*sb, "/sandbox/workspace/f");
  ASSERT_TRUE(content.ok());
  EXPECT_EQ(*content, "old");
  EXPECT_EQ(sb->ListFiles("/sandbox/workspace")->size(), 1u) << "a temporary file was left";
  DestroyAndCheckGone(std::move(sb));
}

}  // namespace
}  // namespace airlock::engine
