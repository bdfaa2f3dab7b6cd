// The native backend (levels 1 and 2): a sandbox made of Linux namespaces, a read-only root,
// cgroups, Landlock, dropped capabilities and a seccomp filter, with airlock-init as PID 1.
//
//   ASSIGN_OR_RETURN(auto sandbox, NativeSandbox::Create(options));
//   ASSIGN_OR_RETURN(CommandResult r, sandbox->Exec({.argv = {"make", "test"}}, {}));
//   ASSIGN_OR_RETURN(auto server, sandbox->Start({.argv = {"./serve"}}, {}));  // concurrent
//   ...; server->Kill(); ASSIGN_OR_RETURN(CommandResult s, server->Wait());
//   RETURN_IF_ERROR(sandbox->Destroy());
//
// Create fails with a Status naming the setup step when the sandbox cannot be built, and with
// FailedPrecondition when the host lacks a protection the spec requires (unless the caller
// named it in allow_degraded; it is then listed in every CommandResult's `degraded`).
// A command's outcome is a CommandResult, never an error; Exec returns an error only when
// airlock itself fails.
//
// Threads: Start, Exec and UpdateNetworkPolicy may be called from several threads at once
// (commands run concurrently, each in its own cgroup); Destroy must not race with them, and
// every RunningCommand must be gone before the sandbox is destroyed. One internal thread reads
// airlock-init's control socket; another makes commands' cgroups ahead of time and removes
// finished ones (so a command's cgroup may still exist for a moment after its Wait returned).
// Must be created from a process whose other threads do not hold locks the child could need (the
// child only makes system calls until it execs), and from a thread that lives as long as the
// sandbox: the sandbox dies with the thread that created it (PR_SET_PDEATHSIG), which is what
// makes a crashed owner take its sandbox along.
#ifndef AIRLOCK_ENGINE_NATIVE_SANDBOX_H_
#define AIRLOCK_ENGINE_NATIVE_SANDBOX_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "command/capture.h"
#include "command/command.h"
#include "common/ids.h"
#include "common/unique_fd.h"
#include "engine/cgroup.h"
#include "init/protocol.h"
#include "netproxy/egress_proxy.h"
#include "netproxy/events.h"
#include "netproxy/policy.h"
#include "spec/sandbox_spec.h"
#include "supervisor/connect_observer.h"
#include "supervisor/policy.h"
#include "supervisor/supervisor.h"

