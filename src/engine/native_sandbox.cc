#include "engine/native_sandbox.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>
#include <optional>

#include "command/capture.h"
#include "command/finish.h"
#include "command/report.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status.h"
#include "engine/host_probe.h"
#include "engine/internal/plan.h"
#include "engine/internal/plan_builder.h"
#include "engine/internal/seccomp.h"
#include "engine/internal/syscalls.h"
#include "fmt/format.h"
#include "init/protocol.h"
#include "netproxy/network_required.h"
#include "spec/parse.h"

namespace airlock::engine {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const Logger& Log() {
  static const Logger& logger = GetLogger("engine");
  return logger;
}

std::chrono::microseconds Since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t);
}

bool Allowed(const std::vector<std::string>& allow, std::string_view name) {
  return std::find(allow.begin(), allow.end(), name) != allow.end();
}

// Features of the spec this backend does not provide yet fail here, by name, instead of running
// without them.
absl::Status CheckSpecSupported(const spec::SandboxSpec& s) {
  if (s.level != spec::Level::kBasic && s.level != spec::Level::kHardened) {
    return FailedPrecondition(fmt::format(
        "level {} ({}) is not served by the native backend, which provides levels 1 and 2",
        static_cast<int>(s.level), spec::ToString(s.level)));
  }
  if (!s.process.capabilities.empty()) {
    return FailedPrecondition("process.capabilities: sandboxed commands never keep capabilities");
  }
  if (s.process.seccomp_profile != "default") {
    return FailedPrecondition(
        fmt::format("process.seccompProfile \"{}\" is unknown", s.process.seccomp_profile));
  }
  if (!s.process.no_new_privs) {
    return FailedPrecondition("process.noNewPrivs: the native backend always sets no_new_privs");
  }
  if (s.cache.mode != spec::CacheMode::kNone) {
    return FailedPrecondition("cache modes other than none are not available yet");
  }
  if (!s.secrets.leases.empty()) {
    return FailedPrecondition("secret leases need the control plane, which this build lacks");
  }
  if (!s.image.empty()) {
    return FailedPrecondition("images need the node daemon's image store; use rootfs instead");
  }
  return absl::OkStatus();
}

// The spec's syscall policy, checked against the built-in profile (InvalidArgument naming the
// rule) and against what the kernel can provide (FailedPrecondition).
absl::StatusOr<std::shared_ptr<const supervisor::SyscallPolicy>> CompileSyscallPolicy(
    const spec::Process& process) {
  ASSIGN_OR_RETURN(supervisor::SyscallPolicy policy,
                   supervisor::SyscallPolicy::Compile(process, internal::TreatmentOf));
  RETURN_IF_ERROR(supervisor::CheckAvailable(process.supervisor));
  return std::make_shared<const supervisor::SyscallPolicy>(std::move(policy));
}

// Fails closed when the host lacks a protection the spec needs, unless the caller allowed it
// by name; returns the names of the allowed missing protections.
absl::StatusOr<std::vector<std::string>> CheckHost(const spec::SandboxSpec& s,
                                                   const CgroupDriver& cgroups,
                                                   const std::vector<std::string>& allow) {
  for (const std::string& name : allow) {
    bool known = false;
    for (const char* d : kDegradableProtections) known |= name == d;
    if (!known) {
      return InvalidArgument(fmt::format(
          "--allow-degraded: unknown protection \"{}\" (known: landlock, cgroup-memory, "
          "cgroup-pids, cgroup-cpu, swap-accounting)",
          name));
    }
  }
  const HostFeatures& host = ProbeHost();
  if (!host.user_namespaces) {
    return FailedPrecondition(
        "user namespaces are disabled on this host; enable them with "
        "`sysctl -w user.max_user_namespaces=15000` (and kernel.unprivileged_userns_clone=1 where "
        "it exists)");
  }
  if (!host.mount_api || !host.openat2 || !host.clone3) {
    return FailedPrecondition(fmt::format(
        "kernel {} lacks clone3, openat2 or the new mount API; airlock needs Linux 5.12 or later",
        host.kernel));
  }
  if (!host.seccomp) return FailedPrecondition("the kernel has no seccomp support");
  std::vector<std::string> degraded;
  auto require = [&](bool available, const char* name, std::string how) -> absl::Status {
    if (available) return absl::OkStatus();
    if (Allowed(allow, name)) {
      degraded.emplace_back(name);
      return absl::OkStatus();
    }
    return FailedPrecondition(
        fmt::format("{}; or pass --allow-degraded={} to run without it", how, name));
  };
  if (s.level == spec::Level::kHardened) {
    RETURN_IF_ERROR(require(host.landlock_abi > 0, "landlock",
                            fmt::format("Landlock is not available in kernel {} (enable "
                                        "CONFIG_SECURITY_LANDLOCK and add landlock to lsm=)",
                                        host.kernel)));
  }
  RETURN_IF_ERROR(require(cgroups.HasController(Controller::kMemory), "cgroup-memory",
                          "the cgroup memory controller is not available"));
  RETURN_IF_ERROR(require(cgroups.HasController(Controller::kPids), "cgroup-pids",
                          "the cgroup pids controller is not available"));
  if (s.resources.cpu > 0) {
    RETURN_IF_ERROR(require(cgroups.HasController(Controller::kCpu), "cgroup-cpu",
                            "the cgroup cpu controller is not available"));
  }
  if (host.swap_enabled && cgroups.version() == CgroupVersion::kV1 &&
      ::access("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", F_OK) != 0) {
    RETURN_IF_ERROR(require(false, "swap-accounting",
                            "the host has swap but no cgroup v1 swap accounting, so memory "
                            "limits could be escaped into swap (boot with swapaccount=1)"));
  }
  return degraded;
}

