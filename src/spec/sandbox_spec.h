// The SandboxSpec: one typed description of a sandbox, shared by every isolation tier.
//
// A spec is written as JSON or YAML with camelCase keys (see docs/spec.md); every field has a
// default, so `{}` is a valid spec (level 2, no network, read-only root, uid 10001). The spec is
// stored with every run so that a run can be audited and repeated exactly; it never contains
// secret values (secrets are leases resolved by the platform, see SecretLease).
//
// Value semantics (copyable, comparable with ==); no behaviour. Parsing and validation live in
// spec/parse.h, risk classes in spec/risk.h.
#ifndef AIRLOCK_SPEC_SANDBOX_SPEC_H_
#define AIRLOCK_SPEC_SANDBOX_SPEC_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace airlock::spec {

// The longest command timeout (and CPU time) a spec may give: seven days.
inline constexpr int64_t kMaxCommandTimeoutSeconds = 7 * 24 * 3600;

// Isolation levels (DESIGN.md). Derived from a risk class, never from a prompt.
enum class Level : int {
  kInterp = 0,    // QuickJS in WebAssembly, in-process
  kBasic = 1,     // native: userns, non-root, limits, no network
  kHardened = 2,  // native/traced: + read-only root, seccomp, Landlock, egress proxy
  kGvisor = 3,    // runsc
  kMicroVm = 4,   // QEMU microvm
};

enum class Runtime { kInterp, kNative, kTraced, kGvisor, kMicroVm };

enum class RiskClass { kR0, kR1, kR2, kR3, kR4, kR5 };

enum class NetworkProfile { kNone, kDependencyEgress, kRepoEgress, kRestrictedHttp, kOpen };

enum class ApprovalRequirement { kNone, kBeforePr, kMandatory, kSecurity };

enum class MountMode { kReadOnly, kReadWrite };

enum class CacheMode { kNone, kReadOnly, kReadWrite };

enum class SupervisorMode { kNone, kNotify, kPtrace };

// What happens when a command's output passes resources.maxLogBytes.
enum class OutputLimitAction {
  kTruncate,  // keep the first maxLogBytes, drain and count the rest; the command runs on
  kKill,      // kill the command at the cap; classification OUTPUT_LIMIT
};

// The largest uid or gid a sandbox's user may have. A sandbox's id maps to a host id above a base
// (engine::SandboxOptions::host_id_base, 10^9 by default); keeping ids below 2^31 keeps that sum
// inside the host's 32-bit id space, where a wrap would land on a real host account (root).
inline constexpr uint32_t kMaxUserId = 2147483647;

struct User {
  uint32_t uid = 10001;  // 1..kMaxUserId
  uint32_t gid = 10001;

  friend bool operator==(const User&, const User&) = default;
};

// A host path made visible inside the sandbox.
struct Mount {
  std::string source;  // absolute host path
  std::string target;  // absolute sandbox path
  MountMode mode = MountMode::kReadOnly;

  friend bool operator==(const Mount&, const Mount&) = default;
};

// A size-limited tmpfs. The standard layout (/sandbox/tmp, /sandbox/home, ...) gets its tmpfs
// mounts from Filesystem defaults; entries here add more or override those by target.
struct Tmpfs {
  std::string target;
  int64_t size_mb = 64;
  int64_t inodes = 16384;
  bool noexec = false;

  friend bool operator==(const Tmpfs&, const Tmpfs&) = default;
};

struct Filesystem {
  bool read_only_root = true;
  // Where /sandbox/workspace comes from: a host directory (bound with workspace_mode) or, when
  // empty, a fresh tmpfs of workspace_size_mb.
  std::string workspace;
  int64_t workspace_size_mb = 1024;
  // Read-write unless the risk class is R0 (read-only operations) or the caller says so.
  MountMode workspace_mode = MountMode::kReadWrite;
  int64_t tmp_size_mb = 256;  // /sandbox/tmp (also visible as /tmp)
  int64_t home_size_mb = 64;  // /sandbox/home
  bool tmp_noexec = false;
  std::vector<Mount> mounts;
  std::vector<Tmpfs> tmpfs;

  friend bool operator==(const Filesystem&, const Filesystem&) = default;
};

// One rule of process.syscalls (the syscall supervisor issue); kept here so the spec is complete.
struct SyscallArgCondition {
  int index = 0;   // 0..5
  std::string op;  // eq, ne, lt, le, gt, ge, masked_eq
  uint64_t value = 0;
  uint64_t mask = 0;  // masked_eq only

  friend bool operator==(const SyscallArgCondition&, const SyscallArgCondition&) = default;
};
struct SyscallRule {
  std::vector<std::string> names;
  std::vector<SyscallArgCondition> args;
  std::string action;  // allow | errno(NAME) | kill | trace | notify

  friend bool operator==(const SyscallRule&, const SyscallRule&) = default;
};

struct Process {
  bool no_new_privs = true;
  std::vector<std::string> capabilities;  // kept capabilities; default none
  std::string seccomp_profile = "default";
  int64_t pids_limit = 256;
  int64_t open_files = 1024;  // RLIMIT_NOFILE
  int64_t stack_mb = 8;       // RLIMIT_STACK
  SupervisorMode supervisor = SupervisorMode::kNone;
  std::vector<SyscallRule> syscalls;
  std::string syscall_default_action;  // empty: the profile's own default