namespace airlock::engine {

// Protections a caller may allow to be missing, by name. Anything else missing is an error.
inline constexpr const char* kDegradableProtections[] = {
    "landlock", "cgroup-memory", "cgroup-pids", "cgroup-cpu", "swap-accounting",
};

namespace internal {
// When a command ran, by its proxy name (NativeSandbox's blocked-event attribution).
struct ProxyClientRun {
  std::chrono::system_clock::time_point start;
  std::optional<std::chrono::system_clock::time_point> end;  // none while it runs
};
}  // namespace internal

// The only way out of a sandbox whose network profile is not "none": a netproxy::EgressProxy
// serving it on a unix socket bound into the sandbox at /run/egress.sock, and airlock-forwarder
// (started by the engine inside the sandbox) listening on 127.0.0.1:port. Commands get
// HTTP(S)_PROXY pointing there; nothing else leaves the sandbox's network namespace.
struct EgressOptions {
  netproxy::EgressProxy* proxy = nullptr;        // not owned; must outlive the sandbox
  netproxy::BlockedEventLog* blocked = nullptr;  // where the proxy's callback records refusals
  netproxy::OperatorPolicy operator_policy;      // private destinations the operator opened
  uint16_t port = 3128;
  // With profile none, register the sandbox with the proxy (which refuses everything under
  // none) and bind its socket all the same, so that UpdateNetworkPolicy can open the network of
  // the running sandbox: the forwarder starts then, and later commands get the proxy variables.
  // The node daemon's sandboxes set it. Unset (airlock run's one-shot sandboxes), a none
  // sandbox has no path out at all and its network can never be opened.
  bool open_later = false;
};

struct SandboxOptions {
  spec::SandboxSpec spec;  // effective and validated (spec/parse.h)
  // The sandbox's id (its cgroup and run directory are named after it); empty: a new one.
  SandboxId id;
  // Where airlock-init (and the other in-sandbox tools) live; bound at /sandbox/tools.
  std::string tools_dir;
  // Host directory for per-sandbox private state (generated /etc files, the root mount point,
  // kept logs). Default: /run/airlock as root, $XDG_RUNTIME_DIR/airlock (or /tmp/airlock-UID).
  std::string run_dir_base;
  // Where raw logs are kept (CommandResult.raw_log). Default: <run dir>/logs, which goes away
  // with the sandbox; callers that keep logs set a durable directory.
  std::string log_dir;
  // The unpacked root file system of spec.image, which the caller resolved (the node daemon's
  // image store; the spec keeps the digest, "sha256:…", as stored with the run). Required when
  // spec.image is set, and used like spec.rootfs: bound read-only, nosuid, nodev.
  std::string image_rootfs;
  CgroupDriver* cgroups = nullptr;  // not owned; required
  EgressOptions egress;             // required for network profiles other than none, or open_later
  std::vector<std::string> allow_degraded;
  // First host uid/gid of the ids sandboxes run as when airlock runs as root (host id =
  // base + spec.user.uid). Unprivileged callers map their own uid/gid instead.
  uint32_t host_id_base = 1000000000;
  // The caller runs one command and destroys the sandbox (`airlock run`): the command's cgroup
  // is still made ahead, while the child builds its mounts, but none for a next command, which
  // would cost a mkdir and an rmdir per hierarchy for nothing. More commands still work; they
  // make their cgroups when they start.
  bool single_command = false;
};

struct ExecOptions {
  // Explicit secret values to redact from previews and raw logs (on top of the detectors).
  std::vector<std::string> secrets;
  // Leave processes the command started in the background running after it exits (they stay
  // in the sandbox, limited by its cgroup). Default: the command's whole tree is killed.
  bool keep_background = false;
  // The command's id (empty: a new one), so a caller can name it before it starts.
  CommandId command_id;
  // Streaming: the command's output as it arrives, already redacted (a StreamRedactor per
  // stream holds back at most a window of bytes that could still be a secret's start). Called
  // on the thread that waits for the command; keep it short (it paces the command's pipes).
  std::function<void(OutputCapture::Stream, std::string_view)> on_output;
  // Receives the syscall supervisor's events while the command runs (process.supervisor notify
  // or ptrace); not owned, must outlive the command. The same events end up, bounded, in
  // CommandResult.syscalls.
  SyscallEventSink* syscall_events = nullptr;
};

// Where the time of Create and Exec went (for the benchmark's breakdown).
struct Timings {
  std::chrono::microseconds prepare{0};  // plan, generated files, cgroups, seccomp
  std::chrono::microseconds clone{0};    // clone3 + uid/gid maps + cgroup attach
  std::chrono::microseconds setup{0};    // child: mounts, pivot, Landlock ... exec of init
  std::chrono::microseconds init_ready{0};
  std::chrono::microseconds init_filter{0};  // from ready to init's answer to its filter
  std::chrono::microseconds spawn{0};        // spawn request to the command's start
  std::chrono::microseconds run{0};          // command start to exit and output drained
  std::chrono::microseconds finish{0};       // accounting, redaction, report
  std::chrono::microseconds destroy{0};
};

class NativeSandbox;
namespace internal {
class CommandCgroups;
}

// A file as seen inside the sandbox.
struct FileInfo {
  std::string name;
  init::FileType type = init::FileType::kOther;
  int64_t size = 0;
  uint32_t mode = 0;
  int64_t mtime = 0;   // seconds since the epoch
  std::string target;  // symlinks: where they point (never followed)
};

// A file being read out of, or written into, a sandbox. Reads: read fd() to its end, then
// Finish. Writes: write the content into fd(), then Finish, which commits it atomically (or
// Abandon, which leaves the old file, if any, as it was). Destroying an unfinished write abandons
// it. Not thread-safe; independent of other operations.
class FileTransfer {
 public:
  ~FileTransfer();
  FileTransfer(const FileTransfer&) = delete;
  FileTransfer& operator=(const FileTransfer&) = delete;

