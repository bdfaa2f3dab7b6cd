// What NativeSandbox and ForkedSandbox share: the checks of a spec against this backend and
// the host, the uid/gid maps, a command's environment and rlimits, its classification.
#include "engine/internal/sandbox_common.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <tuple>

#include "common/files.h"
#include "common/status.h"
#include "engine/host_probe.h"
#include "engine/internal/seccomp.h"
#include "engine/internal/syscalls.h"
#include "engine/native_sandbox.h"
#include "fmt/format.h"
#include "spec/parse.h"

namespace airlock::engine::internal::common {

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
  // The rest are requests this backend never serves: the caller's to change (InvalidArgument).
  if (!s.process.capabilities.empty()) {
    return InvalidArgument("process.capabilities: sandboxed commands never keep capabilities");
  }
  if (s.process.seccomp_profile != "default") {
    return InvalidArgument(
        fmt::format("process.seccompProfile \"{}\" is unknown", s.process.seccomp_profile));
  }
  if (!s.process.no_new_privs) {
    return InvalidArgument("process.noNewPrivs: the native backend always sets no_new_privs");
  }
  if (s.cache.mode != spec::CacheMode::kNone) {
    return InvalidArgument("cache modes other than none are not available yet");
  }
  if (!s.secrets.leases.empty()) {
    return InvalidArgument("secret leases need the control plane, which this build lacks");
  }
  return absl::OkStatus();
}

