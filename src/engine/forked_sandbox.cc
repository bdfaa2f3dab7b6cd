#include "engine/forked_sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <tuple>

#include "command/capture.h"
#include "command/finish.h"
#include "command/report.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status.h"
#include "engine/host_probe.h"
#include "engine/internal/plan.h"
#include "engine/internal/plan_builder.h"
#include "engine/internal/sandbox_common.h"
#include "engine/internal/seccomp.h"
#include "fmt/format.h"
#include "spec/parse.h"

namespace airlock::engine {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using namespace internal::common;  // NOLINT: the helpers both sandbox kinds share

const Logger& Log() {
  static const Logger& logger = GetLogger("engine");
  return logger;
}

}  // namespace

struct ForkedSandbox::Plan {
  internal::WorkerPlan worker;
  std::vector<UniqueFd> owned_fds;  // idmapped mounts, cgroup entry
  UniqueFd sync_r, sync_w, error_r, error_w, in_r, out_w, err_w, status_w;
  uid_t host_uid = 0;
  gid_t host_gid = 0;
};

absl::Status ForkedSandbox::CheckSpec(const spec::SandboxSpec& spec) {
  RETURN_IF_ERROR(CheckSpecSupported(spec));
  if (spec.network.profile != spec::NetworkProfile::kNone) {
    return FailedPrecondition(
        fmt::format("network profile {}: fork-server workers have no egress path; use profile none",
                    spec::ToString(spec.network.profile)));
  }
  if (spec.process.supervisor != spec::SupervisorMode::kNone) {
    return FailedPrecondition(
        "process.supervisor: fork-server workers run without a syscall supervisor; use none (the "
        "syscall rules still apply as a seccomp filter)");
  }
  // Every worker gets the same spec: a host directory bound read-write would be one place that
  // all of them, one after the other and side by side, write to and read from.
  if (!spec.filesystem.workspace.empty() &&
      spec.filesystem.workspace_mode != spec::MountMode::kReadOnly) {
    return FailedPrecondition(fmt::format(
        "filesystem.workspace {}: fork-server workers share no writable state, so a host "
        "workspace is bound read-only only (workspaceMode: ro), or each worker has its own tmpfs "
        "workspace (leave workspace empty)",
        spec.filesystem.workspace));
  }
  for (size_t i = 0; i < spec.filesystem.mounts.size(); ++i) {
    const spec::Mount& m = spec.filesystem.mounts[i];
    if (m.mode != spec::MountMode::kReadOnly) {
      return FailedPrecondition(fmt::format(
          "filesystem.mounts[{}] ({}): fork-server workers share no writable state, so a host "
          "directory is bound read-only only",
          i, m.source));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ForkedSandbox>> ForkedSandbox::Prepare(SandboxOptions options) {
  if (options.cgroups == nullptr) return InvalidArgument("sandbox options: no cgroup driver");
  const spec::SandboxSpec& spec = options.spec;
  RETURN_IF_ERROR(CheckSpec(spec));
  ASSIGN_OR_RETURN(std::shared_ptr<const supervisor::SyscallPolicy> policy,
                   CompileSyscallPolicy(spec.process));
  RETURN_IF_ERROR(CheckImage(spec, options.image_rootfs));
  ASSIGN_OR_RETURN(std::vector<std::string> degraded,
                   CheckHost(spec, *options.cgroups, options.allow_degraded));
  if (options.tools_dir.empty()) options.tools_dir = DefaultToolsDir();
  if (options.run_dir_base.empty()) options.run_dir_base = DefaultRunDirBase();
  if (::geteuid() == 0 && ::getgroups(0, nullptr) != 0) {
    return FailedPrecondition(
        "the calling process has supplementary groups; drop them (setgroups(0, NULL)) first");
  }

  std::unique_ptr<ForkedSandbox> sb(new ForkedSandbox());
  sb->options_ = std::move(options);
  sb->id_ = sb->options_.id.empty() ? SandboxId::New() : sb->options_.id;
  sb->degraded_ = std::move(degraded);
  sb->policy_filter_ = policy->filter();
  if (policy->widened().empty()) {
    sb->seccomp_filter_ = internal::DefaultSeccompFilter();
  } else {
    ASSIGN_OR_RETURN(sb->seccomp_filter_, internal::BuildSeccompFilter(policy->widened()),
                     "build seccomp filter");
  }
  const spec::SandboxSpec& s = sb->options_.spec;
  RETURN_IF_ERROR(MakeDirs(sb->options_.run_dir_base, 0711));
  sb->run_dir_ = fmt::format("{}/{}", sb->options_.run_dir_base, sb->id_.value());
  if (::mkdir(sb->run_dir_.c_str(), 0700) != 0) {
    return ErrnoStatus(errno, fmt::format("mkdir {}", sb->run_dir_));
  }
  sb->plan_ = std::make_unique<Plan>();
  Plan& plan = *sb->plan_;
  ASSIGN_OR_RETURN(internal::PlanInputs in,
                   PreparePlanInputs(sb->options_, sb->run_dir_, sb->degraded_));
  plan.host_uid = in.host_uid;
  plan.host_gid = in.host_gid;
  ASSIGN_OR_RETURN(plan.worker.setup, internal::BuildPlan(in, &plan.owned_fds),
                   "plan sandbox mounts");
  plan.worker.workdir = s.workdir;
  plan.worker.rlimits = CommandRlimits(s);
  plan.worker.seccomp_filter = sb->seccomp_filter_;
  plan.worker.policy_filter = sb->policy_filter_;

  ASSIGN_OR_RETURN(sb->cgroup_, sb->options_.cgroups->Create(sb->id_.value()), "create cgroup");
  CgroupLimits limits = LimitsOf(s, sb->degraded_);
  limits.oom_group = true;  // the worker's cgroup is its whole sandbox
  RETURN_IF_ERROR(sb->cgroup_->SetLimits(limits), "set cgroup limits");
  ASSIGN_OR_RETURN(Cgroup::Entry entry, sb->cgroup_->OpenEntry(), "open cgroup");
  for (UniqueFd& fd : entry.fds) {
    if (entry.mode == Cgroup::Entry::Mode::kCloneInto) {
      plan.worker.cgroup_fd = fd.get();
    } else {
      plan.worker.setup.cgroup_join_fds.push_back(fd.get());
    }
    plan.owned_fds.push_back(std::move(fd));
  }
  return sb;
}

ForkedSandbox::~ForkedSandbox() {
  if (absl::Status st = Destroy(); !st.ok()) {
    Log().Warn("destroy forked sandbox", {{"sandbox", id_.value()}, {"error", Message(st)}});
  }
}

absl::Status ForkedSandbox::Start(const CommandSpec& command, const ForkFn& fork) {
  if (!plan_ || worker_.pid > 0) return FailedPrecondition("forked sandbox: Start called twice");
  t_start_ = Clock::now();
  command_ = command;
  Plan& plan = *plan_;
  int p[2];
  auto make_pipe = [&](UniqueFd& r, UniqueFd& w) -> absl::Status {
    if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
    r.Reset(p[0]);
    w.Reset(p[1]);
    return absl::OkStatus();
  };
  // The release goes by send(MSG_NOSIGNAL) on a socket pair: a worker that died before reading
  // it is reported from its error pipe, never a SIGPIPE that kills the server.
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0) {
    return ErrnoStatus(errno, "socketpair");
  }
  plan.sync_r.Reset(p[0]);
  plan.sync_w.Reset(p[1]);
  RETURN_IF_ERROR(make_pipe(plan.error_r, plan.error_w));
  RETURN_IF_ERROR(make_pipe(out_r_, plan.out_w));
  RETURN_IF_ERROR(make_pipe(err_r_, plan.err_w));
  RETURN_IF_ERROR(make_pipe(status_r_, plan.status_w));
  plan.in_r.Reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  kill_event_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!plan.in_r || !kill_event_) return ErrnoStatus(errno, "worker descriptors");
  ::fcntl(plan.out_w.get(), F_SETPIPE_SZ, 1 << 20);
  ::fcntl(plan.err_w.get(), F_SETPIPE_SZ, 1 << 20);
  ::fcntl(out_r_.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(err_r_.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(status_r_.get(), F_SETFL, O_NONBLOCK);

  internal::WorkerPlan& w = plan.worker;
  w.setup.sync_fd = plan.sync_r.get();
  w.setup.error_fd = plan.error_w.get();
  w.stdio[0] = plan.in_r.get();
  w.stdio[1] = plan.out_w.get();
  w.stdio[2] = plan.err_w.get();
  w.status_fd = plan.status_w.get();
  WorkerLaunch launch;
  launch.plan = internal::EncodeWorkerPlan(w, &launch.fds);
  launch.env = CommandEnv(options_.spec, command, 0);
  ASSIGN_OR_RETURN(worker_, fork(launch), "fork worker");
  if (worker_.pid <= 0 || !worker_.pidfd) return Internal("fork worker: no pid or pidfd");
  // The worker holds its own copies now; ours must go, or the pipes would never reach EOF.
  plan.sync_r.Reset();
  plan.error_w.Reset();
  plan.in_r.Reset();
  plan.out_w.Reset();
  plan.err_w.Reset();
  plan.status_w.Reset();
  plan.owned_fds.clear();

  RETURN_IF_ERROR(WriteIdMaps(worker_.pid, worker_.pidfd.get(), w.setup.uid, w.setup.gid,
                              plan.host_uid, plan.host_gid),
                  "write uid/gid maps");
  char go = 1;
  if (::send(plan.sync_w.get(), &go, 1, MSG_NOSIGNAL) != 1 && errno != EPIPE) {
    return ErrnoStatus(errno, "release worker");
  }
  internal::ChildError err{};
  ssize_t n;
  do {
    n = ::read(plan.error_r.get(), &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  if (n == 0) return absl::OkStatus();  // the worker closed the pipe: contained
  if (n != sizeof(err)) return Internal("worker setup ended without a report");
  std::string where = internal::ToString(static_cast<internal::Step>(err.step));
  if (err.op >= 0 && static_cast<size_t>(err.op) < w.setup.mounts.size()) {
    where += " " + w.setup.mounts[static_cast<size_t>(err.op)].target;
  }
  return ErrnoStatus(err.err, fmt::format("setup step \"{}\"", where));
}

void ForkedSandbox::Kill() {
  uint64_t one = 1;
  if (kill_event_) (void)!::write(kill_event_.get(), &one, sizeof(one));
}

absl::StatusOr<CommandResult> ForkedSandbox::Wait() {
  if (worker_.pid <= 0 || reaped_) return FailedPrecondition("forked sandbox: nothing to wait for");
  const spec::SandboxSpec& s = options_.spec;
  ASSIGN_OR_RETURN(Redactor redactor, RedactorFor({}), "redactor");
  CommandResult result;
  result.command_id = CommandId::New();
  result.degraded = degraded_;
  std::string raw_path = fmt::format("{}/{}.raw", run_dir_, result.command_id.value());
  UniqueFd raw(::open(raw_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!raw) return ErrnoStatus(errno, fmt::format("create {}", raw_path));
  OutputCapture capture(raw.get(), s.resources.max_log_bytes);
  auto deliver = [&](OutputCapture::Stream stream, std::string_view data) {
    capture.Add(stream, data);
  };
  milliseconds timeout =
      command_.timeout.value_or(milliseconds(s.resources.command_timeout_seconds * 1000));
  auto deadline = t_start_ + timeout;
  bool out_eof = false, err_eof = false, exited = false, killed = false, output_killed = false;
  bool cpu_exceeded = false;
  // The exit code the worker reported just before its _exit, with its output closed: enough to
  // answer without waiting for the teardown of its namespaces (Destroy reaps it).
  std::optional<int32_t> reported;
  std::string status_bytes;
  Clock::time_point exit_time;
  auto kill_tree = [&] {
    if (killed) return;
    killed = true;
    if (absl::Status k = cgroup_->Kill(); !k.ok()) {
      Log().Warn("kill worker", {{"sandbox", id_.value()}, {"error", Message(k)}});
    }
  };
  for (;;) {
    if ((exited || reported) && out_eof && err_eof) break;
    // The worker is PID 1 of its namespace: its exit took every process it started along, so
    // only an inherited pipe end in a dying child can hold the pipes open for a moment.
    if ((exited || reported) && Clock::now() - exit_time > milliseconds(200)) break;
    struct pollfd p[5];
    int np = 0, idx_out = -1, idx_err = -1, idx_exit = -1, idx_kill = -1, idx_status = -1;
    if (!out_eof) {
      idx_out = np;
      p[np++] = {out_r_.get(), POLLIN, 0};
    }
    if (!err_eof) {
      idx_err = np;
      p[np++] = {err_r_.get(), POLLIN, 0};
    }
    if (!exited) {
      idx_exit = np;
      p[np++] = {worker_.pidfd.get(), POLLIN, 0};
    }
    if (!killed) {
      idx_kill = np;
      p[np++] = {kill_event_.get(), POLLIN, 0};
    }
    if (!reported && status_r_) {
      idx_status = np;
      p[np++] = {status_r_.get(), POLLIN, 0};
    }
    auto wait = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    int poll_ms = exited ? 20 : static_cast<int>(std::clamp<int64_t>(wait.count(), 0, 100));
    int rc = ::poll(p, static_cast<nfds_t>(np), poll_ms);
    if (rc < 0 && errno != EINTR) return ErrnoStatus(errno, "poll");
    if (rc > 0) {
      if (idx_out >= 0 && p[idx_out].revents &&
          !ReadAvailable(out_r_.get(), OutputCapture::kStdout, deliver, &out_eof)) {
        out_eof = true;
      }
      if (idx_err >= 0 && p[idx_err].revents &&
          !ReadAvailable(err_r_.get(), OutputCapture::kStderr, deliver, &err_eof)) {
        err_eof = true;
      }
      if (idx_kill >= 0 && p[idx_kill].revents) kill_tree();
      if (idx_exit >= 0 && p[idx_exit].revents) {
        exited = true;
        if (!reported) exit_time = Clock::now();
      }
      if (idx_status >= 0 && p[idx_status].revents) {
        char buf[8];
        ssize_t n = ::read(status_r_.get(), buf, sizeof(buf));
        if (n > 0) status_bytes.append(buf, static_cast<size_t>(n));
        if (status_bytes.size() >= sizeof(int32_t) && !killed) {
          int32_t code;
          std::memcpy(&code, status_bytes.data(), sizeof(code));
          reported = code;
          if (!exited) exit_time = Clock::now();
        }
        if (n == 0 || status_bytes.size() >= sizeof(int32_t)) status_r_.Reset();
      }
    }
    if (capture.truncated() && !output_killed &&
        s.resources.output_limit_action == spec::OutputLimitAction::kKill) {
      output_killed = true;
      kill_tree();
    }
    if (!exited && !reported && Clock::now() >= deadline && !result.timed_out) {
      result.timed_out = true;
      kill_tree();
    }
    if (!exited && s.resources.cpu_time_seconds > 0 && !cpu_exceeded) {
      if (auto stats = cgroup_->Stats(); stats.ok() && (stats->cpu_user_us + stats->cpu_system_us) >
                                                           s.resources.cpu_time_seconds * 1000000) {
        cpu_exceeded = true;
        kill_tree();
      }
    }
  }
  if (reported && !exited) {
    result.exit_code = *reported;
  } else {
    siginfo_t info = {};
    if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(worker_.pidfd.get()), &info,
                 WEXITED) != 0) {
      return ErrnoStatus(errno, "reap worker");
    }
    reaped_ = true;
    if (info.si_code == CLD_EXITED) {
      result.exit_code = info.si_status;
    } else {
      result.exit_code = -1;
      result.signal = info.si_status;
    }
  }
  result.duration_ms = std::chrono::duration_cast<milliseconds>(exit_time - t_start_).count();
  ASSIGN_OR_RETURN(CgroupStats stats, cgroup_->Stats(), "read worker usage");
  FillResult(stats, capture, output_killed, cpu_exceeded, result);
  if (result.signal == SIGSYS) {
    result.violations.push_back(
        {"seccomp", "the command was killed for a forbidden system call", {{"signal", "SIGSYS"}}});
  }
  raw.Reset();
  const std::string& log_dir = options_.log_dir.empty() ? run_dir_ : options_.log_dir;
  RETURN_IF_ERROR(FinishOutput(command_, redactor, capture, raw_path,
                               fmt::format("{}/{}.log", log_dir, result.command_id.value()),
                               &result));
  if (options_.log_dir.empty()) {
    // The kept log went with the run directory: the result names no file that is gone.
    result.raw_log.clear();
    result.report = RenderReport(command_, result, &redactor);
  }
  return result;
}

absl::Status ForkedSandbox::Destroy() {
  if (destroyed_) return absl::OkStatus();
  destroyed_ = true;
  absl::Status status;
  if (worker_.pid > 0 && !reaped_) {
    if (cgroup_) status.Update(cgroup_->Kill());
    siginfo_t info;
    ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(worker_.pidfd.get()), &info,
             WEXITED);
    reaped_ = true;
  }
  plan_.reset();
  if (cgroup_) status.Update(Annotate(cgroup_->Destroy(), "remove cgroup"));
  if (!run_dir_.empty()) status.Update(Annotate(RemoveTree(run_dir_), "remove run directory"));
  return status;
}

}  // namespace airlock::engine