  int fd() const { return data_.get(); }
  absl::StatusOr<FileInfo> Finish();
  void Abandon();

 private:
  friend class NativeSandbox;
  FileTransfer(bool write, std::string path, UniqueFd data, UniqueFd result)
      : write_(write), path_(std::move(path)), data_(std::move(data)), result_(std::move(result)) {}
  bool write_;
  std::string path_;
  UniqueFd data_;
  UniqueFd result_;
  bool finished_ = false;
};

// A command started with NativeSandbox::Start. Wait runs the command's loop (capture, deadline,
// limits) on the calling thread and returns its result; Signal and Kill may be called from any
// thread while another waits. Destroying a command that has not been waited for kills its tree
// first. Must not outlive its sandbox.
class RunningCommand {
 public:
  ~RunningCommand();
  RunningCommand(const RunningCommand&) = delete;
  RunningCommand& operator=(const RunningCommand&) = delete;

  const CommandId& id() const;
  pid_t pid() const;  // in the sandbox's pid namespace

  // Blocks until the command and its output have ended (or its deadline or a limit ended it).
  // Call once.
  absl::StatusOr<CommandResult> Wait();
  // Sends `signal` to the command's process group (through airlock-init).
  absl::Status Signal(int signal);
  // Kills the command's whole process tree (its cgroup); Wait reports it as killed.
  void Kill();
  // After Wait: whether a Kill() ended the command (false when it came after the command had
  // ended on its own).
  bool killed() const;

  struct State;

