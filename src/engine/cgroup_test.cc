// Contract tests for the Cgroup interface, run against every driver this host offers: v1 (the
// controller hierarchies) and v2 (the unified tree, which on hybrid hosts may lack controllers;
// tests that need a controller skip with the reason).
#include "engine/cgroup.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <shared_mutex>
#include <thread>

#include "common/ids.h"
#include "engine/internal/cgroup_files.h"
#include "engine/internal/command_cgroups.h"
#include "fmt/format.h"
#include "gtest/gtest.h"

namespace airlock::engine {
namespace {

#define REQUIRE_CONTROLLER(c)                                               \
  if (!driver_->HasController(c))                                           \
  GTEST_SKIP() << "controller " << ToString(c) << " not available in this " \
               << ToString(driver_->version()) << " hierarchy"

using std::chrono::milliseconds;

// A child process that waits until released, then execs `sh -c script`.
class Child {
 public:
  explicit Child(const char* script) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      char c;
      close(p[1]);
      if (read(p[0], &c, 1) != 1) _exit(99);
      execl("/bin/sh", "sh", "-c", script, nullptr);
      _exit(98);
    }
    close(p[0]);
    release_fd_ = p[1];
  }
  ~Child() {
    if (release_fd_ >= 0) close(release_fd_);
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void Release() {
    char c = 'x';
    ASSERT_EQ(write(release_fd_, &c, 1), 1);
    close(release_fd_);
    release_fd_ = -1;
  }
  // Waits up to 10 s for the child; returns its wait status (-1 if it is still running).
  int Wait() {
    int status = Wait(std::chrono::seconds(10));
    if (status == -1) ADD_FAILURE() << "child " << pid_ << " still running after 10 s";
    return status;
  }
  // Waits up to `timeout`; the wait status, or -1 if it is still running.
  int Wait(std::chrono::milliseconds timeout) {
    int status = 0;
    for (int64_t i = 0; i < timeout.count(); ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return status;
      }
      usleep(1000);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int release_fd_ = -1;
  bool reaped_ = false;
};

class CgroupContractTest : public ::testing::TestWithParam<CgroupOptions::Version> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups";
    CgroupOptions opts;
    opts.version = GetParam();
    opts.base = "airlock-test";
    auto driver = CgroupDriver::Detect(opts);
    if (!driver.ok()) GTEST_SKIP() << "driver unavailable here: " << driver.status();
    driver_ = std::move(*driver);
    name_ = SandboxId::New().value();
    auto cg = driver_->Create(name_);
    ASSERT_TRUE(cg.ok()) << cg.status();
    cg_ = std::move(*cg);
  }
  void TearDown() override {
    if (cg_) {
      EXPECT_TRUE(cg_->Destroy().ok());
    }
  }

  std::unique_ptr<CgroupDriver> driver_;
  std::string name_;
  std::unique_ptr<Cgroup> cg_;
};

TEST_P(CgroupContractTest, AddProcessListAndKill) {
  Child child("exec sleep 1000");
  ASSERT_TRUE(cg_->AddProcess(child.pid()).ok());
  child.Release();
  auto pids = cg_->Processes();
  ASSERT_TRUE(pids.ok()) << pids.status();
  EXPECT_NE(std::find(pids->begin(), pids->end(), child.pid()), pids->end());
  ASSERT_TRUE(cg_->Kill().ok());
  int status = child.Wait();
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_TRUE(cg_->Processes()->empty());
}

