#include "engine/native_sandbox.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
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
#include "engine/internal/command_cgroups.h"
#include "engine/internal/plan.h"
#include "engine/internal/plan_builder.h"
#include "engine/internal/sandbox_common.h"
#include "engine/internal/seccomp.h"
#include "engine/internal/syscalls.h"
#include "fmt/format.h"
#include "init/protocol.h"
#include "netproxy/network_required.h"
#include "spec/parse.h"

namespace airlock::engine {
namespace {

using namespace internal::common;  // NOLINT: the helpers both sandbox kinds share

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Processes of a sandbox that are not commands: airlock-init and airlock-forwarder.
constexpr int64_t kSandboxOwnProcesses = 2;
// Memory for them beyond the spec's (airlock-init keeps under 1 MiB, the forwarder a few).
constexpr int64_t kSandboxOwnMemoryBytes = int64_t{16} << 20;

const Logger& Log() {
  static const Logger& logger = GetLogger("engine");
  return logger;
}

std::chrono::microseconds Since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t);
}

}  // namespace

absl::Status CheckSyscallPolicy(const spec::Process& process) {
  return supervisor::SyscallPolicy::Compile(process, internal::TreatmentOf).status();
}

supervisor::ProfileTreatment ProfileTreatmentOf(std::string_view name) {
  return internal::TreatmentOf(name);
}

