#include "engine/testing/sandbox_fixture.h"

#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/files.h"
#include "common/status.h"
#include "fmt/format.h"
#include "supervisor/supervisor.h"

namespace airlock::engine::testing {
namespace {

// Pidfds of every process in the sandbox's cgroup. A pidfd names one process for good, so
// checking them after destroy cannot be fooled by pid (or namespace inode) reuse.
// Pidfds of the processes in `cgroup`; why none were found, in *why.
std::vector<int> PidfdsOf(Cgroup& cgroup, std::string* why) {
  std::vector<int> fds;
  auto pids = cgroup.Processes();
  if (!pids.ok()) {
    *why = pids.status().ToString();
    return fds;
  }
  for (pid_t pid : *pids) {
    int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd >= 0) {
      fds.push_back(fd);
    } else {
      *why += fmt::format("pidfd_open({}): {}; ", pid, std::strerror(errno));
    }
  }
  if (pids->empty()) *why = "its cgroup lists no process";
  return fds;
}

bool Exited(int pidfd) {
  struct pollfd p = {pidfd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

}  // namespace

void SandboxTest::SetUp() {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: sandboxes map a dedicated host uid range";
  ASSERT_EQ(setgroups(0, nullptr), 0);
  CgroupOptions options;
  options.base = "airlock-test";
  auto driver = CgroupDriver::Detect(options);
  ASSERT_TRUE(driver.ok()) << driver.status();
  cgroups_ = std::move(*driver);
}

spec::SandboxSpec SandboxTest::TestSpec() {
  spec::SandboxSpec s;
  s.resources.memory_mb = 256;
  s.resources.command_timeout_seconds = 60;
  s.filesystem.workspace_size_mb = 64;
  s.filesystem.tmp_size_mb = 64;
  return s;
}

std::string SandboxTest::ProbePath() { return AIRLOCK_TEST_PROBE; }

spec::SandboxSpec SandboxTest::WithProbe(spec::SandboxSpec s) {
  s.filesystem.mounts.push_back({ProbePath(), "/opt/probe", spec::MountMode::kReadOnly});
  return s;
}

spec::SandboxSpec SandboxTest::Supervised(spec::SandboxSpec s) const {
  if (supervisor_ == spec::SupervisorMode::kNone ||
      s.process.supervisor != spec::SupervisorMode::kNone) {
    return s;
  }
  s.runtime = spec::Runtime::kTraced;
  s.process.supervisor = supervisor_;
  if (s.process.syscalls.empty() && s.process.syscall_default_action.empty()) {
    s.process.syscalls.push_back(
        {{"execve", "openat", "connect"},
         {},
         supervisor_ == spec::SupervisorMode::kPtrace ? "trace" : "notify"});
  }
  return s;
}

void SupervisedSandboxTest::SetUp() {
  SandboxTest::SetUp();
  if (IsSkipped()) return;
  supervisor_ = GetParam();
  if (absl::Status s = supervisor::CheckAvailable(supervisor_); !s.ok()) GTEST_SKIP() << s;
}

::testing::internal::ValueArray<spec::SupervisorMode, spec::SupervisorMode, spec::SupervisorMode>
SupervisorModes() {
  return ::testing::Values(spec::SupervisorMode::kNone, spec::SupervisorMode::kNotify,
                           spec::SupervisorMode::kPtrace);
}

std::string SupervisorModeName(const ::testing::TestParamInfo<spec::SupervisorMode>& info) {
  return spec::ToString(info.param);
}

absl::StatusOr<std::unique_ptr<NativeSandbox>> SandboxTest::TryCreate(
    const spec::SandboxSpec& s, std::vector<std::string> allow) {
  SandboxOptions options;
  options.spec = Supervised(s);
  options.tools_dir = AIRLOCK_TEST_TOOLS_DIR;
  options.cgroups = cgroups_.get();
  options.allow_degraded = std::move(allow);
  return NativeSandbox::Create(std::move(options));
}

std::unique_ptr<NativeSandbox> SandboxTest::Create(const spec::SandboxSpec& s,
                                                   std::vector<std::string> allow) {
  auto sandbox = TryCreate(s, std::move(allow));
  EXPECT_TRUE(sandbox.ok()) << sandbox.status();
  return sandbox.ok() ? std::move(*sandbox) : nullptr;
}

void SandboxTest::DestroyAndCheckGone(std::unique_ptr<NativeSandbox> sandbox) {
  ASSERT_NE(sandbox, nullptr);
  std::string why;
  std::vector<int> pidfds = PidfdsOf(sandbox->cgroup(), &why);
  EXPECT_FALSE(pidfds.empty()) << "airlock-init is not in the sandbox's cgroup: " << why;
  std::string id = sandbox->id().value();
  std::string run_dir = sandbox->run_dir();
  ASSERT_TRUE(sandbox->Destroy().ok());
  sandbox.reset();
  for (int fd : pidfds) {
    EXPECT_TRUE(Exited(fd)) << "a process of the sandbox survived its destruction";
    close(fd);
  }
  EXPECT_EQ(cgroups_->Open(id).status().code(), absl::StatusCode::kNotFound) << "cgroup left";
  struct stat st;
  EXPECT_NE(stat(run_dir.c_str(), &st), 0) << "run directory left: " << run_dir;
  std::string mounts = ReadFile("/proc/self/mountinfo").value_or("");
  EXPECT_EQ(mounts.find(id), std::string::npos) << "a host mount mentions the sandbox";
}

CommandResult SandboxTest::RunOnce(const spec::SandboxSpec& s, std::vector<std::string> argv,
                                   ExecOptions options) {
  auto sandbox = Create(s);
  if (sandbox == nullptr) return {};
  auto result = sandbox->Exec({.argv = std::move(argv)}, options);
  EXPECT_TRUE(result.ok()) << result.status();
  DestroyAndCheckGone(std::move(sandbox));
  return result.ok() ? *result : CommandResult{};
}

}  // namespace airlock::engine::testing
