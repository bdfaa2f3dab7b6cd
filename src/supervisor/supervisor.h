// The syscall supervisor of one command: a thread of the host process, outside the sandbox,
// that receives the calls the syscall policy routes to it (supervisor/policy.h), decides them
// by that policy, and records what the command did (CommandResult.syscalls).
//
//   ASSIGN_OR_RETURN(auto sup, Supervisor::Start({.policy = policy, .kill_command = kill}));
//   ... fork the process; it waits to be started ...
//   RETURN_IF_ERROR(sup->Attach({.pidfd = pidfd, .pid = host_pid}));  // before it runs
//   ... start it, wait for it to end ...
//   sup->WaitDone(std::chrono::seconds(1));
//   SyscallReport report = sup->Report();
//
// Two implementations behind this interface, chosen by the policy's mode:
//   notify  seccomp user notification: the process installs the policy filter with a listener
//           and hands it over (init/protocol.h); the supervisor answers each routed call
//           (SECCOMP_USER_NOTIF_FLAG_CONTINUE, an errno, or kills the command).
//   ptrace  PTRACE_SEIZE before the process runs, with EXITKILL, TRACESYSGOOD,
//           TRACECLONE/FORK/VFORK/EXEC and TRACESECCOMP, so that only the calls the filter
//           marks stop; forks stay traced; a denied call is skipped with its errno.
//
// What the sandbox cannot do to it: the thread is in the host's pid namespace (the sandbox
// cannot name it), in a process that Start makes non-dumpable (no ptrace, no /proc/<pid>/mem
// for other users), and it never acts on a pid: a notification's memory is read through
// /proc/<tid>/mem opened before SECCOMP_IOCTL_NOTIF_ID_VALID says the notification is still
// live, a ptrace-stopped tracee cannot be reaped (so its tid cannot be reused) until the tracer
// has seen it end, and the command is killed through kill_command (its cgroup), never by pid.
// The kernel bounds the pending notifications (one per blocked thread, so the pids limit); the
// report is bounded; the command's deadline is enforced by the engine's own thread and kills
// the command even while the supervisor is busy. If the supervisor cannot go on it kills the
// command; if its process dies, ptrace's EXITKILL and the sandbox's init (whose control socket
// closes) take every sandboxed process with it.
//
// Thread-safe: Attach, WaitDone and Report may be called from any thread (Attach once).
#ifndef AIRLOCK_SUPERVISOR_SUPERVISOR_H_
#define AIRLOCK_SUPERVISOR_SUPERVISOR_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "command/syscalls.h"
#include "init/protocol.h"
#include "spec/sandbox_spec.h"
#include "supervisor/policy.h"

namespace airlock::supervisor {

struct SupervisorOptions {
  std::shared_ptr<const SyscallPolicy> policy;  // its mode is notify or ptrace
  // Kills every process of the command (the engine kills its cgroup). Called on the
  // supervisor's thread for a kill rule, when the supervisor cannot go on, and from the
  // destructor when processes are still supervised. Required.
  std::function<void()> kill_command;
  SyscallEventSink* events = nullptr;  // not owned; must outlive the supervisor
  // Redacts every decoded string (paths, argv, addresses) before the report or `events` see it:
  // the run's secrets and the detectors (command/finish.h). None: nothing is redacted.
  std::optional<Redactor> redactor;
  // Sees each event as decoded, before redaction, for the host's own bookkeeping (the engine's
  // log of blocked connects, which needs the address as the program gave it); nothing it keeps
  // may leave unredacted. Not owned; called like `events`, until StopEvents.
  SyscallEventSink* observer = nullptr;
};

// The process to supervise, waiting to start.
struct Target {
  int pidfd = -1;                       // borrowed; the supervisor keeps a duplicate
  pid_t pid = -1;                       // its pid in the supervisor's pid namespace
  int listener_fd = init::kListenerFd;  // notify: where the listener appears in the process
};

class Supervisor {
 public:
  // Starts the supervisor's thread. FailedPrecondition when the kernel cannot provide the mode
  // (CheckAvailable).
  static absl::StatusOr<std::unique_ptr<Supervisor>> Start(SupervisorOptions options);

  // Kills the command if processes are still supervised, then stops the thread.
  virtual ~Supervisor() = default;

  // Takes over the process before it runs: ptrace seizes it; notify starts waiting for its
  // listener. An error leaves the process untouched (the caller must not start it).
  virtual absl::Status Attach(const Target& target) = 0;

  // Waits up to `timeout` until no supervised process is left; whether none is.
  virtual bool WaitDone(std::chrono::milliseconds timeout) = 0;

  // What was seen so far.
  virtual SyscallReport Report() const = 0;

  // From now on no event goes to options.events (whose owner may be about to free it); returns
  // once no call to it is in progress. For a supervisor that outlives its command's caller (the
  // command's background processes live on).
  virtual void StopEvents() = 0;
};

// OK when this kernel (and its configuration: Yama's ptrace_scope, a seccomp filter of our own)
// can provide `mode`; FailedPrecondition naming what is missing otherwise. Probes once per
// process. kNone is always available.
absl::Status CheckAvailable(spec::SupervisorMode mode);

}  // namespace airlock::supervisor

#endif  // AIRLOCK_SUPERVISOR_SUPERVISOR_H_
