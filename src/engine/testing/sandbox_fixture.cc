#include "engine/testing/sandbox_fixture.h"

#include <dirent.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>

#include "common/files.h"
#include "common/status.h"
#include "fmt/format.h"

namespace airlock::engine::testing {
namespace {

// Inode numbers of the given namespaces of `pid` ("pid", "mnt", "net", ...).
std::set<std::string> Namespaces(pid_t pid) {
  std::set<std::string> out;
  for (const char* ns : {"pid", "mnt", "net", "user", "ipc", "uts"}) {
    char buf[128];
    ssize_t n = readlink(fmt::format("/proc/{}/ns/{}", pid, ns).c_str(), buf, sizeof(buf) - 1);
    if (n > 0) out.insert(std::string(buf, static_cast<size_t>(n)));
  }
  return out;
}

// Pids of processes that are in any of `namespaces`.
std::vector<pid_t> ProcessesIn(const std::set<std::string>& namespaces) {
  std::vector<pid_t> found;
  DIR* d = opendir("/proc");
  while (struct dirent* e = readdir(d)) {
    pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    for (const std::string& ns : Namespaces(pid)) {
      if (namespaces.count(ns)) {
        found.push_back(pid);
        break;
      }
    }
  }
  closedir(d);
  return found;
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

absl::StatusOr<std::unique_ptr<NativeSandbox>> SandboxTest::TryCreate(
    const spec::SandboxSpec& s, std::vector<std::string> allow) {
  SandboxOptions options;
  options.spec = s;
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
  pid_t init = sandbox->init_pid();
  std::set<std::string> namespaces = Namespaces(init);
  ASSERT_FALSE(namespaces.empty());
  std::string id = sandbox->id().value();
  std::string run_dir = sandbox->run_dir();
  ASSERT_TRUE(sandbox->Destroy().ok());
  sandbox.reset();
  EXPECT_TRUE(ProcessesIn(namespaces).empty()) << "processes left in the sandbox's namespaces";
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