// spec.image runs only on the root file system the caller resolved for it, and the spec must
// carry the digest it was resolved to, so the stored spec names exactly what ran.
absl::Status CheckImage(const spec::SandboxSpec& s, const std::string& image_rootfs) {
  if (s.image.empty()) {
    if (image_rootfs.empty()) return absl::OkStatus();
    return InvalidArgument("sandbox options: image_rootfs is set but spec.image is empty");
  }
  if (image_rootfs.empty()) {
    return FailedPrecondition(
        "images need the node daemon's image store (SandboxOptions::image_rootfs); use rootfs "
        "instead");
  }
  if (s.image.rfind("sha256:", 0) != 0) {
    return InvalidArgument(fmt::format(
        "image {:?}: resolve the tag to its digest (sha256:…) before the sandbox is created",
        s.image));
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
  // How to get a controller: on v2, enabled in the subtree airlock's cgroups live under; on v1,
  // a hierarchy of its own mounted.
  auto missing = [&](const char* controller) {
    return cgroups.version() == CgroupVersion::kV2
               ? fmt::format(
                     "the cgroup {0} controller is not available (enable it with `echo "
                     "+{0} > cgroup.subtree_control` in /sys/fs/cgroup and each cgroup "
                     "above airlock's, or boot with cgroup_enable={0})",
                     controller)
               : fmt::format(
                     "the cgroup {0} controller is not available (mount its v1 "
                     "hierarchy: `mkdir -p /sys/fs/cgroup/{0} && mount -t cgroup -o {0} "
                     "cgroup /sys/fs/cgroup/{0}`, or boot with cgroup_enable={0})",
                     controller);
  };
  RETURN_IF_ERROR(
      require(cgroups.HasController(Controller::kMemory), "cgroup-memory", missing("memory")));
  RETURN_IF_ERROR(
      require(cgroups.HasController(Controller::kPids), "cgroup-pids", missing("pids")));
  if (s.resources.cpu > 0) {
    RETURN_IF_ERROR(require(cgroups.HasController(Controller::kCpu), "cgroup-cpu", missing("cpu")));
  }
  if (host.swap_enabled && cgroups.HasController(Controller::kMemory) &&
      !cgroups.HasSwapAccounting()) {
    RETURN_IF_ERROR(require(
        false, "swap-accounting",
        fmt::format("the host has swap but no cgroup {} swap accounting ({} is missing), so "
                    "memory limits could be escaped into swap (boot with swapaccount=1)",
                    ToString(cgroups.version()),
                    cgroups.version() == CgroupVersion::kV1 ? "memory.memsw.limit_in_bytes"
                                                            : "memory.swap.max")));
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
    return ErrnoStatus(errno,
                       "the sandbox's first process vanished before its uid map was written");
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
                                    uint16_t proxy_port, std::string_view proxy_client) {
  std::map<std::string, std::string> env = {
      {"HOME", "/sandbox/home"},
      {"TMPDIR", "/sandbox/tmp"},
      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
      {"CI", "true"},
      {"AGENT_SANDBOX", "true"},
      {"LANG", "C.UTF-8"},
  };
  if (proxy_port != 0) {
    // A user name with an empty password: curl, requests/pip and Go send it as Basic credentials
    // unasked; git sends nothing and, unlike with a user name alone, asks for no password; and no
    // secret detector takes it for a password in a URL.
    std::string url = proxy_client.empty()
                          ? fmt::format("http://127.0.0.1:{}", proxy_port)
                          : fmt::format("http://{}:@127.0.0.1:{}", proxy_client, proxy_port);
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
  // Below our own hard limit, which the sandbox inherits and may not raise.
  auto at_most = [](int resource, uint64_t v) {
    struct rlimit ours;
    return ::getrlimit(resource, &ours) == 0 ? std::min<uint64_t>(v, ours.rlim_max) : v;
  };
  constexpr uint64_t kMiB = 1 << 20;
  return {
      limit(RLIMIT_NOFILE, static_cast<uint64_t>(s.process.open_files)),
      limit(RLIMIT_FSIZE, static_cast<uint64_t>(s.resources.disk_mb) * kMiB),
      limit(RLIMIT_CORE, 0),
      limit(RLIMIT_STACK, static_cast<uint64_t>(s.process.stack_mb) * kMiB),
      // The rest would come from whatever started airlock (a service manager's LimitRTPRIO,
      // an unlimited memlock): set to what an ordinary login gets, with no real-time priority
      // (SCHED_FIFO would take CPU time the cgroup's quota does not bound) and no nice boost.
      limit(RLIMIT_RTPRIO, 0),
      limit(RLIMIT_NICE, 0),
      limit(RLIMIT_MEMLOCK, at_most(RLIMIT_MEMLOCK, 8 * kMiB)),
      limit(RLIMIT_MSGQUEUE, at_most(RLIMIT_MSGQUEUE, 819200)),
  };
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

absl::StatusOr<std::pair<uid_t, gid_t>> HostIds(const SandboxOptions& options) {
  if (::geteuid() != 0) return std::pair<uid_t, gid_t>{::getuid(), ::getgid()};
  // Added in 64 bits: the largest valid host id is 2^32 - 2 ((uid_t)-1 means "no change").
  constexpr uint64_t kMaxHostId = UINT32_MAX - 1;
  const uint64_t uid = uint64_t{options.host_id_base} + options.spec.user.uid;
  const uint64_t gid = uint64_t{options.host_id_base} + options.spec.user.gid;
  if (options.spec.user.uid == 0 || options.spec.user.gid == 0 || uid > kMaxHostId ||
      gid > kMaxHostId) {
    return InvalidArgument(fmt::format(
        "user {}:{} with host id base {} is outside the host's id space (1..{} above the base)",
        options.spec.user.uid, options.spec.user.gid, options.host_id_base,
        kMaxHostId - options.host_id_base));
  }
  return std::pair<uid_t, gid_t>{static_cast<uid_t>(uid), static_cast<gid_t>(gid)};
}

absl::StatusOr<PlanInputs> PreparePlanInputs(const SandboxOptions& options,
                                             const std::string& run_dir,
                                             const std::vector<std::string>& degraded) {
  const spec::SandboxSpec& s = options.spec;
  PlanInputs in;
  in.spec = &options.spec;
  in.rootfs = s.image.empty() ? s.rootfs : options.image_rootfs;
  in.run_dir = run_dir;
  in.tools_dir = options.tools_dir;
  ASSIGN_OR_RETURN(std::tie(in.host_uid, in.host_gid), HostIds(options));
  in.landlock_abi = s.level == spec::Level::kHardened && !Allowed(degraded, "landlock")
                        ? ProbeHost().landlock_abi
                        : 0;
  in.spec_json = spec::ToJson(s).dump(2);
  RETURN_IF_ERROR(MakeDirs(run_dir + "/root", 0755));
  RETURN_IF_ERROR(MakeDirs(run_dir + "/setup", 0755));
  return in;
}

CgroupLimits LimitsOf(const spec::SandboxSpec& s, const std::vector<std::string>& degraded) {
  CgroupLimits limits;
  if (!Allowed(degraded, "cgroup-memory")) limits.memory_bytes = s.resources.memory_mb << 20;
  if (!Allowed(degraded, "cgroup-pids")) limits.pids_max = s.process.pids_limit;
  if (!Allowed(degraded, "cgroup-cpu")) limits.cpu_cores = s.resources.cpu;
  return limits;
}

void FillResult(const CgroupStats& stats, OutputCapture& capture, bool output_killed,
                bool cpu_exceeded, CommandResult& result) {
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
}

}  // namespace airlock::engine::internal::common