std::string DefaultToolsDir() {
  if (const char* env = std::getenv("AIRLOCK_TOOLS_DIR"); env != nullptr && *env) return env;
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "/usr/libexec/airlock";
  std::string dir(exe, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  std::string parent = dir.substr(0, dir.rfind('/'));
  for (const std::string& candidate :
       {dir + "/../tools", parent + "/../tools", parent + "/libexec/airlock", dir + "/tools"}) {
    if (::access((candidate + "/airlock-init").c_str(), X_OK) == 0) return candidate;
  }
  return "/usr/libexec/airlock";
}

struct NativeSandbox::Setup {
  internal::SetupPlan plan;
  std::vector<UniqueFd> owned_fds;
  uid_t host_uid = 0;
  gid_t host_gid = 0;
};

absl::StatusOr<std::unique_ptr<NativeSandbox>> NativeSandbox::Create(SandboxOptions options) {
  auto t0 = Clock::now();
  if (options.cgroups == nullptr) return InvalidArgument("sandbox options: no cgroup driver");
  RETURN_IF_ERROR(CheckSpecSupported(options.spec));
  ASSIGN_OR_RETURN(std::shared_ptr<const supervisor::SyscallPolicy> syscall_policy,
                   CompileSyscallPolicy(options.spec.process));
  RETURN_IF_ERROR(CheckImage(options.spec, options.image_rootfs));
  const bool forwards = options.spec.network.profile != spec::NetworkProfile::kNone;
  const bool wants_egress = forwards || options.egress.open_later;
  std::optional<netproxy::Policy> policy;
  if (wants_egress) {
    if (options.egress.proxy == nullptr) {
      return FailedPrecondition(fmt::format(
          "network profile {}{} needs an egress proxy; the caller provided none (airlock run "
          "starts one; library callers set SandboxOptions::egress)",
          spec::ToString(options.spec.network.profile), forwards ? "" : " with egress.open_later"));
    }
    ASSIGN_OR_RETURN(
        policy, netproxy::Policy::Compile(options.spec.network, options.egress.operator_policy),
        "network policy");
  }
  ASSIGN_OR_RETURN(std::vector<std::string> degraded,
                   CheckHost(options.spec, *options.cgroups, options.allow_degraded));
  if (options.tools_dir.empty()) options.tools_dir = DefaultToolsDir();
  if (::access((options.tools_dir + "/airlock-init").c_str(), X_OK) != 0) {
    return FailedPrecondition(fmt::format(
        "airlock-init not found in {}; set AIRLOCK_TOOLS_DIR to the directory that holds it",
        options.tools_dir));
  }
  if (options.run_dir_base.empty()) options.run_dir_base = DefaultRunDirBase();
  if (::geteuid() == 0 && ::getgroups(0, nullptr) != 0) {
    // setgroups is denied inside the sandbox, so any supplementary group of ours would follow
    // the sandbox's processes (invisible, but effective on host files).
    return FailedPrecondition(
        "the calling process has supplementary groups; drop them (setgroups(0, NULL)) first");
  }

  std::unique_ptr<NativeSandbox> sb(new NativeSandbox());
  sb->options_ = std::move(options);
  sb->id_ = sb->options_.id.empty() ? SandboxId::New() : sb->options_.id;
  sb->degraded_ = std::move(degraded);
  sb->syscall_policy_ = std::move(syscall_policy);
  const spec::SandboxSpec& s = sb->options_.spec;

  RETURN_IF_ERROR(MakeDirs(sb->options_.run_dir_base, 0711));
  sb->run_dir_ = fmt::format("{}/{}", sb->options_.run_dir_base, sb->id_.value());
  if (::mkdir(sb->run_dir_.c_str(), 0700) != 0) {
    return ErrnoStatus(errno, fmt::format("mkdir {}", sb->run_dir_));
  }
  sb->log_dir_ = sb->options_.log_dir.empty() ? sb->run_dir_ + "/logs" : sb->options_.log_dir;

  ASSIGN_OR_RETURN(internal::PlanInputs in,
                   PreparePlanInputs(sb->options_, sb->run_dir_, sb->degraded_));
  Setup setup;
  setup.host_uid = in.host_uid;
  setup.host_gid = in.host_gid;
  RETURN_IF_ERROR(MakeDirs(sb->log_dir_, 0700));
  if (wants_egress) {
    // The proxy's socket for this sandbox, bound into it at /run/egress.sock; the run directory
    // (mode 0700) keeps it out of reach of everything else on the host.
    in.egress_socket = sb->run_dir_ + "/egress.sock";
    RETURN_IF_ERROR(
        sb->options_.egress.proxy->AddSandbox(sb->id_, *std::move(policy), in.egress_socket),
        "egress proxy");
    sb->egress_bound_ = true;
  }
  ASSIGN_OR_RETURN(setup.plan, internal::BuildPlan(in, &setup.owned_fds), "plan sandbox mounts");

  ASSIGN_OR_RETURN(sb->cgroup_, sb->options_.cgroups->Create(sb->id_.value()), "create cgroup");
  CgroupLimits limits = LimitsOf(s, sb->degraded_);
  // airlock-init and the forwarder live beside the commands: room for them, so that a command
  // reaches its own pids limit first and the refused fork is counted in its cgroup (cgroup v2
  // counts pids.events where the limit was hit, not where the fork was).
  if (limits.pids_max > 0) limits.pids_max += kSandboxOwnProcesses;
  // The same for memory: the sandbox's limit counts airlock-init beside the command. Were it the
  // command's, it would be reached first, and its OOM kill takes the largest process of the
  // whole sandbox: airlock-init, when the command fills memory without mapping it (a file in
  // /sandbox/tmp), which ends the sandbox.
  if (limits.memory_bytes > 0) limits.memory_bytes += kSandboxOwnMemoryBytes;
  RETURN_IF_ERROR(sb->cgroup_->SetLimits(limits), "set cgroup limits");
  // cgroup v2 allows processes only in leaves once controllers are enabled below: airlock-init
  // gets its own. On v1 it stays in the sandbox's cgroup, which saves a cgroup per hierarchy.
  if (sb->cgroup_->version() == CgroupVersion::kV2) {
    ASSIGN_OR_RETURN(sb->init_cgroup_, sb->cgroup_->CreateChild("init"), "create init cgroup");
  }
  // The profile compiled at build time, unless a syscall policy widens it or kills calls the
  // profile refuses by their arguments.
  const std::vector<std::string>& widened = sb->syscall_policy_->widened();
  // A kill rule under a supervisor is routed to it, and the supervisor never sees a call the
  // profile refuses (an errno outranks a routed call): where the policy kills every call of a
  // name, the profile kills those it refuses itself.
  std::vector<std::string> killed;
  if (sb->syscall_policy_->mode() != spec::SupervisorMode::kNone) {
    for (const std::string& name : internal::FilteredSyscalls()) {
      if (sb->syscall_policy_->KillsEveryCall(name)) killed.push_back(name);
    }
  }
  if (widened.empty() && killed.empty()) {
    sb->seccomp_filter_ = internal::DefaultSeccompFilter();
  } else {
    ASSIGN_OR_RETURN(sb->seccomp_filter_,
                     internal::BuildSeccompFilter(widened, internal::Listeners::kRefused, killed),
                     "build seccomp filter");
  }
  // What airlock-init puts on itself: the profile; under a notify supervisor the profile less
  // its listener check, since a command's listener must be installed before the profile (which
  // refuses new listeners) and the commands then load the whole profile themselves.
  const bool notify = sb->syscall_policy_->mode() == spec::SupervisorMode::kNotify;
  std::string init_filter;
  if (notify) {
    ASSIGN_OR_RETURN(init_filter,
                     internal::BuildSeccompFilter(widened, internal::Listeners::kAllowed, killed),
                     "build seccomp filter");
  }
  // Direct connects are reported when the caller keeps blocked events, and no supervisor's filter
  // needs the one listener a process's filters may have (a notify supervisor's), or would lose
  // its traced connects to the observer's notification (ptrace: notify takes precedence).
  const bool observe = sb->options_.egress.blocked != nullptr &&
                       sb->syscall_policy_->mode() == spec::SupervisorMode::kNone;
  sb->timings_.prepare = Since(t0);

  const std::string starting = fmt::format("start sandbox {}", sb->id_.value());
  RETURN_IF_ERROR(sb->Launch(setup, notify ? init_filter : sb->seccomp_filter_,
                             observe ? supervisor::ConnectObserverFilter() : std::string()),
                  starting);
  RETURN_IF_ERROR(sb->WaitReady(milliseconds(10000)), starting);
  auto t_filter = Clock::now();
  ASSIGN_OR_RETURN(UniqueFd listener, sb->AwaitInitFiltered(milliseconds(10000)), starting);
  if (observe) {
    if (!listener) return Internal("airlock-init installed no connect observer");
    ASSIGN_OR_RETURN(sb->observer_,
                     supervisor::ConnectObserver::Start(
                         std::move(listener),
                         [raw = sb.get()](const supervisor::DirectAttempt& attempt) {
                           raw->RecordDirectAttempt(attempt);
                         }),
                     starting);
  }
  // A supervisor's routed connects go to the log as the observer's would (FinishSupervisor).
  sb->records_blocked_ = sb->options_.egress.blocked != nullptr &&
                         (sb->egress_bound_ || sb->observer_ ||
                          sb->syscall_policy_->mode() != spec::SupervisorMode::kNone);
  sb->timings_.init_filter = Since(t_filter);
  sb->init_filtered_ = !notify;
  sb->control_reader_ = std::thread([raw = sb.get()] { raw->ReadControl(); });
  if (forwards) RETURN_IF_ERROR(sb->StartForwarder(), starting);
  Log().Info("sandbox started", {{"sandbox", sb->id_.value()},
                                 {"init_pid", static_cast<int64_t>(sb->init_pid_)},
                                 {"level", static_cast<int>(s.level)}});
  return sb;
}

absl::Status NativeSandbox::Launch(Setup& setup, const std::string& init_filter,
                                   const std::string& observer_filter) {
  auto t0 = Clock::now();
  int control[2], sync[2], error[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) != 0) {
    return ErrnoStatus(errno, "socketpair");
  }
  UniqueFd control_child(control[1]);
  control_.Reset(control[0]);
  // A socket pair, not a pipe: the release is a send(MSG_NOSIGNAL), so a child that died in
  // setup before reading it is an error reported below, never a SIGPIPE that kills the caller.
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sync) != 0) {
    return ErrnoStatus(errno, "socketpair");
  }
  UniqueFd sync_r(sync[0]), sync_w(sync[1]);
  if (::pipe2(error, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  UniqueFd error_r(error[0]), error_w(error[1]);

  internal::SetupPlan& plan = setup.plan;
  plan.control_fd = control_child.get();
  plan.sync_fd = sync_r.get();
  plan.sync_peer_fd = sync_w.get();
  plan.error_fd = error_w.get();

  int pidfd = -1;
  struct clone_args args = {};
  args.flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
               CLONE_NEWUTS | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  // No migration by us: v2 clones straight into the cgroup, v1 has the child move itself.
  Cgroup& init_cgroup = init_cgroup_ ? *init_cgroup_ : *cgroup_;
  ASSIGN_OR_RETURN(Cgroup::Entry entry, init_cgroup.OpenEntry(), "open cgroup");
  if (entry.mode == Cgroup::Entry::Mode::kCloneInto) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(entry.fds[0].get());
  } else {
    for (const UniqueFd& fd : entry.fds) plan.cgroup_join_fds.push_back(fd.get());
  }
  long pid = internal::Clone3(&args);
  if (pid < 0) return ErrnoStatus(errno, "clone3");
  if (pid == 0) internal::RunChild(&plan);  // never returns

  init_pid_ = static_cast<pid_t>(pid);
  init_pidfd_.Reset(pidfd);
  control_child.Reset();
  sync_r.Reset();
  error_w.Reset();
  setup.owned_fds.clear();

  RETURN_IF_ERROR(WriteIdMaps(init_pid_, pidfd, plan.uid, plan.gid, setup.host_uid, setup.host_gid),
                  "write uid/gid maps");
  entry.fds.clear();
  char go = 1;
  if (::send(sync_w.get(), &go, 1, MSG_NOSIGNAL) != 1) {
    // EPIPE: the child died in setup; its error pipe says at which step.
    if (errno != EPIPE) return ErrnoStatus(errno, "release sandbox process");
  }
  // airlock-init's filter goes now, while the child builds its mounts: airlock-init finds it
  // waiting when it has said it is ready, with no round trip in between. A child that dies in
  // setup takes the message with it, and its error pipe says why.
  init::Writer filter;
  filter.Bytes(init_filter);
  filter.Bytes(observer_filter);
  if (int e = init::SendMessage(control_.get(), init::MessageType::kFilterSelf, filter.data());
      e != 0 && e != EPIPE && e != ECONNRESET) {
    return ErrnoStatus(e, "send the seccomp filter to airlock-init");
  }
  timings_.clone = Since(t0);

  // Its thread makes the first command's cgroup while the child builds its mount tree (a
  // failure there is reported by the first Start, which tries again).
  command_cgroups_ = std::make_unique<internal::CommandCgroups>(
      [this](int number) { return NewCommandCgroup(number); }, [this] { return next_command_++; },
      options_.single_command);

  auto t1 = Clock::now();
  internal::ChildError err{};
  ssize_t n;
  do {
    n = ::read(error_r.get(), &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  timings_.setup = Since(t1);
  if (n == 0) return absl::OkStatus();  // the exec of airlock-init closed the pipe
  if (n != sizeof(err)) return Internal("sandbox setup ended without exec or error report");
  std::string where = internal::ToString(static_cast<internal::Step>(err.step));
  if (err.op >= 0 && static_cast<size_t>(err.op) < plan.mounts.size()) {
    const internal::MountOp& op = plan.mounts[static_cast<size_t>(err.op)];
    where += op.source.empty() || op.kind != internal::MountOp::Kind::kBind
                 ? fmt::format(" {}", op.target)
                 : fmt::format(" {} at {}", op.source, op.target);
  }
  return ErrnoStatus(err.err, fmt::format("setup step \"{}\"", where));
}

namespace {

// The payload of the next message from airlock-init, which must be of type `want` and come
// within `timeout` (before the control reader runs). A descriptor it carries goes to *fd when
// given, and is closed otherwise.
absl::StatusOr<std::string> ReceiveFromInit(int control, init::MessageType want,
                                            milliseconds timeout, UniqueFd* fd = nullptr) {
  struct pollfd p = {control, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) return absl::DeadlineExceededError("airlock-init did not answer in time");
  init::MessageType type;
  std::string payload;
  int fds[init::kMaxFds];
  int nfds = 0;
  int err = init::ReceiveMessage(control, &type, &payload, fds, &nfds);
  for (int i = 0; i < nfds; ++i) {
    if (i == 0 && fd != nullptr) {
      fd->Reset(fds[i]);
    } else {
      ::close(fds[i]);
    }
  }
  if (err != 0 || type != want) {
    return Internal(fmt::format("airlock-init ended or answered out of turn (status {})", err));
  }
  return payload;
}

}  // namespace

absl::Status NativeSandbox::WaitReady(milliseconds timeout) {
  auto t0 = Clock::now();
  ASSIGN_OR_RETURN(std::string payload,
                   ReceiveFromInit(control_.get(), init::MessageType::kReady, timeout),
                   "wait for airlock-init");
  init::Reader r(payload);
  if (r.U32() != init::kProtocolVersion || !r.done()) {
    return FailedPrecondition("airlock-init speaks another protocol version; rebuild the tools");
  }
  timings_.init_ready = Since(t0);
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> NativeSandbox::AwaitInitFiltered(milliseconds timeout) {
  UniqueFd listener;
  ASSIGN_OR_RETURN(
      std::string payload,
      ReceiveFromInit(control_.get(), init::MessageType::kFilteredSelf, timeout, &listener),
      "seccomp filter on airlock-init");
  init::Reader r(payload);
  int32_t filter_err = r.I32();
  if (!r.done()) return Internal("seccomp filter on airlock-init: malformed answer");
  if (filter_err != 0) return ErrnoStatus(filter_err, "seccomp filter on airlock-init");
  return listener;
}

absl::Status NativeSandbox::StartForwarder() {
  // airlock-forwarder listens on the sandbox's loopback and hands each connection to the proxy
  // socket. It lives in its own cgroup so that killing a command's tree leaves it alone, and
  // says "ready" on its stdout once it listens.
  absl::StatusOr<std::unique_ptr<Cgroup>> made;
  {
    std::lock_guard lock(cgroup_mu_);
    made = cgroup_->CreateChild("egress");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Cgroup> cg, std::move(made), "create forwarder cgroup");
  // A failed start leaves no forwarder and no cgroup behind, so that opening a none sandbox
  // can be tried again.
  bool started = false;
  struct RemoveOnFailure {
    Cgroup& cg;
    const bool& started;
    ~RemoveOnFailure() {
      if (started) return;
      (void)cg.Kill();
      (void)cg.Destroy();
    }
  } remove_on_failure{*cg, started};
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  UniqueFd ready_r(ready[0]);
  UniqueFd stdio[3] = {UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC)), UniqueFd(ready[1]),
                       UniqueFd(::open("/dev/null", O_WRONLY | O_CLOEXEC))};
  init::SpawnRequest req;
  req.id = 0;
  req.argv = {"/sandbox/tools/airlock-forwarder",
              "--listen",
              fmt::format("127.0.0.1:{}", options_.egress.port),
              "--socket",
              "/run/egress.sock",
              "--ready-fd",
              "1"};
  req.cwd = "/";
  req.rlimits = CommandRlimits(options_.spec);
  req.seccomp_filter = init_filtered_ ? std::string() : seccomp_filter_;
  ASSIGN_OR_RETURN(Cgroup::Entry entry, cg->OpenEntry(), "open forwarder cgroup");
  ASSIGN_OR_RETURN(forwarder_pid_, Spawn(req, stdio, *cg, std::move(entry)),
                   "start airlock-forwarder");
  struct pollfd p = {ready_r.get(), POLLIN, 0};
  char buf[16] = {};
  if (::poll(&p, 1, 5000) != 1 || ::read(ready_r.get(), buf, sizeof(buf) - 1) <= 0 ||
      std::string_view(buf).substr(0, 5) != "ready") {
    // Later starts (opening a none sandbox) find the sandbox's own processes on its loopback.
    return Internal(fmt::format(
        "airlock-forwarder did not report listening on 127.0.0.1:{} within 5 s (it exited or "
        "hung; a process of the sandbox may hold that port)",
        options_.egress.port));
  }
  started = true;
  forwarding_ = true;
  return absl::OkStatus();
}

namespace {

// "192.0.2.1:443" or "[2001:db8::1]:443" (SyscallEvent.address), as a DirectAttempt.
std::optional<supervisor::DirectAttempt> ParseInetEndpoint(std::string_view text) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return std::nullopt;
  }
  std::string address(host);
  unsigned char buf[sizeof(in6_addr)];
  if (::inet_pton(AF_INET, address.c_str(), buf) != 1 &&
      ::inet_pton(AF_INET6, address.c_str(), buf) != 1) {
    return std::nullopt;  // unix:..., netlink, ...
  }
  uint16_t port = 0;
  std::string_view digits = text.substr(colon + 1);
  if (std::from_chars(digits.data(), digits.data() + digits.size(), port).ptr !=
      digits.data() + digits.size()) {
    return std::nullopt;
  }
  return supervisor::DirectAttempt{.address = std::move(address), .port = port};
}

