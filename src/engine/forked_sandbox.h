// A sandbox for one process that the engine does not clone itself: a fork-server's zygote forks
// it (src/forkserver). The worker enters a fresh sandbox with the same steps as a NativeSandbox's
// first process (its own user, pid, mount, network, ipc, uts and cgroup namespaces, its own
// cgroup with the spec's limits, the read-only root and /sandbox layout, Landlock, no
// capabilities, rlimits and the seccomp filters airlock-init installs) and then, instead of
// exec'ing anything, returns into the program that forked it, which runs the submitted code.
//
// Host side (one worker per ForkedSandbox):
//   ASSIGN_OR_RETURN(auto sb, ForkedSandbox::Prepare(options));
//   RETURN_IF_ERROR(sb->Start(env, [&](const WorkerLaunch& l) { ...zygote: ForkWorker... }));
//   ASSIGN_OR_RETURN(CommandResult r, sb->Wait(command, timeout));
//   RETURN_IF_ERROR(sb->Destroy());
// Zygote side (a single-threaded process, started by the host):
//   ASSIGN_OR_RETURN(ForkedWorker w, ForkWorker(plan, fds, nfds));
//   if (w.pid == 0) { ...contained: run the code, exit... }
//
// The worker is cloned with CLONE_PARENT: it is the host process's child, not the zygote's, so
// the host reaps it through its pidfd and a dying zygote takes no worker along. Its parent-death
// signal follows the host thread that started the zygote: keep that thread alive as long as the
// workers.
//
// Thread safety: a ForkedSandbox is used by one thread at a time.
#ifndef AIRLOCK_ENGINE_FORKED_SANDBOX_H_
#define AIRLOCK_ENGINE_FORKED_SANDBOX_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "command/command.h"
#include "common/ids.h"
#include "common/unique_fd.h"
#include "engine/cgroup.h"
#include "engine/fork_worker.h"
#include "engine/native_sandbox.h"

namespace airlock::engine {

// What the zygote gets for one worker: the encoded plan, and the descriptors it names (send them
// in this order with SCM_RIGHTS; owned by the ForkedSandbox, valid while the fork callback runs).
struct WorkerLaunch {
  std::string plan;
  std::vector<int> fds;
  std::vector<std::string> env;  // the worker's environment ("K=V"), for the interpreter to set
};

class ForkedSandbox {
 public:
  // Plans the sandbox (run directory, mount plan, a cgroup with the spec's limits, seccomp
  // filters). Errors as NativeSandbox::Create; in addition a network profile other than none and
  // a syscall supervisor (notify, ptrace) are FailedPrecondition: a worker has no egress path
  // and no supervisor. SandboxOptions::egress is ignored.
  static absl::StatusOr<std::unique_ptr<ForkedSandbox>> Prepare(SandboxOptions options);
  // The spec checks of Prepare that need no host: what a worker cannot provide
  // (FailedPrecondition) and the backend's own (as NativeSandbox::Create).
  static absl::Status CheckSpec(const spec::SandboxSpec& spec);
  ~ForkedSandbox();  // Destroy(), logging a failure
  ForkedSandbox(const ForkedSandbox&) = delete;
  ForkedSandbox& operator=(const ForkedSandbox&) = delete;

  const SandboxId& id() const { return id_; }
  pid_t pid() const { return worker_.pid; }

  // Has `fork` create the worker from the launch (a zygote calling ForkWorker), writes its
  // uid/gid maps, releases it, and waits until it is contained. A failed setup step is an error
  // naming the step ("setup step \"landlock\": ..."); so is a fork callback's error. Call once.
  using ForkFn = std::function<absl::StatusOr<ForkedWorker>(const WorkerLaunch&)>;
  absl::Status Start(const CommandSpec& command, const ForkFn& fork);

  // Runs the worker's capture loop on the calling thread: output (counted, hashed, kept up to
  // maxLogBytes, redacted previews), the deadline (`timeout`, else the spec's command timeout;
  // the worker's cgroup is killed and the result says timed_out), limits; then reaps it and
  // returns its CommandResult (classification as in docs/engine.md). A worker that wrote its exit
  // code to its fd 3 (an int32) and closed its stdout and stderr is answered at once, with that
  // code; Destroy then kills and reaps it. Call once, after Start.
  absl::StatusOr<CommandResult> Wait();

  // Kills the worker (its cgroup) from any thread; Wait reports it killed.
  void Kill();

  // Kills the worker and removes its cgroup and run directory. Idempotent.
  absl::Status Destroy();

 private:
  ForkedSandbox() = default;

  SandboxOptions options_;
  SandboxId id_;
  std::string run_dir_;
  std::vector<std::string> degraded_;
  std::unique_ptr<Cgroup> cgroup_;
  std::string seccomp_filter_;
  std::string policy_filter_;
  struct Plan;
  std::unique_ptr<Plan> plan_;
  CommandSpec command_;
  ForkedWorker worker_;
  UniqueFd out_r_, err_r_, status_r_, kill_event_;
  std::chrono::steady_clock::time_point t_start_;
  bool reaped_ = false;
  bool destroyed_ = false;
};

}  // namespace airlock::engine

#endif  // AIRLOCK_ENGINE_FORKED_SANDBOX_H_
