// The native backend (levels 1 and 2): a sandbox made of Linux namespaces, a read-only root,
// cgroups, Landlock, dropped capabilities and a seccomp filter, with airlock-init as PID 1.
//
//   ASSIGN_OR_RETURN(auto sandbox, NativeSandbox::Create(options));
//   ASSIGN_OR_RETURN(CommandResult r, sandbox->Exec({.argv = {"make", "test"}}, {}));
//   RETURN_IF_ERROR(sandbox->Destroy());
//
// Create fails with a Status naming the setup step when the sandbox cannot be built, and with
// FailedPrecondition when the host lacks a protection the spec requires (unless the caller
// named it in allow_degraded; it is then listed in every CommandResult's `degraded`).
// A command's outcome is a CommandResult, never an error; Exec returns an error only when
// airlock itself fails. Not thread-safe: one Exec at a time per sandbox. Must be created from
// a process whose other threads do not hold locks the child could need (the child only makes
// system calls until it execs).
#ifndef AIRLOCK_ENGINE_NATIVE_SANDBOX_H_
#define AIRLOCK_ENGINE_NATIVE_SANDBOX_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "command/command.h"
#include "common/ids.h"
#include "common/unique_fd.h"
#include "engine/cgroup.h"
#include "init/protocol.h"
#include "netproxy/egress_proxy.h"
#include "netproxy/events.h"
#include "netproxy/policy.h"
#include "spec/sandbox_spec.h"
#include "supervisor/policy.h"
#include "supervisor/supervisor.h"

namespace airlock::engine {

// Protections a caller may allow to be missing, by name. Anything else missing is an error.
inline constexpr const char* kDegradableProtections[] = {
    "landlock", "cgroup-memory", "cgroup-pids", "cgroup-cpu", "swap-accounting",
};

// The only way out of a sandbox whose network profile is not "none": a netproxy::EgressProxy
// serving it on a unix socket bound into the sandbox at /run/egress.sock, and airlock-forwarder
// (started by the engine inside the sandbox) listening on 127.0.0.1:port. Commands get
// HTTP(S)_PROXY pointing there; nothing else leaves the sandbox's network namespace.
struct EgressOptions {
  netproxy::EgressProxy* proxy = nullptr;         // not owned; must outlive the sandbox
  netproxy::BlockedEventLog* blocked = nullptr;   // where the proxy's callback records refusals
  netproxy::OperatorPolicy operator_policy;       // private destinations the operator opened
  uint16_t port = 3128;
};

struct SandboxOptions {
  spec::SandboxSpec spec;  // effective and validated (spec/parse.h)
  // Where airlock-init (and the other in-sandbox tools) live; bound at /sandbox/tools.
  std::string tools_dir;
  // Host directory for per-sandbox private state (generated /etc files, the root mount point,
  // kept logs). Default: /run/airlock as root, $XDG_RUNTIME_DIR/airlock (or /tmp/airlock-UID).
  std::string run_dir_base;
  // Where raw logs are kept (CommandResult.raw_log). Default: <run dir>/logs, which goes away
  // with the sandbox; callers that keep logs set a durable directory.
  std::string log_dir;
  CgroupDriver* cgroups = nullptr;  // not owned; required
  EgressOptions egress;             // required for network profiles other than none
  std::vector<std::string> allow_degraded;
  // First host uid/gid of the ids sandboxes run as when airlock runs as root (host id =
  // base + spec.user.uid). Unprivileged callers map their own uid/gid instead.
  uint32_t host_id_base = 1000000000;
};

struct ExecOptions {
  // Explicit secret values to redact from previews and raw logs (on top of the detectors).
  std::vector<std::string> secrets;
  // Leave processes the command started in the background running after it exits (they stay
  // in the sandbox, limited by its cgroup). Default: the command's whole tree is killed.
  bool keep_background = false;
  // Receives the syscall supervisor's events while the command runs (process.supervisor notify
  // or ptrace); not owned, must outlive the command. The same events end up, bounded, in
  // CommandResult.syscalls.
  SyscallEventSink* syscall_events = nullptr;
};

// Where the time of Create and Exec went (for the benchmark's breakdown).
struct Timings {
  std::chrono::microseconds prepare{0};   // plan, generated files, cgroups, seccomp
  std::chrono::microseconds clone{0};     // clone3 + uid/gid maps + cgroup attach
  std::chrono::microseconds setup{0};     // child: mounts, pivot, Landlock ... exec of init
  std::chrono::microseconds init_ready{0};
  std::chrono::microseconds spawn{0};     // spawn request to the command's start
  std::chrono::microseconds run{0};       // command start to exit and output drained
  std::chrono::microseconds finish{0};    // accounting, redaction, report
  std::chrono::microseconds destroy{0};
};

class NativeSandbox {
 public:
  static absl::StatusOr<std::unique_ptr<NativeSandbox>> Create(SandboxOptions options);
  ~NativeSandbox();  // Destroy(), logging a failure
  NativeSandbox(const NativeSandbox&) = delete;
  NativeSandbox& operator=(const NativeSandbox&) = delete;