// Under a supervisor the connect observer is off (the supervisor's filter holds the one listener
// a process's filters may have, or outranks ptrace's traced calls), so the connects routed to
// the supervisor stand in for it: every one when the policy routes connect and sendto. Each to a
// non-local address is recorded as it is decoded, as the observer's attempts are, so the log's
// flood limits and metadata budget apply to both alike. It observes the events before the
// supervisor redacts them (SupervisorOptions::observer): the log keeps the address the program
// gave, and the violations made from it are redacted with the rest of the result.
class RoutedConnects : public SyscallEventSink {
 public:
  explicit RoutedConnects(std::function<void(const supervisor::DirectAttempt&)> record)
      : record_(std::move(record)) {}

  void OnSyscallEvent(const SyscallEvent& e) override {
    if (e.kind == SyscallEventKind::kConnect && e.syscall != "bind") {
      std::optional<supervisor::DirectAttempt> attempt = ParseInetEndpoint(e.address);
      if (attempt && !supervisor::IsLocalAddress(attempt->address)) {
        attempt->syscall = e.syscall;
        attempt->time = std::chrono::system_clock::now();
        record_(*attempt);
      }
    }
  }

 private:
  std::function<void(const supervisor::DirectAttempt&)> record_;
};

}  // namespace

netproxy::BlockedNetworkEgress NativeSandbox::DirectAttemptEvent(
    const supervisor::DirectAttempt& attempt) const {
  netproxy::BlockedNetworkEgress e;
  e.sandbox = id_;
  e.host = attempt.address.find(':') == std::string::npos ? attempt.address
                                                          : "[" + attempt.address + "]";
  e.resolved_address = attempt.address;
  e.port = attempt.port;
  e.rule = std::string(netproxy::kRuleDirectConnect);
  e.method = attempt.syscall;
  e.time = attempt.time;
  // The command's cgroup (cmd-N, in every hierarchy) names it: the same name as its proxy
  // client, so OwnBlockedEvents attributes both kinds of event alike.
  std::string_view rest = attempt.cgroups;
  while (!rest.empty() && e.client.empty()) {
    std::string_view line = rest.substr(0, rest.find('\n'));
    rest.remove_prefix(std::min(rest.size(), line.size() + 1));
    if (std::string_view leaf = line.substr(line.rfind('/') + 1); leaf.starts_with("cmd-")) {
      e.client = std::string(leaf);
    }
  }
  return e;
}

void NativeSandbox::RecordDirectAttempt(const supervisor::DirectAttempt& attempt) {
  // The log's flood limits apply (a loop of attempts pushes no other refusal out).
  options_.egress.blocked->Record(DirectAttemptEvent(attempt));
}

void NativeSandbox::StartProxyClientRun(const std::string& name) {
  std::lock_guard lock(proxy_clients_mu_);
  proxy_client_runs_[name] = {std::chrono::system_clock::now(), std::nullopt};
}

void NativeSandbox::EndProxyClientRun(const std::string& name) {
  constexpr size_t kKeptProxyClientRuns = 1024;
  std::lock_guard lock(proxy_clients_mu_);
  auto it = proxy_client_runs_.find(name);
  if (it == proxy_client_runs_.end() || it->second.end) return;
  it->second.end = std::chrono::system_clock::now();
  finished_proxy_clients_.push_back(name);
  while (finished_proxy_clients_.size() > kKeptProxyClientRuns) {
    proxy_client_runs_.erase(finished_proxy_clients_.front());
    finished_proxy_clients_.pop_front();
  }
}

absl::StatusOr<netproxy::PolicyChanged> NativeSandbox::UpdateNetworkPolicy(
    const spec::Network& network, netproxy::PolicyAuthority authority) {
  std::lock_guard lock(egress_mu_);
  if (!egress_bound_) {
    return FailedPrecondition(
        "this sandbox has no egress path (profile none, created without egress.open_later as "
        "airlock run's are); its network cannot be opened later");
  }
  ASSIGN_OR_RETURN(netproxy::Policy policy,
                   netproxy::Policy::Compile(network, options_.egress.operator_policy),
                   "network policy");
  // Opening a sandbox that runs under none (which every other profile loosens, so only a caller
  // who may loosen gets here; UpdatePolicy refuses the others). The forwarder starts before the
  // swap: until then the proxy refuses whatever it hands over.
  if (network.profile != spec::NetworkProfile::kNone && !forwarding_ &&
      authority == netproxy::PolicyAuthority::kMayLoosen) {
    if (paused_) {
      return FailedPrecondition("the sandbox is paused; resume it before opening its network");
    }
    RETURN_IF_ERROR(StartForwarder(), "open the sandbox's network");
  }
  ASSIGN_OR_RETURN(netproxy::PolicyChanged change,
                   options_.egress.proxy->UpdatePolicy(id_, std::move(policy), authority));
  options_.spec.network = network;
  return change;
}