  friend bool operator==(const Process&, const Process&) = default;
};

struct Resources {
  double cpu = 1.0;                       // CPU cores (cgroup quota)
  int64_t memory_mb = 512;                // memory incl. swap
  int64_t disk_mb = 1024;                 // largest file a command may write (RLIMIT_FSIZE)
  int64_t command_timeout_seconds = 300;  // at most kMaxCommandTimeoutSeconds
  int64_t run_timeout_seconds = 3600;     // whole sandbox lifetime
  int64_t cpu_time_seconds = 0;           // CPU time of one command's tree; 0 = unlimited
  int64_t max_log_bytes = 32LL << 20;     // kept output per command (stdout + stderr)
  OutputLimitAction output_limit_action = OutputLimitAction::kTruncate;

  friend bool operator==(const Resources&, const Resources&) = default;
};

// restricted-http rule: a host with optional methods and path prefixes (plain HTTP only).
struct HttpRule {
  std::string host;  // "example.com", "*.example.com", with optional ":port"
  std::vector<std::string> methods;
  std::vector<std::string> path_prefixes;

  friend bool operator==(const HttpRule&, const HttpRule&) = default;
};

// In repo-egress's allowHosts: stands for the default git provider hosts (docs/network.md).
inline constexpr std::string_view kGitProvidersToken = "@git-providers";

struct Network {
  NetworkProfile profile = NetworkProfile::kNone;
  // "registry.npmjs.org:443", "*.pypi.org"; dependency-egress, repo-egress, restricted-http
  std::vector<std::string> allow_hosts;
  std::vector<HttpRule> http_rules;     // restricted-http only
  std::vector<std::string> deny_cidrs;  // in addition to the always-denied ranges

  friend bool operator==(const Network&, const Network&) = default;
};

struct SecretLease {
  std::string name;
  std::string purpose;
  int64_t ttl_seconds = 900;
  std::string mount_path;  // read-only file inside the sandbox; empty: not mounted

  friend bool operator==(const SecretLease&, const SecretLease&) = default;
};

struct Secrets {
  std::vector<SecretLease> leases;

  friend bool operator==(const Secrets&, const Secrets&) = default;
};

struct Cache {
  CacheMode mode = CacheMode::kNone;
  std::string key;

  friend bool operator==(const Cache&, const Cache&) = default;
};

// A binary artifact the caller expects, and why (artifacts.allowBinaries; docs/artifacts.md).
struct BinaryAllowance {
  std::string path;    // a path glob (spec/patterns.h) under one of artifacts.paths
  std::string reason;  // why this binary may leave; recorded with the collection

  friend bool operator==(const BinaryAllowance&, const BinaryAllowance&) = default;
};

struct Artifacts {
  std::vector<std::string> paths = {"/sandbox/artifacts"};
  int64_t max_size_mb = 100;  // cap on the collection's released bytes (and so on each file)
  bool secret_scan = true;
  // Binary files (by content) larger than this need an allowBinaries entry to leave.
  int64_t binary_threshold_kb = 1024;
  std::vector<BinaryAllowance> allow_binaries;

  friend bool operator==(const Artifacts&, const Artifacts&) = default;
};

// A rule a spec adds to the built-in command policy (docs/policy.md). A spec can only add
// rules, never lift a built-in one.
struct CommandDenyRule {
  std::string name;               // reported as "spec/<name>"
  std::vector<std::string> argv;  // argv patterns (spec/patterns.h); any one matching refuses
  std::string reason;             // one line shown to the model; optional

  friend bool operator==(const CommandDenyRule&, const CommandDenyRule&) = default;
};

struct CommandPolicy {
  std::vector<CommandDenyRule> deny;
  // Refuse (rule "unparseable-shell") a command whose shell text cannot be parsed with
  // confidence, rather than checking what could be parsed.
  bool strict_shell = false;

  friend bool operator==(const CommandPolicy&, const CommandPolicy&) = default;
};

struct SandboxSpec {
  int version = 1;
  std::optional<RiskClass> risk_class;
  Level level = Level::kHardened;
  Runtime runtime = Runtime::kNative;
  std::string image;   // "sha256:<hex>" or a tag (resolved to a digest at create time)
  std::string rootfs;  // a host directory used as the root filesystem; empty: host /usr, /etc...
  User user;
  std::string workdir = "/sandbox/workspace";
  std::string hostname = "sandbox";
  std::map<std::string, std::string> env;
  Filesystem filesystem;
  Process process;
  Resources resources;
  Network network;
  Secrets secrets;
  Cache cache;
  Artifacts artifacts;
  CommandPolicy command_policy;
  ApprovalRequirement approval = ApprovalRequirement::kNone;

  friend bool operator==(const SandboxSpec&, const SandboxSpec&) = default;
};

// Names used in JSON/YAML and messages ("none", "dependency-egress", "R2", ...).
const char* ToString(Level level);
const char* ToString(Runtime runtime);
const char* ToString(RiskClass risk);
const char* ToString(NetworkProfile profile);
const char* ToString(ApprovalRequirement approval);
const char* ToString(MountMode mode);
const char* ToString(CacheMode mode);
const char* ToString(SupervisorMode mode);
const char* ToString(OutputLimitAction action);

}  // namespace airlock::spec

#endif  // AIRLOCK_SPEC_SANDBOX_SPEC_H_