 private:
  friend class NativeSandbox;
  explicit RunningCommand(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class NativeSandbox {
 public:
  static absl::StatusOr<std::unique_ptr<NativeSandbox>> Create(SandboxOptions options);
  ~NativeSandbox();  // Destroy(), logging a failure
  NativeSandbox(const NativeSandbox&) = delete;
  NativeSandbox& operator=(const NativeSandbox&) = delete;

  const SandboxId& id() const { return id_; }
  const std::vector<std::string>& degraded() const { return degraded_; }
  // Create's phases and those of the last command that finished.
  Timings timings() const {
    std::lock_guard lock(timings_mu_);
    return timings_;
  }
  // The host pid of airlock-init (for tests and the reaper).
  pid_t init_pid() const { return init_pid_; }
  const std::string& run_dir() const { return run_dir_; }
  Cgroup& cgroup() { return *cgroup_; }

  // Starts a command and returns at once; Exec is Start followed by Wait.
  absl::StatusOr<std::unique_ptr<RunningCommand>> Start(const CommandSpec& command,
                                                        const ExecOptions& options);
  absl::StatusOr<CommandResult> Exec(const CommandSpec& command, const ExecOptions& options);

  // File operations, done inside the sandbox by a worker of airlock-init as the sandbox's user,
  // beneath one of the sandbox's file areas (init::kFileRoots: /sandbox/workspace, /artifacts,
  // /tmp, /home, /cache), with every symlink resolved inside that area (init/file_ops.h).
  // `path` is absolute in the sandbox. A path elsewhere, with "..", or one that leads out through
  // a symlink is PermissionDenied; a missing file NotFound; a file over `max_bytes`
  // ResourceExhausted. Thread-safe, and concurrent with commands.
  absl::StatusOr<FileInfo> StatFile(const std::string& path);
  absl::StatusOr<std::vector<FileInfo>> ListFiles(const std::string& path);
  absl::Status MakeDirectory(const std::string& path, bool parents);
  absl::Status RemoveFile(const std::string& path, bool recursive);
  absl::StatusOr<std::unique_ptr<FileTransfer>> ReadFileFrom(const std::string& path,
                                                             uint64_t max_bytes);
  absl::StatusOr<std::unique_ptr<FileTransfer>> WriteFileInto(const std::string& path,
                                                              uint32_t mode, uint64_t max_bytes,
                                                              bool make_parents);

  // Freezes every process of the sandbox (no CPU used) or thaws it. Commands' deadlines keep
  // running while frozen.
  absl::Status Pause();
  absl::Status Resume();

  // Replaces the network policy of the running sandbox (open connections the new policy refuses
  // are closed). Loosening needs PolicyAuthority::kMayLoosen; the change is returned and reported
  // as a PolicyChanged event to the proxy's callback (the audit trail). Opening a sandbox that
  // runs under none starts its forwarder first (FailedPrecondition while it is paused); commands
  // started afterwards get the proxy variables. FailedPrecondition for a sandbox created with
  // profile none without EgressOptions::open_later: it has no egress path to open.
  absl::StatusOr<netproxy::PolicyChanged> UpdateNetworkPolicy(const spec::Network& network,
                                                              netproxy::PolicyAuthority authority);

  // Kills every process of the sandbox and removes its cgroups and files. Idempotent.
  absl::Status Destroy();

 private:
  friend class RunningCommand;
  struct Setup;
  // What airlock-init said about a process: filled by the control reader, read by its waiter.
  struct ExitSlot {
    UniqueFd event;  // eventfd, written once the process exited or airlock-init went away
    bool exited = false;
    bool init_gone = false;
    int wait_status = 0;
    init::SetupStage stage = init::SetupStage::kNone;
    int setup_errno = 0;
  };

  NativeSandbox() = default;
  // Starts airlock-init with `init_filter` queued for it (init/protocol.h, kFilterSelf): it puts
  // the filter on itself, so that commands inherit it instead of loading it each.
  absl::Status Launch(Setup& setup, const std::string& init_filter,
                      const std::string& observer_filter);
  absl::Status WaitReady(std::chrono::milliseconds timeout);
  // airlock-init's answer to the queued filter, and the observer's listener if it installed one.
  // Before the control reader starts.
  absl::StatusOr<UniqueFd> AwaitInitFiltered(std::chrono::milliseconds timeout);
  absl::Status StartForwarder();
  // Has airlock-init start a process in `cgroup`, entered through `entry` (cgroup.OpenEntry(),
  // which may have been opened ahead of time); its pid in the sandbox. With `exit_slot`, the
  // process's end is reported there. `before_start`, when set, gets the new process (pidfd,
  // host pid) before it runs: the hook where a syscall supervisor takes it over. On v1 without
  // `before_start` the process joins its cgroup by itself and runs at once; otherwise it waits
  // until we have placed it (v2) and called the hook.
  absl::StatusOr<pid_t> Spawn(
      const init::SpawnRequest& request, UniqueFd (&stdio)[3], Cgroup& cgroup, Cgroup::Entry entry,
      std::shared_ptr<ExitSlot> exit_slot = nullptr,
      const std::function<absl::Status(int pidfd, pid_t host_pid)>& before_start = nullptr);
  // The command's syscall supervisor, when the spec asks for one; `kill` kills the command,
  // `redactor` redacts what it decodes before `events` see it, `observer` sees it before.
  absl::StatusOr<std::unique_ptr<supervisor::Supervisor>> StartSupervisor(
      std::function<void()> kill, SyscallEventSink* events, SyscallEventSink* observer,
      const Redactor& redactor);
  // Its report into `result` (classification and violations included); a supervisor whose
  // processes outlive the command (keep_background) is kept until the sandbox goes.
  void FinishSupervisor(std::unique_ptr<supervisor::Supervisor> sup, bool wait,
                        CommandResult& result);
  void ReadControl();  // the control reader thread
  absl::Status SendSignal(pid_t pid, int signal);
  // Sends a file request with `data` (the worker's end of the data pipe, or none); returns our
  // end of the result socket.
  absl::StatusOr<UniqueFd> SendFileOp(const init::FileRequest& request, UniqueFd data);
  absl::StatusOr<std::vector<FileInfo>> FileOpResult(init::FileOp op, const std::string& path,
                                                     uint32_t flags, uint32_t mode);
  void RecordTimings(const Timings& command);
  // A cgroup cmd-`number` for a command, with the sandbox's memory and pids limits.
  absl::StatusOr<std::unique_ptr<Cgroup>> NewCommandCgroup(int number);

  SandboxOptions options_;
  SandboxId id_;
  std::string run_dir_;
  std::string log_dir_;
  std::vector<std::string> degraded_;
  std::mutex cgroup_mu_;  // cgroup_ is shared by Pause/Resume and the command cgroups' thread
  std::unique_ptr<Cgroup> cgroup_;
  std::unique_ptr<Cgroup> init_cgroup_;  // v2 only (v1 keeps init in cgroup_)
  // Commands' cgroups, made ahead of time and removed after the result, on their own thread.
  std::unique_ptr<internal::CommandCgroups> command_cgroups_;
  std::atomic<bool> paused_{false};
  std::string seccomp_filter_;
  // airlock-init carries seccomp_filter_ itself: spawn requests leave it out.
  bool init_filtered_ = false;
  std::shared_ptr<const supervisor::SyscallPolicy> syscall_policy_;
  std::mutex supervisors_mu_;  // lingering_supervisors_ (commands finish concurrently)
  std::vector<std::unique_ptr<supervisor::Supervisor>> lingering_supervisors_;
  UniqueFd control_;  // our end of airlock-init's control socket
  UniqueFd init_pidfd_;
  pid_t init_pid_ = -1;
  std::atomic<int> next_command_{1};
  std::atomic<uint64_t> next_file_op_{1};
  // The proxy serves this sandbox and its socket is bound inside (profile other than none, or
  // open_later): blocked attempts are recorded with the commands.
  std::atomic<bool> egress_bound_{false};
  // airlock-forwarder listens in the sandbox: commands get the proxy variables.
  std::atomic<bool> forwarding_{false};
  // Reports the direct connects the kernel refuses (supervisor/connect_observer.h) into
  // options_.egress.blocked; without a syscall supervisor, whose filter takes the listener.
  std::unique_ptr<supervisor::ConnectObserver> observer_;
  // Commands' blocked events are recorded (an egress path, the observer or a supervisor's routed
  // connects, and a log).
  bool records_blocked_ = false;
  // The BlockedNetworkEgress of an attempt (its client is the cmd-N of its cgroup, if any).
  netproxy::BlockedNetworkEgress DirectAttemptEvent(const supervisor::DirectAttempt& attempt) const;
  void RecordDirectAttempt(const supervisor::DirectAttempt& attempt);
  std::mutex egress_mu_;  // one network policy change at a time
  // When each command (by its proxy name, cmd-N) ran: a blocked event naming a command that ran
  // at the event's time is that command's; one naming nobody, or a command that was not running
  // then (a made-up or borrowed name), is listed by every command whose run it falls in
  // (OwnBlockedEvents). The last 1024 finished runs are kept.
  void StartProxyClientRun(const std::string& name);
  void EndProxyClientRun(const std::string& name);
  std::mutex proxy_clients_mu_;
  std::map<std::string, internal::ProxyClientRun> proxy_client_runs_;
  std::deque<std::string> finished_proxy_clients_;  // oldest first, for pruning
  pid_t forwarder_pid_ = -1;
  bool destroyed_ = false;

  // Spawning is one request and one reply at a time; the control reader hands the reply over.
  std::mutex spawn_mu_;
  std::mutex control_mu_;  // guards what follows, and sends on control_
  std::condition_variable spawned_cv_;
  std::optional<std::pair<std::string, std::vector<UniqueFd>>> spawned_reply_;
  std::shared_ptr<ExitSlot> spawn_exit_slot_;  // for the spawn in flight (see Spawn)
  std::map<pid_t, std::shared_ptr<ExitSlot>> exits_;
  bool init_gone_ = false;
  std::thread control_reader_;

  mutable std::mutex timings_mu_;
  Timings timings_;
};

// The spec's syscall policy (process.syscalls) checked against the engine's built-in profile as
// Create checks it: InvalidArgument naming the rule. Probes nothing on the host.
absl::Status CheckSyscallPolicy(const spec::Process& process);

// How the engine's built-in seccomp profile treats the system call `name`.
supervisor::ProfileTreatment ProfileTreatmentOf(std::string_view name);

// Where the built airlock-init and tools are: $AIRLOCK_TOOLS_DIR, else ../tools or
// ../libexec/airlock next to the running binary.
std::string DefaultToolsDir();

}  // namespace airlock::engine

#endif  // AIRLOCK_ENGINE_NATIVE_SANDBOX_H_