absl::StatusOr<pid_t> NativeSandbox::Spawn(
    const init::SpawnRequest& request, UniqueFd (&stdio)[3], Cgroup& cgroup, Cgroup::Entry entry,
    std::shared_ptr<ExitSlot> exit_slot,
    const std::function<absl::Status(int pidfd, pid_t host_pid)>& before_start) {
  // On cgroup v1 the process moves itself into its cgroup: a migration from here would take the
  // kernel's global cgroup lock, whose first use waits for an RCU grace period. On v2 (where
  // airlock-init, confined to its own cgroup namespace, may not clone into a sibling) we move it
  // before it starts.
  const bool self_join = entry.mode == Cgroup::Entry::Mode::kWriteSelf;
  init::SpawnRequest req = request;
  req.cgroup_join = self_join ? init::CgroupJoin::kWriteSelf : init::CgroupJoin::kNone;
  // A process that needs nothing from us before it runs starts without a round trip.
  const bool hold = !self_join || before_start;
  req.start = hold ? init::SpawnStart::kOnStart : init::SpawnStart::kAtOnce;
  std::vector<int> fds_out = {stdio[0].get(), stdio[1].get(), stdio[2].get()};
  if (self_join) {
    for (const UniqueFd& fd : entry.fds) fds_out.push_back(fd.get());
  }
  if (fds_out.size() > static_cast<size_t>(init::kMaxFds)) {
    return Internal("too many cgroup hierarchies to pass to airlock-init");
  }
  // One spawn at a time: airlock-init answers requests in order, and the control reader hands
  // its answer to whoever waits here.
  std::lock_guard spawn_lock(spawn_mu_);
  {
    std::lock_guard lock(control_mu_);
    if (init_gone_) return absl::UnavailableError("airlock-init has exited; the sandbox is gone");
    spawned_reply_.reset();
    // A self-joining process runs as soon as it is forked and may exit before we read the reply:
    // the control reader registers its slot as it reads kSpawned, before any kExited of it.
    spawn_exit_slot_ = std::move(exit_slot);
    if (int e = init::SendMessage(control_.get(), init::MessageType::kSpawn, init::EncodeSpawn(req),
                                  fds_out.data(), static_cast<int>(fds_out.size()));
        e != 0) {
      spawn_exit_slot_.reset();
      return ErrnoStatus(e, "send spawn request to airlock-init");
    }
  }
  for (UniqueFd& fd : stdio) fd.Reset();
  entry.fds.clear();

  // The reply carries a pidfd of the new process (which, with kOnStart, waits for kStart).
  std::pair<std::string, std::vector<UniqueFd>> reply;
  {
    std::unique_lock lock(control_mu_);
    if (!spawned_cv_.wait_for(lock, std::chrono::seconds(30),
                              [&] { return spawned_reply_.has_value() || init_gone_; })) {
      spawn_exit_slot_.reset();
      return absl::DeadlineExceededError("airlock-init did not answer a spawn request in 30 s");
    }
    spawn_exit_slot_.reset();
    if (!spawned_reply_) return absl::UnavailableError("airlock-init exited during a spawn");
    reply = std::move(*spawned_reply_);
    spawned_reply_.reset();
  }
  init::Reader r(reply.first);
  r.U64();
  int spawn_errno = r.I32();
  pid_t ns_pid = r.I32();
  if (!r.done()) return Internal("airlock-init sent an unexpected reply to a spawn request");
  if (spawn_errno != 0) return ErrnoStatus(spawn_errno, "airlock-init could not fork");
  auto forget_exit = [&] {
    std::lock_guard lock(control_mu_);
    exits_.erase(ns_pid);
  };
  if (reply.second.size() != 1) {
    forget_exit();
    return Internal("airlock-init sent no pidfd");
  }
  if (!hold) return ns_pid;  // it has joined its cgroup and started by itself
  // On failure the process stays blocked before its start until the caller kills its cgroup.
  absl::StatusOr<pid_t> host_pid = PidFromPidfd(reply.second[0].get());
  absl::Status ready =
      host_pid.ok() ? absl::OkStatus() : Annotate(host_pid.status(), "locate the new process");
  if (ready.ok() && !self_join) {
    ready = Annotate(cgroup.AddProcess(*host_pid), "place the new process in its cgroup");
  }
  if (ready.ok() && before_start) ready = before_start(reply.second[0].get(), *host_pid);
  if (!ready.ok()) {
    forget_exit();
    return ready;
  }
  init::Writer start;
  start.I32(ns_pid);
  std::lock_guard lock(control_mu_);
  if (init_gone_) {  // Destroy may be closing the control socket
    exits_.erase(ns_pid);
    return absl::UnavailableError("airlock-init has exited; the sandbox is gone");
  }
  if (int e = init::SendMessage(control_.get(), init::MessageType::kStart, start.data()); e != 0) {
    exits_.erase(ns_pid);
    return ErrnoStatus(e, "release the new process");
  }
  return ns_pid;
}

absl::StatusOr<std::unique_ptr<Cgroup>> NativeSandbox::NewCommandCgroup(int number) {
  absl::StatusOr<std::unique_ptr<Cgroup>> made;
  {
    std::lock_guard lock(cgroup_mu_);
    made = cgroup_->CreateChild(fmt::format("cmd-{}", number));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Cgroup> cg, std::move(made), "create command cgroup");
  // The command's own limits are the spec's, so an OOM kill or a refused fork is counted in the
  // command's cgroup, where we read it; an OOM kill takes the command's whole tree and nothing
  // else (oom_group: the sandbox's own cgroup has none, so airlock-init survives it).
  const spec::SandboxSpec& s = options_.spec;
  CgroupLimits limits;
  limits.oom_group = true;
  if (!Allowed(degraded_, "cgroup-memory")) limits.memory_bytes = s.resources.memory_mb << 20;
  if (!Allowed(degraded_, "cgroup-pids")) limits.pids_max = s.process.pids_limit;
  if (absl::Status st = cg->SetLimits(limits); !st.ok()) {
    (void)cg->Destroy();
    return Annotate(st, "set command cgroup limits");
  }
  return cg;
}

void NativeSandbox::ReadControl() {
  for (;;) {
    init::MessageType type;
    std::string payload;
    int fds[init::kMaxFds];
    int nfds = 0;
    int e = init::ReceiveMessage(control_.get(), &type, &payload, fds, &nfds);
    std::vector<UniqueFd> received;
    for (int i = 0; i < nfds; ++i) received.emplace_back(fds[i]);
    if (e != 0) break;
    if (type == init::MessageType::kSpawned) {
      std::lock_guard lock(control_mu_);
      init::Reader r(payload);
      r.U64();
      int spawn_errno = r.I32();
      pid_t pid = r.I32();
      if (r.done() && spawn_errno == 0 && spawn_exit_slot_) {
        exits_[pid] = std::move(spawn_exit_slot_);
      }
      spawn_exit_slot_.reset();
      spawned_reply_.emplace(std::move(payload), std::move(received));
      spawned_cv_.notify_all();
    } else if (type == init::MessageType::kExited) {
      init::Reader r(payload);
      pid_t pid = r.I32();
      int status = r.I32();
      int stage = r.I32();
      int serr = r.I32();
      if (!r.done()) continue;
      std::lock_guard lock(control_mu_);
      auto it = exits_.find(pid);
      if (it == exits_.end()) continue;  // the forwarder, or a command nobody waits for
      ExitSlot& slot = *it->second;
      slot.exited = true;
      slot.wait_status = status;
      slot.stage = static_cast<init::SetupStage>(stage);
      slot.setup_errno = serr;
      uint64_t one = 1;
      (void)!::write(slot.event.get(), &one, sizeof(one));
      exits_.erase(it);
    }
  }
  std::lock_guard lock(control_mu_);
  init_gone_ = true;
  for (auto& [pid, slot] : exits_) {
    slot->init_gone = true;
    uint64_t one = 1;
    (void)!::write(slot->event.get(), &one, sizeof(one));
  }
  exits_.clear();
  spawned_cv_.notify_all();
}

absl::Status NativeSandbox::SendSignal(pid_t pid, int signal) {
  init::Writer w;
  w.I32(pid);
  w.I32(signal);
  std::lock_guard lock(control_mu_);
  if (init_gone_) return absl::UnavailableError("airlock-init has exited; the sandbox is gone");
  if (int e = init::SendMessage(control_.get(), init::MessageType::kSignal, w.data()); e != 0) {
    return ErrnoStatus(e, "send signal request to airlock-init");
  }
  return absl::OkStatus();
}