  const SandboxId& id() const { return id_; }
  const std::vector<std::string>& degraded() const { return degraded_; }
  const Timings& timings() const { return timings_; }
  // The host pid of airlock-init (for tests and the reaper).
  pid_t init_pid() const { return init_pid_; }
  const std::string& run_dir() const { return run_dir_; }
  Cgroup& cgroup() { return *cgroup_; }

  absl::StatusOr<CommandResult> Exec(const CommandSpec& command, const ExecOptions& options);

  // Replaces the network policy of the running sandbox (connections already open keep theirs).
  // Loosening needs PolicyAuthority::kMayLoosen; the change is reported as a PolicyChanged event
  // to the proxy's callback (the audit trail). FailedPrecondition for a sandbox created with
  // profile none: it has no egress path to open.
  absl::Status UpdateNetworkPolicy(const spec::Network& network,
                                   netproxy::PolicyAuthority authority);

  // Kills every process of the sandbox and removes its cgroups and files. Idempotent.
  absl::Status Destroy();

 private:
  struct Setup;
  NativeSandbox() = default;
  absl::Status Start(Setup& setup);
  absl::Status WaitReady(std::chrono::milliseconds timeout);
  absl::Status StartForwarder();
  // Has airlock-init start a process (waiting in its cgroup before it runs); its pid in the
  // sandbox.
  // `before_start`, when set, gets the new process (pidfd, host pid) before it runs: the hook
  // where a syscall supervisor takes it over.
  absl::StatusOr<pid_t> Spawn(
      const init::SpawnRequest& request, UniqueFd (&stdio)[3], Cgroup& cgroup,
      const std::function<absl::Status(int pidfd, pid_t host_pid)>& before_start = nullptr);
  // The command's syscall supervisor, when the spec asks for one; `kill` kills the command.
  absl::StatusOr<std::unique_ptr<supervisor::Supervisor>> StartSupervisor(
      std::function<void()> kill, SyscallEventSink* events);
  // Its report into `result` (classification and violations included); a supervisor whose
  // processes outlive the command (keep_background) is kept until the sandbox goes.
  void FinishSupervisor(std::unique_ptr<supervisor::Supervisor> sup, bool wait,
                        CommandResult& result);

  SandboxOptions options_;
  SandboxId id_;
  std::string run_dir_;
  std::string log_dir_;
  std::vector<std::string> degraded_;
  std::unique_ptr<Cgroup> cgroup_;
  std::unique_ptr<Cgroup> init_cgroup_;
  std::string seccomp_filter_;
  std::shared_ptr<const supervisor::SyscallPolicy> syscall_policy_;
  std::vector<std::unique_ptr<supervisor::Supervisor>> lingering_supervisors_;
  UniqueFd control_;  // our end of airlock-init's control socket
  UniqueFd init_pidfd_;
  pid_t init_pid_ = -1;
  int next_command_ = 1;
  bool egress_active_ = false;
  pid_t forwarder_pid_ = -1;
  bool destroyed_ = false;
  Timings timings_;
};

// Where the built airlock-init and tools are: $AIRLOCK_TOOLS_DIR, else ../tools or
// ../libexec/airlock next to the running binary.
std::string DefaultToolsDir();

}  // namespace airlock::engine

#endif  // AIRLOCK_ENGINE_NATIVE_SANDBOX_H_
