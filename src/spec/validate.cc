#include "spec/validate.h"

#include <arpa/inet.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "fmt/format.h"
#include "spec/internal/text.h"
#include "spec/kernel_names.h"
#include "spec/patterns.h"
#include "spec/risk.h"

namespace airlock::spec {
namespace {

using internal::FieldPath;
using internal::IndexPath;
using internal::Quote;

// Upper bounds that keep a spec sane (and its validation cheap); see docs/spec.md.
constexpr int64_t kMaxSizeMb = int64_t{1} << 20;  // 1 TiB
constexpr double kMaxCpu = 1024;
constexpr int64_t kMaxPids = 4'194'304;  // PID_MAX_LIMIT
constexpr int64_t kMinOpenFiles = 16;
constexpr int64_t kMaxOpenFiles = 1'048'576;  // the kernel's default nr_open
constexpr int64_t kMaxStackMb = 1024;
constexpr int64_t kMaxRunTimeout = 30 * 24 * 3600;
constexpr int64_t kMinLogBytes = 4096;
constexpr int64_t kMaxLogBytes = int64_t{1} << 30;
constexpr int64_t kMaxInodes = int64_t{1} << 24;
constexpr int64_t kMaxLeaseTtl = 24 * 3600;
constexpr size_t kMaxPathBytes = 4095;
constexpr size_t kMaxEnv = 256;
constexpr size_t kMaxEnvName = 128;
constexpr size_t kMaxEnvValue = 32768;
constexpr size_t kMaxMounts = 64;
constexpr size_t kMaxSyscallRules = 1024;
constexpr size_t kMaxSyscallNames = 512;
constexpr size_t kMaxSyscallArgs = 6;
constexpr size_t kMaxHosts = 256;
constexpr size_t kMaxPathPrefixes = 64;
constexpr size_t kMaxLeases = 32;
constexpr size_t kMaxArtifactPaths = 64;
constexpr size_t kMaxPurpose = 1024;
constexpr size_t kMaxImage = 255;
constexpr size_t kMaxName = 128;
constexpr int64_t kMaxBinaryThresholdKb = kMaxSizeMb * 1024;
constexpr size_t kMaxBinaryAllowances = 64;
constexpr size_t kMaxDenyRules = 64;
constexpr size_t kMaxRulePatterns = 16;
constexpr size_t kMaxRuleName = 64;
constexpr size_t kMaxReason = 200;

// Paths inside the sandbox that nothing may be mounted on, under, or above.
constexpr std::string_view kReservedTargets[] = {"/proc", "/dev", "/sys", "/sandbox/control",
                                                 "/sandbox/tools"};
// Host paths that may not be mounted into a sandbox: kernel interfaces and runtime state (e.g. a
// container engine's socket under /run).
constexpr std::string_view kForbiddenSources[] = {"/proc", "/sys", "/dev", "/run", "/var/run"};
// The platform sets these; a spec may not.
constexpr std::string_view kReservedEnv[] = {"SESSION_TOKEN", "CONTROL_PLANE_URL", "SESSION_ID"};
constexpr std::string_view kReservedEnvPrefix = "AIRLOCK_";
constexpr std::string_view kHttpMethods[] = {"GET",   "HEAD",   "POST",   "PUT",
                                             "PATCH", "DELETE", "OPTIONS"};

bool IsAtOrUnder(std::string_view path, std::string_view dir) {
  if (dir == "/") return !path.empty() && path[0] == '/';
  return path == dir ||
         (path.size() > dir.size() && path.substr(0, dir.size()) == dir && path[dir.size()] == '/');
}

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }
bool IsHex(std::string_view text) {
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}
bool HasControl(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

// Why `path` is not an absolute, normalized path; empty when it is.
std::string PathProblem(std::string_view path) {
  if (path.empty()) return "must not be empty";
  if (path.size() > kMaxPathBytes) return fmt::format("must be at most {} bytes", kMaxPathBytes);
  if (path[0] != '/') return fmt::format("{} is not an absolute path", Quote(path));
  if (HasControl(path)) return "must not contain NUL or control characters";
  if (path.find("//") != std::string_view::npos) return "must not contain \"//\"";
  if (path.size() > 1 && path.back() == '/') return "must not end with \"/\"";
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view segment = path.substr(start, end - start);
    if (segment == "..") return "must not contain \"..\"";
    if (segment == ".") return "must not contain \".\" segments";
    start = end + 1;
  }
  return "";
}

// RFC 1123 label: 1-63 letters, digits or '-', not starting or ending with '-'.
bool IsLabel(std::string_view label, bool lower_only) {
  if (label.empty() || label.size() > 63) return false;
  if (label.front() == '-' || label.back() == '-') return false;
  for (char c : label) {
    if (!(lower_only ? IsLowerAlnum(c) : IsAlnum(c)) && c != '-') return false;
  }
  return true;
}

std::string HostNameProblem(std::string_view host, std::string_view whole) {
  if (host.size() > 253) return fmt::format("{} is longer than 253 characters", Quote(whole));
  size_t start = 0;
  while (true) {
    size_t dot = host.find('.', start);
    std::string_view label = host.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (!IsLabel(label, /*lower_only=*/true)) {
      bool upper = false;
      for (char c : host) upper = upper || (c >= 'A' && c <= 'Z');
      if (upper) return fmt::format("{} must be lower case", Quote(whole));
      return fmt::format("{} is not a host name (dot-separated labels of a-z, 0-9 and '-')",
                         Quote(whole));
    }
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return "";
}

// "host", "*.suffix" (at least two labels after "*."), "[v6 address]"; each with optional ":port".
std::string HostPatternProblem(std::string_view pattern) {
  if (pattern.empty()) return "must not be empty";
  std::string_view host = pattern;
  std::string_view port;
  if (host.front() == '[') {
    size_t close = host.find(']');
    if (close == std::string_view::npos) return fmt::format("{} lacks \"]\"", Quote(pattern));
    std::string address(host.substr(1, close - 1));
    in6_addr unused;
    if (inet_pton(AF_INET6, address.c_str(), &unused) != 1) {
      return fmt::format("{} is not an IPv6 address", Quote(pattern));
    }
    std::string_view rest = host.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return fmt::format("{} has junk after \"]\"", Quote(pattern));
      port = rest.substr(1);
      if (port.empty()) return fmt::format("{} has an empty port", Quote(pattern));
    }
    host = {};
  } else if (size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
    if (port.empty()) return fmt::format("{} has an empty port", Quote(pattern));
  }
  if (!port.empty()) {
    bool digits = port.size() <= 5;
    for (char c : port) digits = digits && c >= '0' && c <= '9';
    int value = digits ? std::stoi(std::string(port)) : 0;
    if (value < 1 || value > 65535) {
      return fmt::format("{} has an invalid port (1-65535)", Quote(pattern));
    }
  }
  if (host.empty()) return "";  // an IPv6 literal, checked above
  if (host.substr(0, 2) == "*.") {
    std::string_view suffix = host.substr(2);
    if (suffix.find('.') == std::string_view::npos) {
      return fmt::format("{} is too broad (a wildcard needs at least two labels after \"*.\")",
                         Quote(pattern));
    }
    host = suffix;
  }
  if (host.find('*') != std::string_view::npos) {
    return fmt::format("{}: a wildcard may only be a leading \"*.\"", Quote(pattern));
  }
  return HostNameProblem(host, pattern);
}

std::string CidrProblem(std::string_view cidr) {
  std::string not_cidr = fmt::format("{} is not a CIDR (IPv4 or IPv6 address/prefix)", Quote(cidr));
  size_t slash = cidr.find('/');
  if (slash == std::string_view::npos) return not_cidr;
  std::string address(cidr.substr(0, slash));
  std::string_view prefix_text = cidr.substr(slash + 1);
  unsigned char bytes[16] = {};
  int family = address.find(':') != std::string::npos ? AF_INET6 : AF_INET;
  if (inet_pton(family, address.c_str(), bytes) != 1) return not_cidr;
  int max_prefix = family == AF_INET6 ? 128 : 32;
  if (prefix_text.empty() || prefix_text.size() > 3) return not_cidr;
  int prefix = 0;
  for (char c : prefix_text) {
    if (c < '0' || c > '9') return not_cidr;
    prefix = prefix * 10 + (c - '0');
  }
  if (prefix > max_prefix || (prefix_text.size() > 1 && prefix_text[0] == '0')) return not_cidr;
  bool host_bits = false;
  for (int bit = prefix; bit < max_prefix; ++bit) {
    auto mask = static_cast<unsigned char>(0x80 >> (bit % 8));
    if (bytes[bit / 8] & mask) {
      host_bits = true;
      bytes[bit / 8] &= static_cast<unsigned char>(~mask);
    }
  }
  if (host_bits) {
    char text[INET6_ADDRSTRLEN] = {};
    inet_ntop(family, bytes, text, sizeof(text));
    return fmt::format("{} has host bits set (the network is {}/{})", Quote(cidr), text, prefix);
  }
  return "";
}

bool IsNameComponent(std::string_view component) {
  // [a-z0-9]+ separated by '.', '_', "__" or runs of '-'.
  if (component.empty() || !IsLowerAlnum(component.front()) || !IsLowerAlnum(component.back())) {
    return false;
  }
  for (size_t i = 0; i < component.size(); ++i) {
    char c = component[i];
    if (IsLowerAlnum(c) || c == '-') continue;
    if (c == '.' || c == '_') {
      bool double_underscore = c == '_' && i + 1 < component.size() && component[i + 1] == '_';
      if (double_underscore) ++i;
      if (!IsLowerAlnum(component[i + 1])) return false;
      continue;
    }
    return false;
  }
  return true;
}

bool IsTag(std::string_view tag) {
  if (tag.empty() || tag.size() > 128) return false;
  if (!(IsAlnum(tag[0]) || tag[0] == '_')) return false;
  for (char c : tag) {
    if (!(IsAlnum(c) || c == '_' || c == '.' || c == '-')) return false;
  }
  return true;
}

bool IsDigest(std::string_view digest) {
  constexpr std::string_view kPrefix = "sha256:";
  return digest.size() == kPrefix.size() + 64 && digest.substr(0, kPrefix.size()) == kPrefix &&
         IsHex(digest.substr(kPrefix.size()));
}

// "sha256:<64 hex>" or [registry[:port]/]name[/name...][:tag][@sha256:<64 hex>].
std::string ImageProblem(std::string_view image) {
  std::string bad = fmt::format(
      "{} is not an image reference (sha256:<64 hex> or [registry/]name[:tag][@sha256:<64 hex>])",
      Quote(image));
  if (image.size() > kMaxImage) return fmt::format("must be at most {} characters", kMaxImage);
  if (image.substr(0, 7) == "sha256:") {
    return IsDigest(image) ? ""
                           : fmt::format(
                                 "{} is not a digest (sha256: and 64 lowercase hex "
                                 "digits)",
                                 Quote(image));
  }
  std::string_view rest = image;
  if (size_t at = rest.find('@'); at != std::string_view::npos) {
    if (!IsDigest(rest.substr(at + 1))) return bad;
    rest = rest.substr(0, at);
  }
  size_t last_slash = rest.rfind('/');
  size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos &&
      (last_slash == std::string_view::npos || colon > last_slash)) {
    if (!IsTag(rest.substr(colon + 1))) return bad;
    rest = rest.substr(0, colon);
  }
  size_t first_slash = rest.find('/');
  if (first_slash != std::string_view::npos) {
    std::string_view first = rest.substr(0, first_slash);
    if (first.find_first_of(".:") != std::string_view::npos || first == "localhost") {
      if (!HostPatternProblem(first).empty() || first.front() == '*') return bad;
      rest = rest.substr(first_slash + 1);
    }
  }
  size_t start = 0;
  while (true) {
    size_t slash = rest.find('/', start);
    std::string_view component =
        rest.substr(start, slash == std::string_view::npos ? slash : slash - start);
    if (!IsNameComponent(component)) return bad;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return "";
}

bool IsSecretName(std::string_view name) {
  if (name.empty() || name.size() > kMaxName || !IsAlnum(name[0])) return false;
  for (char c : name) {
    if (!(IsAlnum(c) || c == '.' || c == '_' || c == '-' || c == '/')) return false;
  }
  return true;
}

bool IsRuleName(std::string_view name) {
  if (name.empty() || name.size() > kMaxRuleName || !IsLowerAlnum(name[0])) return false;
  for (char c : name) {
    if (!(IsLowerAlnum(c) || c == '.' || c == '_' || c == '-' || c == '/')) return false;
  }
  return true;
}

bool IsCacheKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxName) return false;
  for (char c : key) {
    if (!(IsAlnum(c) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

const char* RuntimesOfLevel(Level level) {
  switch (level) {
    case Level::kInterp:
      return "interp";
    case Level::kBasic:
    case Level::kHardened:
      return "native or traced";
    case Level::kGvisor:
      return "gvisor";
    case Level::kMicroVm:
      return "microvm";
  }
  return "?";
}

class Checker {
 public:
  explicit Checker(const SandboxSpec& spec) : spec_(spec) {}

  std::vector<FieldError> Run() {
    CheckTop();
    CheckEnv();
    CheckFilesystem();
    CheckProcess();
    CheckResources();
    CheckNetwork();
    CheckSecrets();
    CheckCache();
    CheckArtifacts();
    CheckCommandPolicy();
    for (FieldError& error : CheckRiskClass(spec_)) errors_.push_back(std::move(error));
    return std::move(errors_);
  }

 private:
  void Add(std::string path, std::string message) {
    errors_.push_back({std::move(path), std::move(message)});
  }

  // "must be > 0" below 1, "must be at most <max>" above `max`.
  void Positive(const std::string& path, int64_t value, int64_t max) {
    if (value <= 0) {
      Add(path, "must be > 0");
    } else if (value > max) {
      Add(path, fmt::format("must be at most {}", max));
    }
  }
  void InRange(const std::string& path, int64_t value, int64_t min, int64_t max) {
    if (value < min) {
      Add(path, fmt::format("must be >= {}", min));
    } else if (value > max) {
      Add(path, fmt::format("must be at most {}", max));
    }
  }
  bool AtMost(const std::string& path, size_t count, size_t max) {
    if (count <= max) return true;
    Add(path, fmt::format("must have at most {} entries", max));
    return false;
  }
  bool AbsolutePath(const std::string& path, std::string_view value) {
    std::string problem = PathProblem(value);
    if (problem.empty()) return true;
    Add(path, std::move(problem));
    return false;
  }

  void CheckTop() {
    if (spec_.version != 1) {
      Add("version", fmt::format("unsupported version {} (supported: 1)", spec_.version));
    }
    int level = static_cast<int>(spec_.level);
    if (level < 0 || level > 4) {
      Add("level", fmt::format("{} is not one of: 0, 1, 2, 3, 4", level));
      return;  // everything below depends on a real level
    }
    std::optional<Level> runtime_level = LevelOfRuntime(spec_.runtime);
    bool runtime_matches = runtime_level.has_value()
                               ? *runtime_level == spec_.level
                               : (spec_.level == Level::kBasic || spec_.level == Level::kHardened);
    if (!runtime_matches) {
      Add("runtime",
          fmt::format("{} does not match level {} (level {} runs {})", ToString(spec_.runtime),
                      level, level, RuntimesOfLevel(spec_.level)));
    } else if (spec_.runtime == Runtime::kTraced &&
               spec_.process.supervisor == SupervisorMode::kNone) {
      Add("runtime", "traced needs process.supervisor notify or ptrace");
    }

    if (!spec_.image.empty()) {
      std::string problem = ImageProblem(spec_.image);
      if (!problem.empty()) Add("image", std::move(problem));
    }
    if (!spec_.rootfs.empty()) {
      if (!spec_.image.empty()) {
        Add("rootfs", "set image or rootfs, not both");
      } else if (AbsolutePath("rootfs", spec_.rootfs) && spec_.rootfs == "/") {
        Add("rootfs", "must not be the host's \"/\" (leave rootfs empty for the default layout)");
      }
    }

    auto id = [&](const char* path, uint32_t value) {
      if (value == 0) {
        Add(path, "must not be 0 (root)");
      } else if (value > kMaxUserId) {
        Add(path, fmt::format("must be between 1 and {}", kMaxUserId));
      }
    };
    id("user.uid", spec_.user.uid);
    id("user.gid", spec_.user.gid);

    AbsolutePath("workdir", spec_.workdir);
    if (!IsLabel(spec_.hostname, /*lower_only=*/false)) {
      Add("hostname",
          fmt::format("{} is not an RFC 1123 label (1-63 letters, digits or '-', not starting or "
                      "ending with '-')",
                      Quote(spec_.hostname)));
    }
  }

  void CheckEnv() {
    if (!AtMost("env", spec_.env.size(), kMaxEnv)) return;
    for (const auto& [name, value] : spec_.env) {
      std::string path = FieldPath("env", name);
      if (!internal::IsIdentifier(name) || name.size() > kMaxEnvName) {
        Add(path, fmt::format("not a valid variable name ([A-Za-z_][A-Za-z0-9_]*, at most {} "
                              "characters)",
                              kMaxEnvName));
        continue;
      }
      bool reserved = name.substr(0, kReservedEnvPrefix.size()) == kReservedEnvPrefix;
      for (std::string_view platform : kReservedEnv) reserved = reserved || name == platform;
      if (reserved) Add(path, "reserved: set by the platform");
      if (value.size() > kMaxEnvValue) {
        Add(path, fmt::format("value must be at most {} bytes", kMaxEnvValue));
      } else if (value.find('\0') != std::string::npos) {
        Add(path, "must not contain NUL characters");
      }
    }
  }

  // A host path that will be bind-mounted into the sandbox.
  void CheckSource(const std::string& path, std::string_view source) {
    if (!AbsolutePath(path, source)) return;
    if (std::string problem = HostSourceProblem(source); !problem.empty()) Add(path, problem);
  }

  // A path inside the sandbox that something is mounted on.
  void CheckTarget(const std::string& path, std::string_view target) {
    if (!AbsolutePath(path, target)) return;
    if (target == "/") {
      Add(path, "must not be \"/\"");
      return;
    }
    for (std::string_view dir : kReservedTargets) {
      if (IsAtOrUnder(target, dir)) {
        Add(path, fmt::format("must not be on or under {} (reserved)", dir));
        return;
      }
      if (IsAtOrUnder(dir, target)) {
        Add(path, fmt::format("must not be a parent of {} (reserved)", dir));
        return;
      }
    }
    if (target == "/sandbox/workspace") {
      Add(path, "must not be /sandbox/workspace (it comes from filesystem.workspace)");
    } else if (IsAtOrUnder(target, "/sandbox/workspace") &&
               spec_.filesystem.workspace_mode == MountMode::kReadOnly) {
      Add(path,
          "must not be under /sandbox/workspace when the workspace is read-only "
          "(filesystem.workspaceMode ro, which risk class R0 derives): no mount point can be "
          "made in it");
    } else if (IsAtOrUnder(target, "/sandbox/artifacts")) {
      Add(path, "must not be on or under /sandbox/artifacts (only what the sandbox writes leaves)");
    } else if (IsAtOrUnder(target, "/sandbox/cache")) {
      Add(path, "must not be on or under /sandbox/cache (it comes from cache.mode)");
    }
  }

  void CheckFilesystem() {
    const Filesystem& fs = spec_.filesystem;
    if (spec_.level >= Level::kHardened && !fs.read_only_root) {
      Add("filesystem.readOnlyRoot", "must be true at level 2 and above");
    }
    if (!fs.workspace.empty()) CheckSource("filesystem.workspace", fs.workspace);
    Positive("filesystem.workspaceSizeMb", fs.workspace_size_mb, kMaxSizeMb);
    Positive("filesystem.tmpSizeMb", fs.tmp_size_mb, kMaxSizeMb);
    Positive("filesystem.homeSizeMb", fs.home_size_mb, kMaxSizeMb);

    std::map<std::string_view, std::string> targets;  // target -> path of its first use
    auto unique_target = [&](const std::string& path, std::string_view target) {
      auto [it, inserted] = targets.emplace(target, path);
      if (!inserted) Add(path, fmt::format("duplicate of {}", it->second));
    };
    if (AtMost("filesystem.mounts", fs.mounts.size(), kMaxMounts)) {
      for (size_t i = 0; i < fs.mounts.size(); ++i) {
        const Mount& mount = fs.mounts[i];
        std::string path = IndexPath("filesystem.mounts", i);
        CheckSource(path + ".source", mount.source);
        CheckTarget(path + ".target", mount.target);
        unique_target(path + ".target", mount.target);
      }
    }
    if (AtMost("filesystem.tmpfs", fs.tmpfs.size(), kMaxMounts)) {
      for (size_t i = 0; i < fs.tmpfs.size(); ++i) {
        const Tmpfs& tmpfs = fs.tmpfs[i];
        std::string path = IndexPath("filesystem.tmpfs", i);
        CheckTarget(path + ".target", tmpfs.target);
        unique_target(path + ".target", tmpfs.target);
        Positive(path + ".sizeMb", tmpfs.size_mb, kMaxSizeMb);
        Positive(path + ".inodes", tmpfs.inodes, kMaxInodes);
      }
    }
  }

  void CheckAction(const std::string& path, std::string_view action) {
    std::optional<SyscallAction> parsed = ParseSyscallAction(action);
    if (!parsed.has_value()) {
      if (action.substr(0, 6) == "errno(" && action.size() > 7 && action.back() == ')') {
        Add(path, fmt::format("unknown errno name in {}", Quote(action)));
      } else {
        Add(path, fmt::format("{} is not one of: allow, errno(NAME), kill, trace, notify",
                              Quote(action)));
      }
      return;
    }
    SupervisorMode supervisor = spec_.process.supervisor;
    if (parsed->kind == SyscallAction::Kind::kTrace && supervisor != SupervisorMode::kPtrace) {
      Add(path, "trace needs process.supervisor ptrace");
    } else if (parsed->kind == SyscallAction::Kind::kNotify &&
               supervisor != SupervisorMode::kNotify) {
      Add(path, "notify needs process.supervisor notify");
    }
  }

  void CheckSyscallRule(const std::string& path, const SyscallRule& rule) {
    if (rule.names.empty()) {
      Add(path + ".names", "must list at least one syscall");
    } else if (AtMost(path + ".names", rule.names.size(), kMaxSyscallNames)) {
      for (size_t j = 0; j < rule.names.size(); ++j) {
        const std::string& name = rule.names[j];
        std::string name_path = IndexPath(path + ".names", j);
        if (name.empty()) {
          Add(name_path, "must not be empty");
        } else if (!IsKnownSyscall(name)) {
          Add(name_path, fmt::format("unknown system call {} on {}", Quote(name),
                                     fmt::join(SyscallArchitectures(), " and ")));
        }
      }
    }
    if (AtMost(path + ".args", rule.args.size(), kMaxSyscallArgs)) {
      for (size_t j = 0; j < rule.args.size(); ++j) {
        const SyscallArgCondition& arg = rule.args[j];
        std::string arg_path = IndexPath(path + ".args", j);
        if (arg.index < 0 || arg.index > 5) Add(arg_path + ".index", "must be between 0 and 5");
        if (!IsSyscallArgOp(arg.op)) {
          Add(arg_path + ".op",
              fmt::format("{} is not one of: eq, ne, lt, le, gt, ge, masked_eq", Quote(arg.op)));
        } else if (arg.op == "masked_eq" && arg.mask == 0) {
          Add(arg_path + ".mask", "must be set (non-zero) with op masked_eq");
        } else if (arg.op != "masked_eq" && arg.mask != 0) {
          Add(arg_path + ".mask", "only used with op masked_eq");
        }
      }
    }
    if (rule.action.empty()) {
      Add(path + ".action", "required");
    } else {
      CheckAction(path + ".action", rule.action);
    }
  }

  void CheckProcess() {
    const Process& process = spec_.process;
    bool hardened = spec_.level >= Level::kHardened;
    if (hardened && !process.no_new_privs) {
      Add("process.noNewPrivs", "must be true at level 2 and above");
    }
    if (hardened && !process.capabilities.empty()) {
      Add("process.capabilities", "must be empty at level 2 and above");
    }
    std::set<std::string_view> capabilities;
    for (size_t i = 0; i < process.capabilities.size(); ++i) {
      const std::string& name = process.capabilities[i];
      std::string path = IndexPath("process.capabilities", i);
      if (!CapabilityFromName(name).has_value()) {
        Add(path, fmt::format("unknown capability {} (names look like CAP_NET_BIND_SERVICE)",
                              Quote(name)));
      } else if (!capabilities.insert(name).second) {
        Add(path, fmt::format("duplicate capability {}", name));
      }
    }
    if (process.seccomp_profile != "default") {
      Add("process.seccompProfile",
          fmt::format("{} is not one of: default", Quote(process.seccomp_profile)));
    }
    InRange("process.pidsLimit", process.pids_limit, 1, kMaxPids);
    InRange("process.openFiles", process.open_files, kMinOpenFiles, kMaxOpenFiles);
    Positive("process.stackMb", process.stack_mb, kMaxStackMb);
    if (process.supervisor != SupervisorMode::kNone && spec_.runtime != Runtime::kTraced) {
      Add("process.supervisor", fmt::format("{} needs runtime traced (levels 1 and 2), not {}",
                                            ToString(process.supervisor), ToString(spec_.runtime)));
    }
    if (spec_.level == Level::kInterp && !process.syscalls.empty()) {
      Add("process.syscalls", "not used at level 0 (the interpreter makes no syscalls)");
    } else if (AtMost("process.syscalls", process.syscalls.size(), kMaxSyscallRules)) {
      for (size_t i = 0; i < process.syscalls.size(); ++i) {
        CheckSyscallRule(IndexPath("process.syscalls", i), process.syscalls[i]);
      }
    }
    if (!process.syscall_default_action.empty()) {
      CheckAction("process.syscallDefaultAction", process.syscall_default_action);
    }
  }

  void CheckResources() {
    const Resources& r = spec_.resources;
    if (!(r.cpu > 0)) {
      Add("resources.cpu", "must be > 0");
    } else if (!(r.cpu <= kMaxCpu)) {
      Add("resources.cpu", fmt::format("must be at most {}", kMaxCpu));
    }
    Positive("resources.memoryMb", r.memory_mb, kMaxSizeMb);
    Positive("resources.diskMb", r.disk_mb, kMaxSizeMb);
    Positive("resources.commandTimeoutSeconds", r.command_timeout_seconds,
             kMaxCommandTimeoutSeconds);
    Positive("resources.runTimeoutSeconds", r.run_timeout_seconds, kMaxRunTimeout);
    if (r.command_timeout_seconds > r.run_timeout_seconds && r.run_timeout_seconds > 0) {
      Add("resources.commandTimeoutSeconds",
          fmt::format("must not exceed resources.runTimeoutSeconds ({})", r.run_timeout_seconds));
    }
    InRange("resources.cpuTimeSeconds", r.cpu_time_seconds, 0, kMaxCommandTimeoutSeconds);
    InRange("resources.maxLogBytes", r.max_log_bytes, kMinLogBytes, kMaxLogBytes);
  }

  // `git_providers`: the kGitProvidersToken entry is allowed (repo-egress).
  void CheckHosts(const std::string& path, const std::vector<std::string>& hosts,
                  bool git_providers) {
    if (!AtMost(path, hosts.size(), kMaxHosts)) return;
    std::map<std::string_view, size_t> seen;
    for (size_t i = 0; i < hosts.size(); ++i) {
      std::string item = IndexPath(path, i);
      std::string problem;
      if (hosts[i] != kGitProvidersToken) {
        problem = HostPatternProblem(hosts[i]);
      } else if (!git_providers) {
        problem = fmt::format("{} is only used with profile repo-egress", kGitProvidersToken);
      }
      if (!problem.empty()) {
        Add(item, std::move(problem));
      } else if (auto [it, inserted] = seen.emplace(hosts[i], i); !inserted) {
        Add(item, fmt::format("duplicate of {}", IndexPath(path, it->second)));
      }
    }
  }

  void CheckNetwork() {
    const Network& network = spec_.network;
    const char* profile = ToString(network.profile);
    // Below a risk class's minimum level the level is the problem (CheckRiskClass says so), not
    // the network the class derived for its own level.
    bool below_risk_minimum =
        spec_.risk_class.has_value() && spec_.level < RuleFor(*spec_.risk_class).min_level;
    if (network.profile != NetworkProfile::kNone && spec_.level < Level::kHardened &&
        !below_risk_minimum) {
      Add("network.profile",
          fmt::format("{} needs level 2 or above (levels 0 and 1 have no network)", profile));
    }
    bool uses_hosts = network.profile == NetworkProfile::kDependencyEgress ||
                      network.profile == NetworkProfile::kRepoEgress ||
                      network.profile == NetworkProfile::kRestrictedHttp;
    if (!network.allow_hosts.empty() && !uses_hosts) {
      Add("network.allowHosts",
          fmt::format("only used with profiles dependency-egress, repo-egress and "
                      "restricted-http (profile is {})",
                      profile));
    } else {
      CheckHosts("network.allowHosts", network.allow_hosts,
                 network.profile == NetworkProfile::kRepoEgress);
    }
    if (!network.http_rules.empty() && network.profile != NetworkProfile::kRestrictedHttp) {
      Add("network.httpRules",
          fmt::format("only used with profile restricted-http (profile is {})", profile));
    } else if (AtMost("network.httpRules", network.http_rules.size(), kMaxHosts)) {
      for (size_t i = 0; i < network.http_rules.size(); ++i) {
        const HttpRule& rule = network.http_rules[i];
        std::string path = IndexPath("network.httpRules", i);
        std::string problem = HostPatternProblem(rule.host);
        if (!problem.empty()) Add(path + ".host", std::move(problem));
        std::set<std::string_view> methods;
        for (size_t j = 0; j < rule.methods.size(); ++j) {
          std::string method_path = IndexPath(path + ".methods", j);
          bool known = false;
          for (std::string_view method : kHttpMethods) known = known || rule.methods[j] == method;
          if (!known) {
            Add(method_path,
                fmt::format("{} is not one of: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
                            Quote(rule.methods[j])));
          } else if (!methods.insert(rule.methods[j]).second) {
            Add(method_path, fmt::format("duplicate method {}", rule.methods[j]));
          }
        }
        if (AtMost(path + ".pathPrefixes", rule.path_prefixes.size(), kMaxPathPrefixes)) {
          for (size_t j = 0; j < rule.path_prefixes.size(); ++j) {
            const std::string& prefix = rule.path_prefixes[j];
            std::string prefix_path = IndexPath(path + ".pathPrefixes", j);
            if (prefix.empty() || prefix[0] != '/') {
              Add(prefix_path, "must start with \"/\"");
            } else if (prefix.size() > kMaxPathBytes || HasControl(prefix) ||
                       prefix.find(' ') != std::string::npos) {
              Add(prefix_path, "must be a URL path (no spaces or control characters)");
            } else if (prefix.find("/../") != std::string::npos || prefix.ends_with("/..") ||
                       prefix.find("/./") != std::string::npos || prefix.ends_with("/.")) {
              Add(prefix_path, "must not contain \".\" or \"..\" segments");
            }
          }
        }
      }
    }
    if (AtMost("network.denyCidrs", network.deny_cidrs.size(), kMaxHosts)) {
      std::set<std::string_view> cidrs;
      for (size_t i = 0; i < network.deny_cidrs.size(); ++i) {
        std::string path = IndexPath("network.denyCidrs", i);
        std::string problem = CidrProblem(network.deny_cidrs[i]);
        if (!problem.empty()) {
          Add(path, std::move(problem));
        } else if (!cidrs.insert(network.deny_cidrs[i]).second) {
          Add(path, fmt::format("duplicate CIDR {}", network.deny_cidrs[i]));
        }
      }
    }
  }

  void CheckSecrets() {
    const std::vector<SecretLease>& leases = spec_.secrets.leases;
    if (!AtMost("secrets.leases", leases.size(), kMaxLeases)) return;
    std::map<std::string_view, size_t> names;
    std::map<std::string_view, size_t> mounts;
    for (size_t i = 0; i < leases.size(); ++i) {
      const SecretLease& lease = leases[i];
      std::string path = IndexPath("secrets.leases", i);
      if (lease.name.empty()) {
        Add(path + ".name", "required");
      } else if (!IsSecretName(lease.name)) {
        Add(path + ".name", fmt::format("{} is not a secret name (1-{} letters, digits, '.', '_', "
                                        "'-' or '/', starting with a letter or digit)",
                                        Quote(lease.name), kMaxName));
      } else if (auto [it, inserted] = names.emplace(lease.name, i); !inserted) {
        Add(path + ".name", fmt::format("duplicate of secrets.leases[{}].name", it->second));
      }
      if (lease.purpose.empty()) {
        Add(path + ".purpose", "required (say what the secret is for; it is audited)");
      } else if (lease.purpose.size() > kMaxPurpose) {
        Add(path + ".purpose", fmt::format("must be at most {} bytes", kMaxPurpose));
      } else if (HasControl(lease.purpose)) {
        Add(path + ".purpose", "must not contain control characters");
      }
      Positive(path + ".ttlSeconds", lease.ttl_seconds, kMaxLeaseTtl);
      if (!lease.mount_path.empty()) {
        std::string mount_path = path + ".mountPath";
        if (IsAtOrUnder(lease.mount_path, "/sandbox/workspace")) {
          Add(mount_path, "must not be on or under /sandbox/workspace (it is synced out)");
        } else {
          CheckTarget(mount_path, lease.mount_path);
        }
        if (auto [it, inserted] = mounts.emplace(lease.mount_path, i); !inserted) {
          Add(mount_path, fmt::format("duplicate of secrets.leases[{}].mountPath", it->second));
        }
      }
    }
    if (!leases.empty() && !spec_.artifacts.secret_scan) {
      Add("artifacts.secretScan", "must be true when secrets.leases is not empty");
    }
  }

  void CheckCache() {
    const Cache& cache = spec_.cache;
    if (cache.mode == CacheMode::kNone) {
      if (!cache.key.empty()) Add("cache.key", "only used when cache.mode is ro or rw");
    } else if (cache.key.empty()) {
      Add("cache.key", "required when cache.mode is ro or rw");
    } else if (!IsCacheKey(cache.key)) {
      Add("cache.key", fmt::format("{} is not a cache key (1-{} letters, digits, '.', '_' or '-')",
                                   Quote(cache.key), kMaxName));
    }
  }

  void CheckArtifacts() {
    const Artifacts& artifacts = spec_.artifacts;
    if (AtMost("artifacts.paths", artifacts.paths.size(), kMaxArtifactPaths)) {
      std::set<std::string_view> seen;
      for (size_t i = 0; i < artifacts.paths.size(); ++i) {
        const std::string& value = artifacts.paths[i];
        std::string path = IndexPath("artifacts.paths", i);
        if (!AbsolutePath(path, value)) continue;
        if (!IsAtOrUnder(value, "/sandbox/artifacts") &&
            !IsAtOrUnder(value, "/sandbox/workspace")) {
          Add(path, "must be /sandbox/artifacts, /sandbox/workspace or under them");
        } else if (!seen.insert(value).second) {
          Add(path, fmt::format("duplicate path {}", value));
        }
      }
    }
    Positive("artifacts.maxSizeMb", artifacts.max_size_mb, kMaxSizeMb);
    InRange("artifacts.binaryThresholdKb", artifacts.binary_threshold_kb, 0, kMaxBinaryThresholdKb);
    if (!AtMost("artifacts.allowBinaries", artifacts.allow_binaries.size(), kMaxBinaryAllowances)) {
      return;
    }
    std::map<std::string_view, size_t> seen;
    for (size_t i = 0; i < artifacts.allow_binaries.size(); ++i) {
      const BinaryAllowance& allowance = artifacts.allow_binaries[i];
      const std::string path = IndexPath("artifacts.allowBinaries", i);
      if (std::string problem = PathGlobProblem(allowance.path); !problem.empty()) {
        Add(path + ".path", std::move(problem));
      } else if (auto [it, inserted] = seen.emplace(allowance.path, i); !inserted) {
        Add(path + ".path",
            fmt::format("duplicate of artifacts.allowBinaries[{}].path", it->second));
      } else {
        bool under = false;
        for (const std::string& dir : artifacts.paths) {
          under = under || (allowance.path.size() > dir.size() + 1 &&
                            allowance.path.compare(0, dir.size(), dir) == 0 &&
                            allowance.path[dir.size()] == '/');
        }
        if (!under) {
          Add(path + ".path",
              fmt::format("{} is not under any of artifacts.paths (nothing else is collected)",
                          Quote(allowance.path)));
        }
      }
      if (allowance.reason.empty()) {
        Add(path + ".reason", "required (it is recorded with every binary released under it)");
      } else {
        ReasonText(path + ".reason", allowance.reason);
      }
    }
  }

  // One line of at most kMaxReason bytes, shown to people and models.
  void ReasonText(const std::string& path, std::string_view reason) {
    if (reason.size() > kMaxReason) {
      Add(path, fmt::format("must be at most {} bytes", kMaxReason));
    } else if (HasControl(reason)) {
      Add(path, "must be one line without control characters");
    }
  }

  void CheckCommandPolicy() {
    const CommandPolicy& policy = spec_.command_policy;
    if (!AtMost("commandPolicy.deny", policy.deny.size(), kMaxDenyRules)) return;
    std::map<std::string_view, size_t> names;
    for (size_t i = 0; i < policy.deny.size(); ++i) {
      const CommandDenyRule& rule = policy.deny[i];
      const std::string path = IndexPath("commandPolicy.deny", i);
      if (rule.name.empty()) {
        Add(path + ".name", "required (refusals name their rule as spec/<name>)");
      } else if (!IsRuleName(rule.name)) {
        Add(path + ".name",
            fmt::format("{} is not a rule name (1-{} of a-z, 0-9, '.', '_', '-', '/', starting "
                        "with a letter or digit)",
                        Quote(rule.name), kMaxRuleName));
      } else if (auto [it, inserted] = names.emplace(rule.name, i); !inserted) {
        Add(path + ".name", fmt::format("duplicate of commandPolicy.deny[{}].name", it->second));
      }
      if (rule.argv.empty()) {
        Add(path + ".argv", "must have at least one pattern");
      } else if (AtMost(path + ".argv", rule.argv.size(), kMaxRulePatterns)) {
        for (size_t j = 0; j < rule.argv.size(); ++j) {
          std::string problem = ArgvPatternProblem(rule.argv[j]);
          if (!problem.empty()) Add(IndexPath(path + ".argv", j), std::move(problem));
        }
      }
      ReasonText(path + ".reason", rule.reason);
    }
  }

  const SandboxSpec& spec_;
  std::vector<FieldError> errors_;
};

}  // namespace

std::optional<Level> LevelOfRuntime(Runtime runtime) {
  switch (runtime) {
    case Runtime::kInterp:
      return Level::kInterp;
    case Runtime::kGvisor:
      return Level::kGvisor;
    case Runtime::kMicroVm:
      return Level::kMicroVm;
    case Runtime::kNative:
    case Runtime::kTraced:
      return std::nullopt;
  }
  return std::nullopt;
}

Runtime DeriveRuntime(Level level, SupervisorMode supervisor) {
  switch (level) {
    case Level::kInterp:
      return Runtime::kInterp;
    case Level::kBasic:
    case Level::kHardened:
      return supervisor == SupervisorMode::kNone ? Runtime::kNative : Runtime::kTraced;
    case Level::kGvisor:
      return Runtime::kGvisor;
    case Level::kMicroVm:
      return Runtime::kMicroVm;
  }
  return Runtime::kNative;
}

std::string HostSourceProblem(std::string_view source) {
  if (source == "/") return "must not be the host's \"/\"";
  for (std::string_view dir : kForbiddenSources) {
    if (IsAtOrUnder(source, dir)) {
      return fmt::format("must not be on or under {} (host kernel and runtime state)", dir);
    }
  }
  return "";
}

std::vector<FieldError> Validate(const SandboxSpec& spec) { return Checker(spec).Run(); }

}  // namespace airlock::spec