void NativeSandbox::RecordTimings(const Timings& command) {
  std::lock_guard lock(timings_mu_);
  timings_.spawn = command.spawn;
  timings_.run = command.run;
  timings_.finish = command.finish;
}

absl::Status NativeSandbox::Pause() {
  if (destroyed_) return FailedPrecondition("sandbox was destroyed");
  std::lock_guard egress_lock(egress_mu_);  // not while the forwarder of an opening starts
  std::lock_guard lock(cgroup_mu_);
  RETURN_IF_ERROR(cgroup_->Freeze(), "pause sandbox");
  paused_ = true;
  return absl::OkStatus();
}

absl::Status NativeSandbox::Resume() {
  if (destroyed_) return FailedPrecondition("sandbox was destroyed");
  std::lock_guard lock(cgroup_mu_);
  RETURN_IF_ERROR(cgroup_->Thaw(), "resume sandbox");
  paused_ = false;
  return absl::OkStatus();
}

namespace {

// The blocked events of a command's run that are its own: those its client named it in, those
// that name nobody (git and urllib send no name, so they may be anyone's that ran meanwhile),
// and those that name a command that was not running at the event's time (a made-up or borrowed
// name hides nothing). Those naming another command that ran then are that command's. A direct
// attempt is named by its caller's cgroup, which no process can choose: it is its command's alone
// (one made by a background process after its command ended is in no command's result).
std::vector<netproxy::BlockedNetworkEgress> OwnBlockedEvents(
    std::vector<netproxy::BlockedNetworkEgress> events, const std::string& own,
    const std::map<std::string, internal::ProxyClientRun>& runs) {
  std::erase_if(events, [&](const netproxy::BlockedNetworkEgress& e) {
    if (e.rule == netproxy::kRuleDirectConnect && !e.client.empty()) return e.client != own;
    if (e.client.empty() || e.client == own) return false;
    auto it = runs.find(e.client);
    if (it == runs.end()) return false;
    const internal::ProxyClientRun& run = it->second;
    return e.time >= run.start && (!run.end || e.time <= *run.end);
  });
  return events;
}

}  // namespace

struct RunningCommand::State {
  NativeSandbox* sandbox = nullptr;
  CommandSpec command;
  ExecOptions options;
  std::optional<Redactor> redactor;
  CommandResult result;
  // Shared with the syscall supervisor, whose thread may kill the command (and which may
  // outlive this state with keep_background); cg_mu orders those kills with ours.
  std::shared_ptr<Cgroup> cg;
  std::shared_ptr<std::mutex> cg_mu = std::make_shared<std::mutex>();
  // The supervisor's observer when it records routed connects (declared before `sup`, which
  // calls it until it goes).
  std::unique_ptr<SyscallEventSink> routed_connects;
  std::unique_ptr<supervisor::Supervisor> sup;
  UniqueFd out_r, err_r, in_w;
  std::string raw_path;
  UniqueFd raw;
  std::optional<OutputCapture> capture;
  std::optional<StreamRedactor> live[2];
  std::shared_ptr<NativeSandbox::ExitSlot> exit;
  UniqueFd kill_event;  // eventfd: Kill() asks the waiting loop to kill the tree
  pid_t ns_pid = -1;
  uint64_t egress_mark = 0;
  uint64_t egress_dropped = 0;  // the log's Dropped() when the command started
  std::string proxy_client;     // the user of the command's proxy URL, named in its blocked events
  Clock::time_point t_start;
  Timings timings;
  bool waited = false;
  bool killed = false;  // Wait killed the tree at the caller's request (Kill)

  absl::Status KillTree(milliseconds timeout = std::chrono::seconds(5)) {
    std::lock_guard lock(*cg_mu);
    return cg->Kill(timeout);
  }
  absl::Status DestroyCgroup() {
    std::lock_guard lock(*cg_mu);
    return cg->Destroy();
  }
};

RunningCommand::RunningCommand(std::unique_ptr<State> state) : state_(std::move(state)) {}

RunningCommand::~RunningCommand() {
  if (state_ && !state_->waited) {
    Kill();
    if (absl::StatusOr<CommandResult> r = Wait(); !r.ok()) {
      Log().Warn("abandoned command",
                 {{"command", state_->result.command_id.value()}, {"error", Message(r.status())}});
    }
  }
}

const CommandId& RunningCommand::id() const { return state_->result.command_id; }
pid_t RunningCommand::pid() const { return state_->ns_pid; }

absl::Status RunningCommand::Signal(int signal) {
  return state_->sandbox->SendSignal(state_->ns_pid, signal);
}

bool RunningCommand::killed() const { return state_->killed; }

void RunningCommand::Kill() {
  uint64_t one = 1;
  (void)!::write(state_->kill_event.get(), &one, sizeof(one));
}