// A command's cgroup is removed on a helper thread while the sandbox's is listed (a kill, a check
// that it is empty). A child cgroup in the middle of its rmdir still has its directory while its
// files already answer ENODEV; that is an empty cgroup, never a failed listing. Expected: every
// listing succeeds and finds the process in the parent.
TEST_P(CgroupContractTest, ListingWhileChildCgroupsComeAndGo) {
  Child child("exec sleep 1000");
  ASSERT_TRUE(cg_->AddProcess(child.pid()).ok());
  child.Release();
  std::atomic<bool> stop = false;
  std::atomic<int> churned = 0;
  std::thread churn([&] {
    for (int i = 0; !stop; ++i) {
      auto sub = cg_->CreateChild(fmt::format("cmd-{}", i));
      if (!sub.ok()) continue;
      (void)(*sub)->Destroy();
      ++churned;
    }
  });
  int failures = 0;
  std::string first_failure;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < deadline) {
    auto pids = cg_->Processes();
    if (!pids.ok() || std::find(pids->begin(), pids->end(), child.pid()) == pids->end()) {
      if (failures++ == 0)
        first_failure = pids.ok() ? "process not listed" : pids.status().ToString();
    }
  }
  stop = true;
  churn.join();
  EXPECT_GT(churned, 10);
  EXPECT_EQ(failures, 0) << first_failure;
  ASSERT_TRUE(cg_->Kill().ok());
  child.Wait();
}