std::string DefaultRunDirBase() {
  if (::geteuid() == 0) return "/run/airlock";
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg) {
    return fmt::format("{}/airlock", xdg);
  }
  return fmt::format("/tmp/airlock-{}", ::geteuid());
}

// Writes the uid/gid maps of the child. The /proc directory is opened first and the child is
// checked to be alive through its pidfd afterwards, so a recycled pid is never written to.
absl::Status WriteIdMaps(pid_t pid, int pidfd, uid_t uid, gid_t gid, uid_t host_uid,
                         gid_t host_gid) {
  std::string proc = fmt::format("/proc/{}", pid);
  UniqueFd dir(::open(proc.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return ErrnoStatus(errno, fmt::format("open {}", proc));
  if (internal::PidfdSendSignal(pidfd, 0) != 0) {
    return ErrnoStatus(errno, "the sandbox's first process vanished before its uid map was written");
  }
  for (const auto& [file, line] : {std::pair<const char*, std::string>{"setgroups", "deny"},
                                   {"gid_map", fmt::format("{} {} 1\n", gid, host_gid)},
                                   {"uid_map", fmt::format("{} {} 1\n", uid, host_uid)}}) {
    UniqueFd fd(::openat(dir.get(), file, O_WRONLY | O_CLOEXEC));
    if (!fd) return ErrnoStatus(errno, fmt::format("open {}/{}", proc, file));
    if (::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      return ErrnoStatus(errno, fmt::format("write {}/{}", proc, file));
    }
  }
  return absl::OkStatus();
}

// The environment of a command: the minimal set, the spec's, the command's; with an egress
// proxy (proxy_port != 0), the proxy variables every common tool reads.
std::vector<std::string> CommandEnv(const spec::SandboxSpec& s, const CommandSpec& c,
                                    uint16_t proxy_port) {
  std::map<std::string, std::string> env = {
      {"HOME", "/sandbox/home"},
      {"TMPDIR", "/sandbox/tmp"},
      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
      {"CI", "true"},
      {"AGENT_SANDBOX", "true"},
      {"LANG", "C.UTF-8"},
  };
  if (proxy_port != 0) {
    std::string url = fmt::format("http://127.0.0.1:{}", proxy_port);
    for (const char* var : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}) {
      env[var] = url;
    }
    env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1";
  }
  for (const auto& [k, v] : s.env) env[k] = v;
  for (const auto& [k, v] : c.env) env[k] = v;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::vector<init::Rlimit> CommandRlimits(const spec::SandboxSpec& s) {
  auto limit = [](int resource, uint64_t v) {
    return init::Rlimit{static_cast<uint32_t>(resource), v, v};
  };
  constexpr uint64_t kMiB = 1 << 20;
  return {
      limit(RLIMIT_NOFILE, static_cast<uint64_t>(s.process.open_files)),
      limit(RLIMIT_FSIZE, static_cast<uint64_t>(s.resources.disk_mb) * kMiB),
      limit(RLIMIT_CORE, 0),
      limit(RLIMIT_STACK, static_cast<uint64_t>(s.process.stack_mb) * kMiB),
  };
}

bool ReadAvailable(int fd, OutputCapture* capture, OutputCapture::Stream stream, bool* eof) {
  char buf[65536];
  // Bounded per wake-up so one stream cannot starve the other or the deadline check.
  for (int i = 0; i < 16; ++i) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      capture->Add(stream, std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n == 0) *eof = true;
    if (n < 0 && errno == EINTR) continue;
    return n >= 0 || errno == EAGAIN;
  }
  return true;
}

Classification Classify(const CommandResult& r, const CgroupStats& stats, bool output_killed,
                        bool cpu_exceeded) {
  bool failed = r.exit_code != 0 || r.signal != 0;
  if (r.signal == SIGSYS) return Classification::kPolicyBlocked;
  if (stats.oom_kills > 0 && failed) return Classification::kResourceExhaustedMemory;
  if (stats.pids_limit_hits > 0 && failed) return Classification::kResourceExhaustedPids;
  if (r.timed_out || cpu_exceeded) return Classification::kCommandTimeout;
  if (output_killed) return Classification::kOutputLimit;
  if (failed) return Classification::kExitNonzero;
  return Classification::kOk;
}

}  // namespace

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
  const bool wants_egress = options.spec.network.profile != spec::NetworkProfile::kNone;
  std::optional<netproxy::Policy> policy;
  if (wants_egress) {
    if (options.egress.proxy == nullptr) {
      return FailedPrecondition(fmt::format(
          "network profile {} needs an egress proxy; the caller provided none (airlock run starts "
          "one; library callers set SandboxOptions::egress)",
          spec::ToString(options.spec.network.profile)));
    }
    ASSIGN_OR_RETURN(policy,
                     netproxy::Policy::Compile(options.spec.network, options.egress.operator_policy),
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
  sb->id_ = SandboxId::New();
  sb->degraded_ = std::move(degraded);
  sb->syscall_policy_ = std::move(syscall_policy);
  const spec::SandboxSpec& s = sb->options_.spec;

  RETURN_IF_ERROR(MakeDirs(sb->options_.run_dir_base, 0711));
  sb->run_dir_ = fmt::format("{}/{}", sb->options_.run_dir_base, sb->id_.value());
  if (::mkdir(sb->run_dir_.c_str(), 0700) != 0) {
    return ErrnoStatus(errno, fmt::format("mkdir {}", sb->run_dir_));
  }
  sb->log_dir_ = sb->options_.log_dir.empty() ? sb->run_dir_ + "/logs" : sb->options_.log_dir;

  Setup setup;
  bool root = ::geteuid() == 0;
  setup.host_uid = root ? sb->options_.host_id_base + s.user.uid : ::getuid();
  setup.host_gid = root ? sb->options_.host_id_base + s.user.gid : ::getgid();
  internal::PlanInputs in;
  in.spec = &s;
  in.run_dir = sb->run_dir_;
  in.tools_dir = sb->options_.tools_dir;
  in.host_uid = setup.host_uid;
  in.host_gid = setup.host_gid;
  in.landlock_abi = s.level == spec::Level::kHardened && !Allowed(sb->degraded_, "landlock")
                        ? ProbeHost().landlock_abi
                        : 0;
  in.spec_json = spec::ToJson(s).dump(2);
  RETURN_IF_ERROR(MakeDirs(sb->run_dir_ + "/root", 0755));
  RETURN_IF_ERROR(MakeDirs(sb->log_dir_, 0700));
  if (wants_egress) {
    // The proxy's socket for this sandbox, bound into it at /run/egress.sock; the run directory
    // (mode 0700) keeps it out of reach of everything else on the host.
    in.egress_socket = sb->run_dir_ + "/egress.sock";
    RETURN_IF_ERROR(sb->options_.egress.proxy->AddSandbox(sb->id_, *std::move(policy),
                                                          in.egress_socket),
                    "egress proxy");
    sb->egress_active_ = true;
  }
  ASSIGN_OR_RETURN(setup.plan, internal::BuildPlan(in, &setup.owned_fds), "plan sandbox mounts");

  ASSIGN_OR_RETURN(sb->cgroup_, sb->options_.cgroups->Create(sb->id_.value()), "create cgroup");
  CgroupLimits limits;
  if (!Allowed(sb->degraded_, "cgroup-memory")) limits.memory_bytes = s.resources.memory_mb << 20;
  if (!Allowed(sb->degraded_, "cgroup-pids")) limits.pids_max = s.process.pids_limit;
  if (!Allowed(sb->degraded_, "cgroup-cpu")) limits.cpu_cores = s.resources.cpu;
  RETURN_IF_ERROR(sb->cgroup_->SetLimits(limits), "set cgroup limits");
  ASSIGN_OR_RETURN(sb->init_cgroup_, sb->cgroup_->CreateChild("init"), "create init cgroup");
  ASSIGN_OR_RETURN(sb->seccomp_filter_,
                   internal::BuildSeccompFilter(sb->syscall_policy_->widened()),
                   "build seccomp filter");
  sb->timings_.prepare = Since(t0);

  RETURN_IF_ERROR(sb->Start(setup), fmt::format("start sandbox {}", sb->id_.value()));
  RETURN_IF_ERROR(sb->WaitReady(milliseconds(10000)),
                  fmt::format("start sandbox {}", sb->id_.value()));
  if (sb->egress_active_) {
    RETURN_IF_ERROR(sb->StartForwarder(), fmt::format("start sandbox {}", sb->id_.value()));
  }
  Log().Info("sandbox started", {{"sandbox", sb->id_.value()},
                                 {"init_pid", static_cast<int64_t>(sb->init_pid_)},
                                 {"level", static_cast<int>(s.level)}});
  return sb;
}

absl::Status NativeSandbox::Start(Setup& setup) {
  auto t0 = Clock::now();
  int control[2], sync[2], error[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) != 0) {
    return ErrnoStatus(errno, "socketpair");
  }
  UniqueFd control_child(control[1]);
  control_.Reset(control[0]);
  if (::pipe2(sync, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  UniqueFd sync_r(sync[0]), sync_w(sync[1]);
  if (::pipe2(error, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  UniqueFd error_r(error[0]), error_w(error[1]);

  internal::SetupPlan& plan = setup.plan;
  plan.control_fd = control_child.get();
  plan.sync_fd = sync_r.get();
  plan.error_fd = error_w.get();

  int pidfd = -1;
  struct clone_args args = {};
  args.flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
               CLONE_NEWUTS | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  // No migration by us: v2 clones straight into the cgroup, v1 has the child move itself.
  ASSIGN_OR_RETURN(Cgroup::Entry entry, init_cgroup_->OpenEntry(), "open cgroup");
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
  if (::write(sync_w.get(), &go, 1) != 1) return ErrnoStatus(errno, "release sandbox process");
  timings_.clone = Since(t0);

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

absl::Status NativeSandbox::WaitReady(milliseconds timeout) {
  auto t0 = Clock::now();
  struct pollfd p = {control_.get(), POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) return absl::DeadlineExceededError("airlock-init did not report ready in time");
  init::MessageType type;
  std::string payload;
  int fds[init::kMaxFds];
  int nfds = 0;
  int err = init::ReceiveMessage(control_.get(), &type, &payload, fds, &nfds);
  for (int i = 0; i < nfds; ++i) ::close(fds[i]);
  if (err != 0 || type != init::MessageType::kReady) {
    return Internal(fmt::format("airlock-init did not start (status {})", err));
  }
  init::Reader r(payload);
  if (r.U32() != init::kProtocolVersion || !r.done()) {
    return FailedPrecondition("airlock-init speaks another protocol version; rebuild the tools");
  }
  timings_.init_ready = Since(t0);
  return absl::OkStatus();
}

absl::Status NativeSandbox::StartForwarder() {
  // airlock-forwarder listens on the sandbox's loopback and hands each connection to the proxy
  // socket. It lives in its own cgroup so that killing a command's tree leaves it alone, and
  // says "ready" on its stdout once it listens.
  ASSIGN_OR_RETURN(std::unique_ptr<Cgroup> cg, cgroup_->CreateChild("egress"),
                   "create forwarder cgroup");
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  UniqueFd ready_r(ready[0]);
  UniqueFd stdio[3] = {UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC)), UniqueFd(ready[1]),
                       UniqueFd(::open("/dev/null", O_WRONLY | O_CLOEXEC))};
  init::SpawnRequest req;
  req.id = 0;
  req.argv = {"/sandbox/tools/airlock-forwarder", "--listen",
              fmt::format("127.0.0.1:{}", options_.egress.port), "--socket", "/run/egress.sock",
              "--ready-fd", "1"};
  req.cwd = "/";
  req.rlimits = CommandRlimits(options_.spec);
  req.seccomp_filter = seccomp_filter_;
  ASSIGN_OR_RETURN(forwarder_pid_, Spawn(req, stdio, *cg), "start airlock-forwarder");
  struct pollfd p = {ready_r.get(), POLLIN, 0};
  char buf[16] = {};
  if (::poll(&p, 1, 5000) != 1 || ::read(ready_r.get(), buf, sizeof(buf) - 1) <= 0 ||
      std::string_view(buf).substr(0, 5) != "ready") {
    return Internal("airlock-forwarder did not start listening within 5 s");
  }
  return absl::OkStatus();
}

absl::Status NativeSandbox::UpdateNetworkPolicy(const spec::Network& network,
                                                netproxy::PolicyAuthority authority) {
  if (!egress_active_) {
    return FailedPrecondition(
        "this sandbox has no egress path (profile none); its network cannot be opened later");
  }
  ASSIGN_OR_RETURN(netproxy::Policy policy,
                   netproxy::Policy::Compile(network, options_.egress.operator_policy),
                   "network policy");
  RETURN_IF_ERROR(options_.egress.proxy->UpdatePolicy(id_, std::move(policy), authority));
  options_.spec.network = network;
  return absl::OkStatus();
}

absl::StatusOr<pid_t> NativeSandbox::Spawn(
    const init::SpawnRequest& request, UniqueFd (&stdio)[3], Cgroup& cgroup,
    const std::function<absl::Status(int pidfd, pid_t host_pid)>& before_start) {
  // On cgroup v1 the process moves itself into its cgroup: a migration from here would take the
  // kernel's global cgroup lock, whose first use waits for an RCU grace period. On v2 (where
  // airlock-init, confined to its own cgroup namespace, may not clone into a sibling) we move it
  // before it starts.
  ASSIGN_OR_RETURN(Cgroup::Entry entry, cgroup.OpenEntry(), "open cgroup");
  const bool self_join = entry.mode == Cgroup::Entry::Mode::kWriteSelf;
  init::SpawnRequest req = request;
  req.cgroup_join = self_join ? init::CgroupJoin::kWriteSelf : init::CgroupJoin::kNone;
  std::vector<int> fds_out = {stdio[0].get(), stdio[1].get(), stdio[2].get()};
  if (self_join) {
    for (const UniqueFd& fd : entry.fds) fds_out.push_back(fd.get());
  }
  if (fds_out.size() > static_cast<size_t>(init::kMaxFds)) {
    return Internal("too many cgroup hierarchies to pass to airlock-init");
  }
  if (int e = init::SendMessage(control_.get(), init::MessageType::kSpawn, init::EncodeSpawn(req),
                                fds_out.data(), static_cast<int>(fds_out.size()));
      e != 0) {
    return ErrnoStatus(e, "send spawn request to airlock-init");
  }
  for (UniqueFd& fd : stdio) fd.Reset();
  entry.fds.clear();

  // The reply carries a pidfd of the new process; it waits until we have put it in its cgroup.
  init::MessageType type;
  std::string payload;
  int fds[init::kMaxFds];
  int nfds = 0;
  if (int e = init::ReceiveMessage(control_.get(), &type, &payload, fds, &nfds); e != 0) {
    return ErrnoStatus(e < 0 ? EPIPE : e, "airlock-init");
  }
  std::vector<UniqueFd> received;
  for (int i = 0; i < nfds; ++i) received.emplace_back(fds[i]);
  init::Reader reply(payload);
  reply.U64();
  int spawn_errno = reply.I32();
  pid_t ns_pid = reply.I32();
  if (type != init::MessageType::kSpawned || !reply.done()) {
    return Internal("airlock-init sent an unexpected reply to a spawn request");
  }
  if (spawn_errno != 0) return ErrnoStatus(spawn_errno, "airlock-init could not fork");
  if (received.size() != 1) return Internal("airlock-init sent no pidfd");
  if (!self_join || before_start) {
    ASSIGN_OR_RETURN(pid_t host_pid, PidFromPidfd(received[0].get()), "locate the new process");
    if (!self_join) {
      RETURN_IF_ERROR(cgroup.AddProcess(host_pid), "place the new process in its cgroup");
    }
    // On failure the process stays blocked before its start until the caller kills its cgroup.
    if (before_start) RETURN_IF_ERROR(before_start(received[0].get(), host_pid));
  }
  init::Writer start;
  start.I32(ns_pid);
  if (int e = init::SendMessage(control_.get(), init::MessageType::kStart, start.data()); e != 0) {
    return ErrnoStatus(e, "release the new process");
  }
  return ns_pid;
}

absl::StatusOr<CommandResult> NativeSandbox::Exec(const CommandSpec& command,
                                                  const ExecOptions& options) {
  if (destroyed_) return FailedPrecondition("sandbox was destroyed");
  if (command.argv.empty()) return InvalidArgument("command: empty argv");
  const spec::SandboxSpec& s = options_.spec;
  auto t0 = Clock::now();
  // Refused secrets (too short to redact safely) fail the call before anything runs.
  ASSIGN_OR_RETURN(Redactor redactor, RedactorFor(options.secrets), "secret values");
  CommandResult result;
  result.command_id = CommandId::New();
  result.degraded = degraded_;
  std::string cmd_name = fmt::format("cmd-{}", next_command_++);
  ASSIGN_OR_RETURN(std::shared_ptr<Cgroup> cg, cgroup_->CreateChild(cmd_name),
                   "create command cgroup");
  // The deadline below and the syscall supervisor (on its own thread) may both kill the command.
  auto kill_mu = std::make_shared<std::mutex>();
  auto kill_command = [cg, kill_mu] {
    std::lock_guard<std::mutex> lock(*kill_mu);
    return cg->Kill();
  };
  // The command's own limits equal the sandbox's, so an OOM kill or a refused fork is counted
  // in the command's cgroup, where we read it.
  CgroupLimits limits;
  if (!Allowed(degraded_, "cgroup-memory")) limits.memory_bytes = s.resources.memory_mb << 20;
  if (!Allowed(degraded_, "cgroup-pids")) limits.pids_max = s.process.pids_limit;
  RETURN_IF_ERROR(cg->SetLimits(limits), "set command cgroup limits");

  int out[2], err[2], in[2] = {-1, -1};  // NOLINT
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  UniqueFd out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);
  UniqueFd in_r, in_w;
  if (command.stdin_data.empty()) {
    in_r.Reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!in_r) return ErrnoStatus(errno, "open /dev/null");
  } else {
    if (::pipe2(in, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
    in_r.Reset(in[0]);
    in_w.Reset(in[1]);
    ::fcntl(in_w.get(), F_SETFL, O_NONBLOCK);
  }
  // Large pipes let a chatty command run at full speed.
  ::fcntl(out_w.get(), F_SETPIPE_SZ, 1 << 20);
  ::fcntl(err_w.get(), F_SETPIPE_SZ, 1 << 20);
  ::fcntl(out_r.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(err_r.get(), F_SETFL, O_NONBLOCK);

  init::SpawnRequest req;
  req.id = static_cast<uint64_t>(next_command_);
  req.argv = command.argv;
  req.env = CommandEnv(s, command, egress_active_ ? options_.egress.port : 0);
  req.cwd = command.workdir.empty() ? s.workdir : command.workdir;
  req.rlimits = CommandRlimits(s);
  req.seccomp_filter = seccomp_filter_;
  req.policy_filter = syscall_policy_->filter();
  req.policy_listener = syscall_policy_->mode() == spec::SupervisorMode::kNotify
                            ? init::PolicyListener::kNotify
                            : init::PolicyListener::kNone;
  UniqueFd stdio[3] = {std::move(in_r), std::move(out_w), std::move(err_w)};
  uint64_t egress_mark =
      egress_active_ && options_.egress.blocked ? options_.egress.blocked->Mark(id_) : 0;
  ASSIGN_OR_RETURN(
      std::unique_ptr<supervisor::Supervisor> sup,
      StartSupervisor([kill_command] { (void)kill_command(); }, options.syscall_events),
      "start syscall supervisor");
  std::function<absl::Status(int, pid_t)> attach;
  if (sup) {
    attach = [&sup](int pidfd, pid_t pid) { return sup->Attach({.pidfd = pidfd, .pid = pid}); };
  }
  absl::StatusOr<pid_t> spawned = Spawn(req, stdio, *cg, attach);
  if (!spawned.ok()) {
    (void)kill_command();  // a process that was not started may be waiting for its start
    return Annotate(spawned.status(), "start command");
  }
  const pid_t ns_pid = *spawned;
  timings_.spawn = Since(t0);

  // Output goes to a private file first; the kept log is written redacted when the command ends.
  auto t_run = Clock::now();
  std::string raw_path = fmt::format("{}/{}.raw", run_dir_, result.command_id.value());
  UniqueFd raw(::open(raw_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!raw) return ErrnoStatus(errno, fmt::format("create {}", raw_path));
  OutputCapture capture(raw.get(), s.resources.max_log_bytes);

  milliseconds timeout = command.timeout.value_or(milliseconds(s.resources.command_timeout_seconds * 1000));
  auto deadline = t_run + timeout;
  bool out_eof = false, err_eof = false, exited = false, output_killed = false;
  bool cpu_exceeded = false, tree_killed = false;
  int wait_status = 0;
  init::SetupStage setup_stage = init::SetupStage::kNone;
  int setup_errno = 0;
  size_t stdin_written = 0;
  Clock::time_point exit_time;
  auto kill_tree = [&]() {
    if (tree_killed) return;
    tree_killed = true;
    if (absl::Status k = kill_command(); !k.ok()) {
      Log().Warn("kill command tree", {{"sandbox", id_.value()}, {"error", Message(k)}});
    }
  };

  init::MessageType type;
  std::string payload;
  int fds[init::kMaxFds];
  int nfds = 0;
  for (;;) {
    if (exited && (out_eof || !out_r) && (err_eof || !err_r)) break;
    if (exited && !tree_killed && !options.keep_background) kill_tree();
    if (exited && Clock::now() - exit_time > milliseconds(200)) break;  // background writers
    struct pollfd p[4];
    int np = 0;
    int idx_out = -1, idx_err = -1, idx_ctl = -1, idx_in = -1;
    if (!out_eof) { idx_out = np; p[np++] = {out_r.get(), POLLIN, 0}; }
    if (!err_eof) { idx_err = np; p[np++] = {err_r.get(), POLLIN, 0}; }
    if (!exited) { idx_ctl = np; p[np++] = {control_.get(), POLLIN, 0}; }
    if (in_w) { idx_in = np; p[np++] = {in_w.get(), POLLOUT, 0}; }
    auto now = Clock::now();
    auto wait = std::chrono::duration_cast<milliseconds>(deadline - now);
    int poll_ms = static_cast<int>(std::clamp<int64_t>(wait.count(), 0, 100));
    if (exited) poll_ms = 20;
    int rc = ::poll(p, static_cast<nfds_t>(np), poll_ms);
    if (rc < 0 && errno != EINTR) return ErrnoStatus(errno, "poll");
    if (rc > 0) {
      if (idx_out >= 0 && p[idx_out].revents) {
        if (!ReadAvailable(out_r.get(), &capture, OutputCapture::kStdout, &out_eof)) out_eof = true;
      }
      if (idx_err >= 0 && p[idx_err].revents) {
        if (!ReadAvailable(err_r.get(), &capture, OutputCapture::kStderr, &err_eof)) err_eof = true;
      }
      if (idx_in >= 0 && p[idx_in].revents) {
        ssize_t n = ::write(in_w.get(), command.stdin_data.data() + stdin_written,
                            command.stdin_data.size() - stdin_written);
        if (n > 0) stdin_written += static_cast<size_t>(n);
        if ((n < 0 && errno != EAGAIN) || stdin_written == command.stdin_data.size()) in_w.Reset();
      }
      if (idx_ctl >= 0 && p[idx_ctl].revents) {
        int e = init::ReceiveMessage(control_.get(), &type, &payload, fds, &nfds);
        for (int i = 0; i < nfds; ++i) ::close(fds[i]);
        if (e != 0) return ErrnoStatus(e < 0 ? EPIPE : e, "airlock-init exited");
        if (type == init::MessageType::kExited) {
          init::Reader r(payload);
          pid_t pid = r.I32();
          int status = r.I32();
          int stage = r.I32();
          int serr = r.I32();
          if (r.done() && pid == ns_pid) {
            exited = true;
            exit_time = Clock::now();
            wait_status = status;
            setup_stage = static_cast<init::SetupStage>(stage);
            setup_errno = serr;
          }
        }
      }
    }
    if (capture.truncated() && !output_killed &&
        s.resources.output_limit_action == spec::OutputLimitAction::kKill) {
      output_killed = true;
      kill_tree();
    }
    if (!exited && Clock::now() >= deadline && !result.timed_out) {
      result.timed_out = true;
      kill_tree();
    }
    if (!exited && s.resources.cpu_time_seconds > 0 && !cpu_exceeded) {
      if (auto st = cg->Stats(); st.ok() && (st->cpu_user_us + st->cpu_system_us) >
                                                s.resources.cpu_time_seconds * 1000000) {
        cpu_exceeded = true;
        kill_tree();
      }
    }
  }
  timings_.run = Since(t_run);
  auto t_finish = Clock::now();

  result.duration_ms = std::chrono::duration_cast<milliseconds>(
                           (exited ? exit_time : Clock::now()) - t_run)
                           .count();
  if (WIFEXITED(wait_status)) {
    result.exit_code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    result.exit_code = -1;
    result.signal = WTERMSIG(wait_status);
  }
  if (sup) FinishSupervisor(std::move(sup), !options.keep_background, result);
  ASSIGN_OR_RETURN(CgroupStats stats, cg->Stats(), "read command usage");
  if (!options.keep_background) {
    if (absl::Status d = cg->Destroy(); !d.ok()) {
      Log().Warn("remove command cgroup", {{"sandbox", id_.value()}, {"error", Message(d)}});
    }
  }
  result.usage.cpu_user_ms = stats.cpu_user_us / 1000;
  result.usage.cpu_system_ms = stats.cpu_system_us / 1000;
  result.usage.memory_peak_bytes = stats.memory_peak_bytes;
  result.usage.pids_peak = stats.pids_peak;
  result.usage.io_read_bytes = stats.io_read_bytes;
  result.usage.io_write_bytes = stats.io_write_bytes;
  result.usage.oom_kills = stats.oom_kills;
  result.truncated = capture.truncated();
  result.stdout_bytes = capture.bytes(OutputCapture::kStdout);
  result.stderr_bytes = capture.bytes(OutputCapture::kStderr);
  result.stdout_sha256 = capture.FinishSha256(OutputCapture::kStdout);
  result.stderr_sha256 = capture.FinishSha256(OutputCapture::kStderr);
  result.classification = Classify(result, stats, output_killed, cpu_exceeded);
  if (setup_stage != init::SetupStage::kNone && setup_stage != init::SetupStage::kExec) {
    result.classification = Classification::kSandboxError;
    result.error = fmt::format("command setup step \"{}\": {}", init::ToString(setup_stage),
                               std::strerror(setup_errno));
  }
  if (result.syscalls.killed) result.classification = Classification::kPolicyBlocked;
  if (result.signal == SIGSYS) {
    result.violations.push_back({"seccomp", "the command was killed for a forbidden system call",
                                 {{"signal", "SIGSYS"}}});
  }
  std::optional<netproxy::NetworkRequired> network_required;
  if (egress_active_ && options_.egress.blocked != nullptr) {
    std::vector<netproxy::BlockedNetworkEgress> blocked =
        options_.egress.blocked->Since(id_, egress_mark);
    constexpr size_t kMaxNetworkViolations = 64;
    for (size_t i = 0; i < blocked.size() && i < kMaxNetworkViolations; ++i) {
      result.violations.push_back(netproxy::ToViolation(blocked[i]));
    }
    network_required = netproxy::DetectNetworkRequired(result.classification, blocked);
    if (network_required) result.classification = Classification::kNetworkRequired;
  }
  raw.Reset();
  RETURN_IF_ERROR(FinishOutput(command, redactor, capture, raw_path,
                               fmt::format("{}/{}.log", log_dir_, result.command_id.value()),
                               &result));
  if (network_required) {
    // The refused host leads the key lines and names the failure; the report is redone with it.
    netproxy::ApplyNetworkRequired(*network_required, result);
    result.failure_detail = fmt::format("{}:{}", network_required->host, network_required->port);
    result.report = RenderReport(command, result);
  }
  timings_.finish = Since(t_finish);
  return result;
}

absl::StatusOr<std::unique_ptr<supervisor::Supervisor>> NativeSandbox::StartSupervisor(
    std::function<void()> kill, SyscallEventSink* events) {
  if (syscall_policy_->mode() == spec::SupervisorMode::kNone) {
    return std::unique_ptr<supervisor::Supervisor>();
  }
  return supervisor::Supervisor::Start(
      {.policy = syscall_policy_, .kill_command = std::move(kill), .events = events});
}

void NativeSandbox::FinishSupervisor(std::unique_ptr<supervisor::Supervisor> sup, bool wait,
                                     CommandResult& result) {
  std::erase_if(lingering_supervisors_, [](const auto& s) { return s->WaitDone(milliseconds(0)); });
  // The command's processes are gone (killed with its tree): the supervisor sees the last go.
  bool done = sup->WaitDone(wait ? milliseconds(2000) : milliseconds(0));
  result.syscalls = sup->Report();
  constexpr size_t kMaxSyscallViolations = 16;
  for (size_t i = 0; i < result.syscalls.denied_calls.size() && i < kMaxSyscallViolations; ++i) {
    const SyscallEvent& e = result.syscalls.denied_calls[i];
    std::string rule =
        e.rule >= 0 ? fmt::format("process.syscalls[{}]", e.rule) : "process.syscallDefaultAction";
    result.violations.push_back(
        {"syscall", fmt::format("{} denied by {} ({})", e.syscall, rule, e.action), ToJson(e)});
  }
  if (!done) {
    if (wait)
      Log().Warn("syscall supervisor still busy after the command", {{"sandbox", id_.value()}});
    lingering_supervisors_.push_back(std::move(sup));  // its processes live on (keep_background)
  }
}

absl::Status NativeSandbox::Destroy() {
  if (destroyed_) return absl::OkStatus();
  destroyed_ = true;
  auto t0 = Clock::now();
  absl::Status status;
  // Closing the control socket makes airlock-init exit; the kernel then kills every other
  // process of its pid namespace.
  control_.Reset();
  if (init_pid_ > 0) {
    struct pollfd p = {init_pidfd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 2000) <= 0 && cgroup_) status.Update(cgroup_->Kill());
    ::waitpid(init_pid_, nullptr, 0);
    init_pid_ = -1;
  }
  init_pidfd_.Reset();
  lingering_supervisors_.clear();  // their processes died with the sandbox
  if (egress_active_) {
    status.Update(Annotate(options_.egress.proxy->RemoveSandbox(id_), "egress proxy"));
    if (options_.egress.blocked != nullptr) options_.egress.blocked->Forget(id_);
    egress_active_ = false;
  }
  if (cgroup_) status.Update(Annotate(cgroup_->Destroy(), "remove cgroup"));
  if (!run_dir_.empty()) status.Update(Annotate(RemoveTree(run_dir_), "remove run directory"));
  timings_.destroy = Since(t0);
  return status;
}

NativeSandbox::~NativeSandbox() {
  if (absl::Status s = Destroy(); !s.ok()) {
    Log().Error("destroy sandbox", {{"sandbox", id_.value()}, {"error", Message(s)}});
  }
}

}  // namespace airlock::engine