absl::StatusOr<std::unique_ptr<RunningCommand>> NativeSandbox::Start(const CommandSpec& command,
                                                                     const ExecOptions& options) {
  if (destroyed_) return FailedPrecondition("sandbox was destroyed");
  if (command.argv.empty()) return InvalidArgument("command: empty argv");
  const spec::SandboxSpec& s = options_.spec;
  auto st = std::make_unique<RunningCommand::State>();
  st->t_start = Clock::now();
  st->sandbox = this;
  st->command = command;
  st->options = options;
  // Refused secrets (too short to redact safely) fail the call before anything runs.
  ASSIGN_OR_RETURN(st->redactor, RedactorFor(options.secrets), "secret values");
  if (options.on_output) {
    st->live[0].emplace(*st->redactor);
    st->live[1].emplace(*st->redactor);
  }
  st->result.command_id = options.command_id.empty() ? CommandId::New() : options.command_id;
  st->result.degraded = degraded_;
  // Comes with its entry descriptors already open (v1: one `tasks` file per hierarchy).
  ASSIGN_OR_RETURN(internal::CommandCgroups::Numbered taken, command_cgroups_->Take());
  const int number = taken.number;
  st->cg = std::move(taken.cgroup);
  auto destroy_cgroup = [&] { (void)st->DestroyCgroup(); };

  int out[2], err[2], in[2] = {-1, -1};  // NOLINT
  if (::pipe2(out, O_CLOEXEC) != 0) {
    destroy_cgroup();
    return ErrnoStatus(errno, "pipe");
  }
  st->out_r.Reset(out[0]);
  UniqueFd out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) {
    destroy_cgroup();
    return ErrnoStatus(errno, "pipe");
  }
  st->err_r.Reset(err[0]);
  UniqueFd err_w(err[1]);
  UniqueFd in_r;
  if (command.stdin_data.empty()) {
    in_r.Reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  } else if (::pipe2(in, O_CLOEXEC) == 0) {
    in_r.Reset(in[0]);
    st->in_w.Reset(in[1]);
    ::fcntl(st->in_w.get(), F_SETFL, O_NONBLOCK);
  }
  st->kill_event.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  auto exit_slot = std::make_shared<ExitSlot>();
  exit_slot->event.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!in_r || !st->kill_event || !exit_slot->event) {
    destroy_cgroup();
    return ErrnoStatus(errno, "command descriptors");
  }
  st->exit = exit_slot;
  // Large pipes let a chatty command run at full speed.
  ::fcntl(out_w.get(), F_SETPIPE_SZ, 1 << 20);
  ::fcntl(err_w.get(), F_SETPIPE_SZ, 1 << 20);
  ::fcntl(st->out_r.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(st->err_r.get(), F_SETFL, O_NONBLOCK);

  // Output goes to a private file first; the kept log is written redacted when the command ends.
  // The file is made with the first byte of output: a quiet command makes none (a file's
  // creation and removal on the run directory's file system was a large share of its cost).
  st->raw_path = fmt::format("{}/{}.raw", run_dir_, st->result.command_id.value());
  st->capture.emplace(
      [state = st.get()]() -> absl::StatusOr<int> {
        state->raw.Reset(
            ::open(state->raw_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
        if (!state->raw) return ErrnoStatus(errno, fmt::format("create {}", state->raw_path));
        return state->raw.get();
      },
      s.resources.max_log_bytes);

  init::SpawnRequest req;
  req.id = static_cast<uint64_t>(number);
  req.argv = command.argv;
  st->proxy_client = fmt::format("cmd-{}", number);
  req.env = CommandEnv(s, command, forwarding_ ? options_.egress.port : 0, st->proxy_client);
  req.cwd = command.workdir.empty() ? s.workdir : command.workdir;
  req.rlimits = CommandRlimits(s);
  req.seccomp_filter = init_filtered_ ? std::string() : seccomp_filter_;
  req.policy_filter = syscall_policy_->filter();
  req.policy_listener = syscall_policy_->mode() == spec::SupervisorMode::kNotify
                            ? init::PolicyListener::kNotify
                            : init::PolicyListener::kNone;
  UniqueFd stdio[3] = {std::move(in_r), std::move(out_w), std::move(err_w)};
  st->egress_mark = records_blocked_ ? options_.egress.blocked->Mark(id_) : 0;
  st->egress_dropped = records_blocked_ ? options_.egress.blocked->Dropped(id_) : 0;
  if (records_blocked_) StartProxyClientRun(st->proxy_client);
  auto end_run_on_failure = [this, &st] { EndProxyClientRun(st->proxy_client); };
  if (records_blocked_ && syscall_policy_->mode() != spec::SupervisorMode::kNone) {
    st->routed_connects = std::make_unique<RoutedConnects>(
        [this, client = st->proxy_client](const supervisor::DirectAttempt& attempt) {
          netproxy::BlockedNetworkEgress event = DirectAttemptEvent(attempt);
          event.client = client;
          options_.egress.blocked->Record(std::move(event));
        });
  }
  absl::StatusOr<std::unique_ptr<supervisor::Supervisor>> sup = StartSupervisor(
      [cg = st->cg, mu = st->cg_mu] {
        std::lock_guard lock(*mu);
        (void)cg->Kill();
      },
      options.syscall_events, st->routed_connects.get(), *st->redactor);
  if (!sup.ok()) {
    end_run_on_failure();
    (void)::unlink(st->raw_path.c_str());
    destroy_cgroup();
    return Annotate(sup.status(), "start syscall supervisor");
  }
  st->sup = *std::move(sup);
  std::function<absl::Status(int, pid_t)> attach;
  if (st->sup) {
    attach = [&st](int pidfd, pid_t pid) { return st->sup->Attach({.pidfd = pidfd, .pid = pid}); };
  }
  absl::StatusOr<pid_t> pid = Spawn(req, stdio, *st->cg, std::move(taken.entry), exit_slot, attach);
  if (!pid.ok()) {
    end_run_on_failure();
    (void)st->KillTree();  // a process that was not started may be waiting for its start
    st->sup.reset();
    (void)::unlink(st->raw_path.c_str());
    destroy_cgroup();
    return Annotate(pid.status(), "start command");
  }
  st->ns_pid = *pid;
  st->timings.spawn = Since(st->t_start);
  return std::unique_ptr<RunningCommand>(new RunningCommand(std::move(st)));
}

absl::StatusOr<CommandResult> RunningCommand::Wait() {
  State& st = *state_;
  if (st.waited) return FailedPrecondition("command was already waited for");
  st.waited = true;
  NativeSandbox& sb = *st.sandbox;
  // The command's run ends when this call returns at the latest (on every path; with egress, it
  // ends before the command takes its blocked events, below).
  struct EndRun {
    NativeSandbox& sb;
    const std::string& name;
    ~EndRun() { sb.EndProxyClientRun(name); }
  } end_run{sb, st.proxy_client};
  const spec::SandboxSpec& s = sb.options_.spec;
  CommandResult& result = st.result;
  OutputCapture& capture = *st.capture;
  auto t_run = Clock::now();
  milliseconds timeout =
      st.command.timeout.value_or(milliseconds(s.resources.command_timeout_seconds * 1000));
  auto deadline = st.t_start + timeout;
  bool out_eof = false, err_eof = false, exited = false, output_killed = false;
  bool cpu_exceeded = false, tree_killed = false, init_gone = false;
  int wait_status = 0;
  init::SetupStage setup_stage = init::SetupStage::kNone;
  int setup_errno = 0;
  size_t stdin_written = 0;
  Clock::time_point exit_time, last_kill;
  auto kill_tree = [&]() {
    if (tree_killed) return;
    tree_killed = true;
    last_kill = Clock::now();
    if (absl::Status k = st.KillTree(); !k.ok()) {
      Log().Warn("kill command tree", {{"sandbox", sb.id_.value()}, {"error", Message(k)}});
    }
  };
  std::string redacted;
  auto deliver = [&](OutputCapture::Stream stream, std::string_view data) {
    capture.Add(stream, data);
    if (st.live[stream]) {
      redacted.clear();
      st.live[stream]->Write(data, &redacted);
      st.live[stream]->Flush(&redacted);  // a finished line goes out now
      if (!redacted.empty()) st.options.on_output(stream, redacted);
    }
  };

  for (;;) {
    if (exited && (out_eof || !st.out_r) && (err_eof || !st.err_r)) break;
    if (exited && !tree_killed && !st.options.keep_background) kill_tree();
    if (exited && Clock::now() - exit_time > milliseconds(200)) break;  // background writers
    struct pollfd p[5];
    int np = 0;
    int idx_out = -1, idx_err = -1, idx_exit = -1, idx_in = -1, idx_kill = -1;
    if (!out_eof) {
      idx_out = np;
      p[np++] = {st.out_r.get(), POLLIN, 0};
    }
    if (!err_eof) {
      idx_err = np;
      p[np++] = {st.err_r.get(), POLLIN, 0};
    }
    if (!exited) {
      idx_exit = np;
      p[np++] = {st.exit->event.get(), POLLIN, 0};
    }
    if (st.in_w) {
      idx_in = np;
      p[np++] = {st.in_w.get(), POLLOUT, 0};
    }
    if (!tree_killed) {
      idx_kill = np;
      p[np++] = {st.kill_event.get(), POLLIN, 0};
    }
    auto wait = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    int poll_ms = static_cast<int>(std::clamp<int64_t>(wait.count(), 0, 100));
    if (exited) poll_ms = 20;
    int rc = ::poll(p, static_cast<nfds_t>(np), poll_ms);
    if (rc < 0 && errno != EINTR) return ErrnoStatus(errno, "poll");
    if (rc > 0) {
      if (idx_out >= 0 && p[idx_out].revents) {
        if (!ReadAvailable(st.out_r.get(), OutputCapture::kStdout, deliver, &out_eof)) {
          out_eof = true;
        }
      }
      if (idx_err >= 0 && p[idx_err].revents) {
        if (!ReadAvailable(st.err_r.get(), OutputCapture::kStderr, deliver, &err_eof)) {
          err_eof = true;
        }
      }
      if (idx_in >= 0 && p[idx_in].revents) {
        ssize_t n = ::write(st.in_w.get(), st.command.stdin_data.data() + stdin_written,
                            st.command.stdin_data.size() - stdin_written);
        if (n > 0) stdin_written += static_cast<size_t>(n);
        if ((n < 0 && errno != EAGAIN) || stdin_written == st.command.stdin_data.size()) {
          st.in_w.Reset();
        }
      }
      if (idx_kill >= 0 && p[idx_kill].revents) {
        st.killed = !tree_killed && !exited;
        kill_tree();
      }
      if (idx_exit >= 0 && p[idx_exit].revents) {
        std::lock_guard lock(sb.control_mu_);
        if (st.exit->exited || st.exit->init_gone) {
          exited = true;
          exit_time = Clock::now();
          init_gone = st.exit->init_gone;
          wait_status = st.exit->wait_status;
          setup_stage = st.exit->stage;
          setup_errno = st.exit->setup_errno;
        }
      }
    }
    if (capture.truncated() && !output_killed &&
        s.resources.output_limit_action == spec::OutputLimitAction::kKill) {
      output_killed = true;
      kill_tree();
    }
    // While the sandbox is paused its processes cannot die; the kill waits for the resume.
    if (!exited && !sb.paused_ && Clock::now() >= deadline && !result.timed_out) {
      result.timed_out = true;
      kill_tree();
    }
    // On cgroup v1 a new process moves itself into its cgroup as it starts, so a kill right
    // after Start can find the cgroup still empty: repeat it until the command is gone.
    if (tree_killed && !exited && !sb.paused_ && Clock::now() - last_kill > milliseconds(100)) {
      last_kill = Clock::now();
      (void)st.KillTree(milliseconds(100));
    }
    if (!exited && s.resources.cpu_time_seconds > 0 && !cpu_exceeded) {
      if (auto stats = st.cg->Stats(); stats.ok() && (stats->cpu_user_us + stats->cpu_system_us) >
                                                         s.resources.cpu_time_seconds * 1000000) {
        cpu_exceeded = true;
        kill_tree();
      }
    }
  }
  if (init_gone) {
    st.sup.reset();  // the sandbox's processes died with airlock-init
    (void)st.DestroyCgroup();
    (void)::unlink(st.raw_path.c_str());
    return absl::UnavailableError("airlock-init exited while the command ran; the sandbox is gone");
  }
  for (int stream : {0, 1}) {
    if (!st.live[stream]) continue;
    redacted.clear();
    st.live[stream]->Finish(&redacted);
    if (!redacted.empty())
      st.options.on_output(static_cast<OutputCapture::Stream>(stream), redacted);
  }
  st.timings.run = Since(t_run);
  auto t_finish = Clock::now();

  result.duration_ms =
      std::chrono::duration_cast<milliseconds>((exited ? exit_time : Clock::now()) - t_run).count();
  if (WIFEXITED(wait_status)) {
    result.exit_code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    result.exit_code = -1;
    result.signal = WTERMSIG(wait_status);
  }
  if (st.sup) sb.FinishSupervisor(std::move(st.sup), !st.options.keep_background, result);
  ASSIGN_OR_RETURN(CgroupStats stats, st.cg->Stats(), "read command usage");
  // The emptied cgroup goes after the result is handed back (its rmdir in every hierarchy is
  // not the caller's wait); one that keeps background processes stays until the sandbox goes.
  if (!st.options.keep_background) {
    sb.command_cgroups_->Remove([cg = st.cg, mu = st.cg_mu] {
      std::lock_guard lock(*mu);
      return cg->Destroy();
    });
  }
  FillResult(stats, capture, output_killed, cpu_exceeded, result);
  if (setup_stage != init::SetupStage::kNone && setup_stage != init::SetupStage::kExec) {
    result.classification = Classification::kSandboxError;
    result.error = fmt::format("command setup step \"{}\": {}", init::ToString(setup_stage),
                               std::strerror(setup_errno));
  }
  if (result.syscalls.killed) {
    // A kill rule is the policy's verdict. The supervisor's own failure ("supervisor: ...")
    // killed the command too, but it is not the command's doing: a limit the command had already
    // hit (a fork bomb's pids) names what happened; otherwise the sandbox failed.
    const bool own_failure = result.syscalls.error.rfind("supervisor: ", 0) == 0;
    if (!own_failure) {
      result.classification = Classification::kPolicyBlocked;
    } else if (result.classification != Classification::kResourceExhaustedPids &&
               result.classification != Classification::kResourceExhaustedMemory &&
               result.classification != Classification::kCommandTimeout) {
      result.classification = Classification::kSandboxError;
      if (result.error.empty()) result.error = result.syscalls.error;
    }
  }
  // A command that failed after the policy refused one of its calls (an errno rule, seen by the
  // supervisor) was blocked by the policy. Without a supervisor the kernel answers alone and the
  // result cannot know.
  if (result.classification == Classification::kExitNonzero && result.syscalls.denied > 0) {
    result.classification = Classification::kPolicyBlocked;
  }
  if (result.signal == SIGSYS) {
    result.violations.push_back(
        {"seccomp", "the command was killed for a forbidden system call", {{"signal", "SIGSYS"}}});
  }
  std::optional<netproxy::NetworkRequired> network_required;
  if (sb.records_blocked_) {
    // The command's processes are gone: its run ends here, before any other command's
    // refusal that borrows its name could fall between this and the end of Wait.
    sb.EndProxyClientRun(st.proxy_client);
    std::vector<netproxy::BlockedNetworkEgress> blocked =
        sb.options_.egress.blocked->Since(sb.id_, st.egress_mark);
    {
      std::lock_guard lock(sb.proxy_clients_mu_);
      blocked = OwnBlockedEvents(std::move(blocked), st.proxy_client, sb.proxy_client_runs_);
    }
    // The command's client name is new with it, so what the log left out under that name is
    // the command's alone.
    constexpr size_t kMaxNetworkViolations = 64;
    netproxy::BlockedEventLog& log = *sb.options_.egress.blocked;
    for (Violation& v : netproxy::BlockedViolations(
             blocked, log.Suppressed(sb.id_, st.proxy_client),
             log.Dropped(sb.id_) - st.egress_dropped, kMaxNetworkViolations)) {
      result.violations.push_back(std::move(v));
    }
    network_required = netproxy::DetectNetworkRequired(result.classification, blocked);
    if (network_required) result.classification = Classification::kNetworkRequired;
  }
  st.raw.Reset();
  // Host names and the other fields that came from the sandbox (the supervisor redacted its
  // report as it decoded).
  RedactResultFields(*st.redactor, &result);
  RETURN_IF_ERROR(FinishOutput(st.command, *st.redactor, capture, st.raw_path,
                               fmt::format("{}/{}.log", sb.log_dir_, result.command_id.value()),
                               &result));
  if (network_required) {
    // The refused host leads the key lines and names the failure; the report is redone with it.
    netproxy::ApplyNetworkRequired(*network_required, result);
    result.failure_detail =
        st.redactor->Redact(fmt::format("{}:{}", network_required->host, network_required->port));
    result.key_lines.front() = st.redactor->Redact(result.key_lines.front());
    result.report = RenderReport(st.command, result, &*st.redactor);
  }
  st.timings.finish = Since(t_finish);
  sb.RecordTimings(st.timings);
  return result;
}

absl::StatusOr<CommandResult> NativeSandbox::Exec(const CommandSpec& command,
                                                  const ExecOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<RunningCommand> running, Start(command, options));
  return running->Wait();
}

absl::StatusOr<std::unique_ptr<supervisor::Supervisor>> NativeSandbox::StartSupervisor(
    std::function<void()> kill, SyscallEventSink* events, SyscallEventSink* observer,
    const Redactor& redactor) {
  if (syscall_policy_->mode() == spec::SupervisorMode::kNone) {
    return std::unique_ptr<supervisor::Supervisor>();
  }
  return supervisor::Supervisor::Start({.policy = syscall_policy_,
                                        .kill_command = std::move(kill),
                                        .events = events,
                                        .redactor = redactor,
                                        .observer = observer});
}

void NativeSandbox::FinishSupervisor(std::unique_ptr<supervisor::Supervisor> sup, bool wait,
                                     CommandResult& result) {
  // The command's processes are gone (killed with its tree): the supervisor sees the last go.
  bool done = sup->WaitDone(wait ? milliseconds(2000) : milliseconds(0));
  result.syscalls = sup->Report();
  constexpr size_t kMaxSyscallViolations = 16;
  for (size_t i = 0; i < result.syscalls.denied_calls.size() && i < kMaxSyscallViolations; ++i) {
    const SyscallEvent& e = result.syscalls.denied_calls[i];
    result.violations.push_back(
        {kSyscallViolation,
         fmt::format("{} denied by {} ({})", e.syscall, supervisor::RuleName(e.rule), e.action),
         ToJson(e)});
  }
  if (!done && wait) {
    Log().Warn("syscall supervisor still busy after the command", {{"sandbox", id_.value()}});
  }
  std::lock_guard lock(supervisors_mu_);
  std::erase_if(lingering_supervisors_, [](const auto& s) { return s->WaitDone(milliseconds(0)); });
  if (!done) {
    sup->StopEvents();  // the caller's sink lives as long as the command, not its background
    lingering_supervisors_.push_back(std::move(sup));  // its processes live on
  }
}

absl::Status NativeSandbox::Destroy() {
  if (destroyed_) return absl::OkStatus();
  destroyed_ = true;
  auto t0 = Clock::now();
  absl::Status status;
  // Closing the control socket makes airlock-init exit; the kernel then kills every other
  // process of its pid namespace. What does not need them gone is done while that happens.
  if (control_) ::shutdown(control_.get(), SHUT_RDWR);  // wakes the control reader
  if (control_reader_.joinable()) control_reader_.join();
  {
    // The reader set init_gone_ as it ended, so no send under the lock uses the socket after.
    std::lock_guard lock(control_mu_);
    control_.Reset();
  }
  {
    // After a network change under way: it uses the proxy until it returns.
    std::lock_guard lock(egress_mu_);
    if (egress_bound_) {
      status.Update(Annotate(options_.egress.proxy->RemoveSandbox(id_), "egress proxy"));
      egress_bound_ = false;
    }
  }
  // Only host-side files: mount points (whose mounts live in the sandbox's mount namespace),
  // generated output, sockets.
  if (!run_dir_.empty()) status.Update(Annotate(RemoveTree(run_dir_), "remove run directory"));
  if (init_pid_ > 0) {
    struct pollfd p = {init_pidfd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 2000) <= 0 && cgroup_) status.Update(cgroup_->Kill());
    ::waitpid(init_pid_, nullptr, 0);
    init_pid_ = -1;
  }
  init_pidfd_.Reset();
  observer_.reset();  // after every process that could call it is gone
  if (options_.egress.blocked != nullptr) options_.egress.blocked->Forget(id_);
  if (command_cgroups_) {
    status.Update(command_cgroups_->Stop());
    command_cgroups_.reset();
  }
  {
    std::lock_guard lock(supervisors_mu_);
    lingering_supervisors_.clear();  // their processes died with the sandbox
  }
  if (cgroup_) status.Update(Annotate(cgroup_->Destroy(), "remove cgroup"));
  std::lock_guard lock(timings_mu_);
  timings_.destroy = Since(t0);
  return status;
}