// Attack: a process listed in the cgroup exits and its pid is reused by a host process before
// the kill reaches it (the pid-based kill of v1, and of v2 before cgroup.kill). Expected: the
// kill checks membership through a pidfd, so a process outside the cgroup (here one that never
// was in it, standing for the successor) is left alone, and a member is killed.
TEST_P(CgroupContractTest, TheKillByPidSparesAProcessOutsideTheCgroup) {
  Child outsider("exec sleep 1000");
  outsider.Release();
  ASSERT_TRUE(internal::KillIfMember(outsider.pid(), cg_->name()).ok());
  EXPECT_EQ(outsider.Wait(std::chrono::milliseconds(300)), -1) << "an outsider was killed";
  Child member("exec sleep 1000");
  ASSERT_TRUE(cg_->AddProcess(member.pid()).ok());
  member.Release();
  ASSERT_TRUE(internal::KillIfMember(member.pid(), cg_->name()).ok());
  int status = member.Wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

TEST_P(CgroupContractTest, AnUnprivilegedProcessEntersThroughItsEntry) {
  auto entry = cg_->OpenEntry();
  ASSERT_TRUE(entry.ok()) << entry.status();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  struct clone_args args = {};
  args.exit_signal = SIGCHLD;
  if (entry->mode == Cgroup::Entry::Mode::kCloneInto) {
    args.flags = CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(entry->fds[0].get());
  }
  long pid = syscall(SYS_clone3, &args, sizeof(args));
  ASSERT_GE(pid, 0) << strerror(errno);
  if (pid == 0) {
    // Nobody: the file permission was checked when root opened the fds.
    if (syscall(SYS_setresuid, 65534, 65534, 65534) != 0) _exit(10);
    if (entry->mode == Cgroup::Entry::Mode::kWriteSelf) {
      for (const UniqueFd& fd : entry->fds) {
        if (write(fd.get(), "0", 1) != 1) _exit(11);
      }
    }
    char c = 'r';
    if (write(ready[1], &c, 1) != 1) _exit(12);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  auto pids = cg_->Processes();
  ASSERT_TRUE(pids.ok());
  EXPECT_NE(std::find(pids->begin(), pids->end(), static_cast<pid_t>(pid)), pids->end());
  ASSERT_TRUE(cg_->Kill().ok());
  int status = 0;
  waitpid(static_cast<pid_t>(pid), &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status)) << "child failed with exit " << WEXITSTATUS(status);
  close(ready[0]);
  close(ready[1]);
}

TEST_P(CgroupContractTest, KillTakesProcessesThatKeepForking) {
  // Forks a new background sleeper every few milliseconds: a kill that does not stop forks first
  // would leave survivors.
  Child child("while :; do sleep 100 & done");
  ASSERT_TRUE(cg_->AddProcess(child.pid()).ok());
  child.Release();
  for (int i = 0; i < 200 && cg_->Processes()->size() <= 1u; ++i) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_GT(cg_->Processes()->size(), 1u) << "the shell never forked";
  ASSERT_TRUE(cg_->Kill(std::chrono::seconds(5)).ok());
  EXPECT_TRUE(cg_->Processes()->empty());
  child.Wait();
}

TEST_P(CgroupContractTest, ChildrenAreKilledWithTheParent) {
  auto sub = cg_->CreateChild("cmd-1");
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_EQ((*sub)->name(), "airlock-test/" + name_ + "/cmd-1");
  Child child("exec sleep 1000");
  ASSERT_TRUE((*sub)->AddProcess(child.pid()).ok());
  child.Release();
  auto pids = cg_->Processes();
  ASSERT_TRUE(pids.ok());
  EXPECT_EQ(pids->size(), 1u);
  ASSERT_TRUE(cg_->Kill().ok());
  EXPECT_TRUE(WIFSIGNALED(child.Wait()));
}

TEST_P(CgroupContractTest, DestroyKillsWhatIsStillInsideAndRemovesTheTree) {
  // Destroy removes an emptied cgroup with a bare rmdir; a process left in a child cgroup
  // must make it fall back to kill and remove everything.
  auto sub = cg_->CreateChild("cmd-1");
  ASSERT_TRUE(sub.ok()) << sub.status();
  Child child("exec sleep 1000");
  ASSERT_TRUE((*sub)->AddProcess(child.pid()).ok());
  child.Release();
  ASSERT_TRUE(cg_->Destroy().ok());
  int status = child.Wait();
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  auto names = driver_->List();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(std::find(names->begin(), names->end(), name_), names->end());
  EXPECT_EQ(driver_->Open(name_).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(CgroupContractTest, FreezeStopsCpuUseAndThawResumes) {
  Child child("while :; do :; done");
  ASSERT_TRUE(cg_->AddProcess(child.pid()).ok());
  child.Release();
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_TRUE(cg_->Freeze().ok());
  int64_t before = cg_->Stats()->cpu_user_us + cg_->Stats()->cpu_system_us;
  std::this_thread::sleep_for(milliseconds(300));
  int64_t after = cg_->Stats()->cpu_user_us + cg_->Stats()->cpu_system_us;
  EXPECT_LT(after - before, 20000) << "a frozen cgroup used CPU";
  ASSERT_TRUE(cg_->Thaw().ok());
  // Thawed, it spins again: 20 ms of CPU soon (within 10 s however busy the host is).
  int64_t resumed = after;
  for (int i = 0; i < 200 && resumed - after <= 20000; ++i) {
    std::this_thread::sleep_for(milliseconds(50));
    resumed = cg_->Stats()->cpu_user_us + cg_->Stats()->cpu_system_us;
  }
  EXPECT_GT(resumed - after, 20000) << "a thawed cgroup did not run";
  ASSERT_TRUE(cg_->Kill().ok());
}

TEST_P(CgroupContractTest, CpuAccounting) {
  if (GetParam() == CgroupOptions::Version::kV1) REQUIRE_CONTROLLER(Controller::kCpu);
  Child child("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done");
  ASSERT_TRUE(cg_->AddProcess(child.pid()).ok());
  child.Release();
  EXPECT_EQ(WEXITSTATUS(child.Wait()), 0);
  auto stats = cg_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_GT(stats->cpu_user_us + stats->cpu_system_us, 10000);
}

TEST_P(CgroupContractTest, MemoryLimitOomKillsAndIsCounted) {
  REQUIRE_CONTROLLER(Controller::kMemory);
  ASSERT_TRUE(cg_->SetLimits({.memory_bytes = 32 << 20}).ok());
  // Touches 256 MiB: must be OOM-killed at 32 MiB.
  Child child("exec python3 -c 'b = bytearray(256 << 20); print(len(b))'");
  ASSERT_TRUE(cg_->AddProcess(child.pid()).ok());
  child.Release();
  int status = child.Wait();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  auto stats = cg_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_GE(stats->oom_kills, 1);
  EXPECT_GT(stats->memory_peak_bytes, 16 << 20);
  EXPECT_LE(stats->memory_peak_bytes, 33 << 20);
}

TEST_P(CgroupContractTest, PidsLimitRefusesForksAndIsCounted) {
  REQUIRE_CONTROLLER(Controller::kPids);
  ASSERT_TRUE(cg_->SetLimits({.pids_max = 8}).ok());
  Child child("for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 100 & done 2>/dev/null; wait");
  ASSERT_TRUE(cg_->AddProcess(child.pid()).ok());
  child.Release();
  // The loop ends at the limit; its refused forks are counted by then.
  absl::StatusOr<CgroupStats> stats = cg_->Stats();
  for (int i = 0; i < 200 && stats.ok() && (stats->pids_limit_hits < 1 || stats->pids_peak < 8);
       ++i) {
    std::this_thread::sleep_for(milliseconds(50));
    stats = cg_->Stats();
  }
  ASSERT_TRUE(stats.ok());
  EXPECT_LE(stats->pids_current, 8);
  EXPECT_GE(stats->pids_limit_hits, 1);
  EXPECT_EQ(stats->pids_peak, 8);
  ASSERT_TRUE(cg_->Kill().ok());
}

TEST_P(CgroupContractTest, CpuLimitThrottles) {
  REQUIRE_CONTROLLER(Controller::kCpu);
  ASSERT_TRUE(cg_->SetLimits({.cpu_cores = 0.2}).ok());
  Child child("while :; do :; done");
  ASSERT_TRUE(cg_->AddProcess(child.pid()).ok());
  child.Release();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  auto stats = cg_->Stats();
  ASSERT_TRUE(cg_->Kill().ok());
  ASSERT_TRUE(stats.ok());
  int64_t used = stats->cpu_user_us + stats->cpu_system_us;
  EXPECT_LT(used, 400000) << "0.2 cores for 1 s used " << used << " us";
}

TEST_P(CgroupContractTest, MissingControllerIsAClearError) {
  for (Controller c : {Controller::kMemory, Controller::kPids, Controller::kCpu}) {
    if (driver_->HasController(c)) continue;
    CgroupLimits limits;
    if (c == Controller::kMemory) limits.memory_bytes = 1 << 20;
    if (c == Controller::kPids) limits.pids_max = 4;
    if (c == Controller::kCpu) limits.cpu_cores = 1;
    absl::Status s = cg_->SetLimits(limits);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.ToString().find(ToString(c)), std::string::npos) << s;
    return;
  }
  GTEST_SKIP() << "every controller is available";
}

TEST_P(CgroupContractTest, OpenListAndDestroyIsIdempotent) {
  auto names = driver_->List();
  ASSERT_TRUE(names.ok());
  EXPECT_NE(std::find(names->begin(), names->end(), name_), names->end());
  auto opened = driver_->Open(name_);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->name(), cg_->name());
  ASSERT_TRUE((*opened)->Destroy().ok());
  EXPECT_TRUE(cg_->Destroy().ok());  // second time: nothing left, still OK
  EXPECT_EQ(driver_->Open(name_).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(driver_->Create("../escape").ok());
  EXPECT_FALSE(driver_->Create("a/b").ok());
}

// The engine's command cgroups (internal/command_cgroups.h) on each driver: fresh cgroups, each
// with its entry open, a failure reported to the taker, and nothing left after Stop.
TEST_P(CgroupContractTest, CommandCgroupsAreFreshAndAllRemoved) {
  std::atomic<int> next{1};
  std::atomic<bool> fail{false};
  internal::CommandCgroups cgroups(
      [&](int n) -> absl::StatusOr<std::unique_ptr<Cgroup>> {
        if (fail) return absl::ResourceExhaustedError("no more cgroups");
        return cg_->CreateChild(fmt::format("cmd-{}", n));
      },
      [&] { return next++; });
  std::vector<internal::CommandCgroups::Numbered> taken;
  for (int i = 0; i < 3; ++i) {
    auto t = cgroups.Take();
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_FALSE(t->entry.fds.empty());
    auto procs = t->cgroup->Processes();
    ASSERT_TRUE(procs.ok()) << procs.status();
    EXPECT_TRUE(procs->empty()) << "a command's cgroup must be one no process has been in";
    for (const auto& other : taken) EXPECT_NE(other.number, t->number);
    taken.push_back(*std::move(t));
  }
  // A maker that fails: the spare (if the thread made one) is handed out first, then the error.
  fail = true;
  absl::Status failed;
  for (int i = 0; i < 2 && failed.ok(); ++i) {
    auto t = cgroups.Take();
    failed = t.status();
    if (t.ok()) taken.push_back(*std::move(t));
  }
  EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted) << failed;
  for (auto& t : taken) {
    cgroups.Remove([cg = std::shared_ptr<Cgroup>(std::move(t.cgroup))] { return cg->Destroy(); });
  }
  ASSERT_TRUE(cgroups.Stop().ok());
  // Every cmd-N is gone (queued removals and the spare alike): each name can be made again.
  for (int n = 1; n < next; ++n) {
    auto again = cg_->CreateChild(fmt::format("cmd-{}", n));
    EXPECT_TRUE(again.ok()) << "cmd-" << n << " left behind: " << again.status();
    if (again.ok()) {
      EXPECT_TRUE((*again)->Destroy().ok());
    }
  }
}

// For a single command (`airlock run`): the first cgroup is made ahead, and no second one after
// it is taken; a later Take still gets a fresh cgroup, made on its own thread.
TEST_P(CgroupContractTest, CommandCgroupsForOneCommandMakeOnlyTheFirstAhead) {
  std::atomic<int> next{1}, made{0};
  std::atomic<bool> first_made{false};
  internal::CommandCgroups cgroups(
      [&](int n) -> absl::StatusOr<std::unique_ptr<Cgroup>> {
        ++made;
        auto c = cg_->CreateChild(fmt::format("cmd-{}", n));
        first_made = true;
        first_made.notify_all();
        return c;
      },
      [&] { return next++; }, /*one_ahead_only=*/true);
  first_made.wait(false);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // then it is the spare
  auto first = cgroups.Take();
  ASSERT_TRUE(first.ok()) << first.status();
  // The thread would make the next spare at once; give it the time to, and see it did not.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(made, 1);
  auto second = cgroups.Take();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(second->number, first->number);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(made, 2);
  for (auto* t : {&*first, &*second}) {
    cgroups.Remove([cg = std::shared_ptr<Cgroup>(std::move(t->cgroup))] { return cg->Destroy(); });
  }
  ASSERT_TRUE(cgroups.Stop().ok());
}

INSTANTIATE_TEST_SUITE_P(Drivers, CgroupContractTest,
                         ::testing::Values(CgroupOptions::Version::kV1,
                                           CgroupOptions::Version::kV2),
                         [](const auto& param_info) {
                           return param_info.param == CgroupOptions::Version::kV1 ? "V1" : "V2";
                         });

// A v1 kill freezes the tree, kills it and thaws it; a frozen task does not die of SIGKILL until
// thawed. A process that ends on purpose in that window (airlock run's second Ctrl-C) would leave
// its sandbox's tasks frozen and unkillable: StopCgroupFreezesForExit waits for the thaw first.
// (In a child process: the wait never gives the lock back.)
TEST(CgroupExitTest, StopCgroupFreezesWaitsForAKillToThaw) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<bool> frozen = false, thawed = false;
    std::thread kill([&] {
      std::shared_lock freezing(internal::KillFreezeLock());  // as Kill holds it
      frozen = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      thawed = true;
    });
    while (!frozen) std::this_thread::yield();
    StopCgroupFreezesForExit();
    _exit(thawed ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "it returned before the thaw";
}

TEST(PidfdTest, PidFromPidfd) {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  int fd = static_cast<int>(syscall(SYS_pidfd_open, child, 0));
  ASSERT_GE(fd, 0);
  EXPECT_EQ(*PidFromPidfd(fd), child);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(PidFromPidfd(fd).ok());
  close(fd);
}

}  // namespace
}  // namespace airlock::engine