NativeSandbox::~NativeSandbox() {
  if (absl::Status s = Destroy(); !s.ok()) {
    Log().Error("destroy sandbox", {{"sandbox", id_.value()}, {"error", Message(s)}});
  }
}

}  // namespace airlock::engine

namespace airlock::engine {
namespace {

// The status of a failed file operation, from the worker's errno and message.
absl::Status FileOpStatus(const std::string& path, int err, const std::string& what) {
  std::string msg = fmt::format("{}: {}", path, what);
  switch (err) {
    case EXDEV:
      return PermissionDenied(
          fmt::format("{}: the path leads out of the sandbox's file area", path));
    case ELOOP:
      return PermissionDenied(
          fmt::format("{}: a symlink on the path is not followed here ({})", path, what));
    case EPERM:
    case EACCES:
      return PermissionDenied(fmt::format("{}: {}", msg, std::strerror(err)));
    case EFBIG:
      return ResourceExhausted(msg);
    case ECANCELED:
      return absl::CancelledError(msg);
    default:
      return ErrnoStatus(err, msg);
  }
}

FileInfo ToFileInfo(const init::FileEntry& e) {
  return {e.name, e.type, static_cast<int64_t>(e.size), e.mode, e.mtime, e.target};
}

absl::Status CheckFilePath(const std::string& path) {
  std::string root, rest;
  if (!init::SplitFileRoot(path, &root, &rest)) {
    return PermissionDenied(fmt::format(
        "{}: not a path under the sandbox's file areas (/sandbox/workspace, /sandbox/artifacts, "
        "/sandbox/tmp, /sandbox/home, /sandbox/cache), or it holds \"..\"",
        path));
  }
  return absl::OkStatus();
}

// Reads the worker's answer from the result socket.
absl::StatusOr<init::FileDone> ReceiveFileDone(int fd, std::chrono::milliseconds timeout) {
  struct pollfd p = {fd, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) return absl::DeadlineExceededError("the file worker did not answer in time");
  uint32_t type = 0;
  std::string payload;
  int e = init::ReceiveFrame(fd, &type, &payload);
  init::FileDone done;
  if (e != 0 || type != static_cast<uint32_t>(init::MessageType::kFileDone) ||
      !init::DecodeFileDone(payload, &done)) {
    return absl::UnavailableError("the file worker ended without an answer");
  }
  return done;
}

constexpr std::chrono::milliseconds kFileOpTimeout{60'000};

}  // namespace

absl::StatusOr<UniqueFd> NativeSandbox::SendFileOp(const init::FileRequest& request,
                                                   UniqueFd data) {
  if (destroyed_) return FailedPrecondition("sandbox was destroyed");
  RETURN_IF_ERROR(CheckFilePath(request.path));
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus(errno, "socketpair");
  }
  UniqueFd ours(sv[0]), theirs(sv[1]);
  if (!data) data.Reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
  int fds[2] = {data.get(), theirs.get()};
  std::lock_guard lock(control_mu_);
  if (init_gone_) return absl::UnavailableError("airlock-init has exited; the sandbox is gone");
  if (int e = init::SendMessage(control_.get(), init::MessageType::kFileOp,
                                init::EncodeFileRequest(request), fds, 2);
      e != 0) {
    return ErrnoStatus(e, "send file request to airlock-init");
  }
  return ours;
}

absl::StatusOr<std::vector<FileInfo>> NativeSandbox::FileOpResult(init::FileOp op,
                                                                  const std::string& path,
                                                                  uint32_t flags, uint32_t mode) {
  init::FileRequest req{
      .id = next_file_op_++, .op = op, .path = path, .mode = mode, .flags = flags};
  ASSIGN_OR_RETURN(UniqueFd result, SendFileOp(req, UniqueFd()));
  ASSIGN_OR_RETURN(init::FileDone done, ReceiveFileDone(result.get(), kFileOpTimeout));
  if (done.err != 0) return FileOpStatus(path, done.err, done.message);
  std::vector<FileInfo> out;
  out.reserve(done.entries.size());
  for (const init::FileEntry& e : done.entries) out.push_back(ToFileInfo(e));
  return out;
}

absl::StatusOr<FileInfo> NativeSandbox::StatFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<FileInfo> v, FileOpResult(init::FileOp::kStat, path, 0, 0));
  if (v.size() != 1) return Internal("stat: the file worker sent no entry");
  return v[0];
}

absl::StatusOr<std::vector<FileInfo>> NativeSandbox::ListFiles(const std::string& path) {
  return FileOpResult(init::FileOp::kList, path, 0, 0);
}

absl::Status NativeSandbox::MakeDirectory(const std::string& path, bool parents) {
  return FileOpResult(init::FileOp::kMkdir, path, parents ? init::kFileParents : 0, 0755).status();
}

absl::Status NativeSandbox::RemoveFile(const std::string& path, bool recursive) {
  return FileOpResult(init::FileOp::kRemove, path, recursive ? init::kFileRecursive : 0, 0)
      .status();
}

absl::StatusOr<std::unique_ptr<FileTransfer>> NativeSandbox::ReadFileFrom(const std::string& path,
                                                                          uint64_t max_bytes) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  UniqueFd ours(p[0]), theirs(p[1]);
  init::FileRequest req{
      .id = next_file_op_++, .op = init::FileOp::kRead, .path = path, .max_bytes = max_bytes};
  ASSIGN_OR_RETURN(UniqueFd result, SendFileOp(req, std::move(theirs)));
  return std::unique_ptr<FileTransfer>(
      new FileTransfer(false, path, std::move(ours), std::move(result)));
}

absl::StatusOr<std::unique_ptr<FileTransfer>> NativeSandbox::WriteFileInto(const std::string& path,
                                                                           uint32_t mode,
                                                                           uint64_t max_bytes,
                                                                           bool make_parents) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  UniqueFd theirs(p[0]), ours(p[1]);
  init::FileRequest req{.id = next_file_op_++,
                        .op = init::FileOp::kWrite,
                        .path = path,
                        .mode = mode,
                        .flags = make_parents ? init::kFileParents : 0,
                        .max_bytes = max_bytes};
  ASSIGN_OR_RETURN(UniqueFd result, SendFileOp(req, std::move(theirs)));
  return std::unique_ptr<FileTransfer>(
      new FileTransfer(true, path, std::move(ours), std::move(result)));
}

absl::StatusOr<FileInfo> FileTransfer::Finish() {
  if (finished_) return FailedPrecondition("file transfer already finished");
  finished_ = true;
  data_.Reset();  // a write's end of data; a read's end once drained
  absl::Status commit = absl::OkStatus();
  if (write_ && ::send(result_.get(), "C", 1, MSG_NOSIGNAL) != 1) {  // no SIGPIPE
    commit = ErrnoStatus(errno, fmt::format("{}: commit", path_));
  }
  // A worker that refused the write (a symlink on the path, a limit) has answered already and
  // stopped reading, so the commit byte fails with EPIPE: its answer says why.
  absl::StatusOr<init::FileDone> received = ReceiveFileDone(result_.get(), kFileOpTimeout);
  if (!received.ok()) return commit.ok() ? received.status() : commit;
  init::FileDone done = *std::move(received);
  if (!commit.ok() && done.err == 0) return commit;
  result_.Reset();
  if (done.err != 0) return FileOpStatus(path_, done.err, done.message);
  if (done.entries.empty()) return FileInfo{path_};
  return ToFileInfo(done.entries[0]);
}

void FileTransfer::Abandon() {
  if (finished_) return;
  finished_ = true;
  // Closing both ends without the commit byte makes the worker discard its temporary file.
  data_.Reset();
  result_.Reset();
}

FileTransfer::~FileTransfer() { Abandon(); }

}  // namespace airlock::engine
