#include "spec/validate.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/kernel_names.h"
#include "spec/patterns.h"

namespace airlock::spec {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<std::string> Problems(const SandboxSpec& spec) {
  std::vector<std::string> out;
  for (const FieldError& error : Validate(spec)) out.push_back(ToString(error));
  return out;
}

struct Case {
  const char* name;
  std::function<void(SandboxSpec&)> change;
  std::vector<std::string> expected;
};

void ExpectRules(const std::vector<Case>& rules) {
  for (const Case& rule : rules) {
    SCOPED_TRACE(rule.name);
    SandboxSpec spec;
    rule.change(spec);
    EXPECT_EQ(Problems(spec), rule.expected);
  }
}

Mount MountAt(std::string target) { return Mount{"/srv/data", std::move(target)}; }

TEST(ValidateTest, DefaultSpecIsValid) { EXPECT_THAT(Problems(SandboxSpec{}), IsEmpty()); }

TEST(ValidateTest, TopLevelFields) {
  ExpectRules({
      {"version",
       [](SandboxSpec& s) { s.version = 2; },
       {"version: unsupported version 2 (supported: 1)"}},
      {"level out of enum",
       [](SandboxSpec& s) { s.level = static_cast<Level>(9); },
       {"level: 9 is not one of: 0, 1, 2, 3, 4"}},
      {"runtime vs level",
       [](SandboxSpec& s) { s.runtime = Runtime::kGvisor; },
       {"runtime: gvisor does not match level 2 (level 2 runs native or traced)"}},
      {"native at level 3",
       [](SandboxSpec& s) { s.level = Level::kGvisor; },
       {"runtime: native does not match level 3 (level 3 runs gvisor)"}},
      {"traced without supervisor",
       [](SandboxSpec& s) { s.runtime = Runtime::kTraced; },
       {"runtime: traced needs process.supervisor notify or ptrace"}},
      {"image digest",
       [](SandboxSpec& s) { s.image = "sha256:abc"; },
       {"image: \"sha256:abc\" is not a digest (sha256: and 64 lowercase hex digits)"}},
      {"image reference",
       [](SandboxSpec& s) { s.image = "Debian:12"; },
       {"image: \"Debian:12\" is not an image reference (sha256:<64 hex> or "
        "[registry/]name[:tag][@sha256:<64 hex>])"}},
      {"image with bad pinned digest",
       [](SandboxSpec& s) { s.image = "debian@sha256:00"; },
       {"image: \"debian@sha256:00\" is not an image reference (sha256:<64 hex> or "
        "[registry/]name[:tag][@sha256:<64 hex>])"}},
      {"image and rootfs",
       [](SandboxSpec& s) {
         s.image = "debian:12";
         s.rootfs = "/srv/rootfs";
       },
       {"rootfs: set image or rootfs, not both"}},
      {"rootfs relative",
       [](SandboxSpec& s) { s.rootfs = "srv/rootfs"; },
       {"rootfs: \"srv/rootfs\" is not an absolute path"}},
      {"rootfs host root",
       [](SandboxSpec& s) { s.rootfs = "/"; },
       {"rootfs: must not be the host's \"/\" (leave rootfs empty for the default layout)"}},
      {"uid root", [](SandboxSpec& s) { s.user.uid = 0; }, {"user.uid: must not be 0 (root)"}},
      {"gid root", [](SandboxSpec& s) { s.user.gid = 0; }, {"user.gid: must not be 0 (root)"}},
      {"uid -1",
       [](SandboxSpec& s) { s.user.uid = 4294967295u; },
       {"user.uid: must be between 1 and 2147483647"}},
      // 10^9 (the host id base) + 3294967296 wraps to host uid 0.
      {"uid that would wrap to host root",
       [](SandboxSpec& s) { s.user.uid = 3294967296u; },
       {"user.uid: must be between 1 and 2147483647"}},
      {"gid past 2^31",
       [](SandboxSpec& s) { s.user.gid = 2147483648u; },
       {"user.gid: must be between 1 and 2147483647"}},
      {"workdir relative",
       [](SandboxSpec& s) { s.workdir = "work"; },
       {"workdir: \"work\" is not an absolute path"}},
      {"hostname",
       [](SandboxSpec& s) { s.hostname = "-bad_host"; },
       {"hostname: \"-bad_host\" is not an RFC 1123 label (1-63 letters, digits or '-', not "
        "starting or ending with '-')"}},
      {"hostname too long",
       [](SandboxSpec& s) { s.hostname = std::string(64, 'a'); },
       {"hostname: \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" is not "
        "an RFC 1123 label (1-63 letters, digits or '-', not starting or ending with '-')"}},
  });
}

TEST(ValidateTest, AcceptsImageReferences) {
  for (const char* image :
       {"debian", "debian:12", "library/debian:bookworm-slim", "ghcr.io/org/app:v1.2.3",
        "localhost:5000/app", "registry.example.com:443/team/app_name:1.0",
        "debian@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
        "sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"}) {
    SandboxSpec spec;
    spec.image = image;
    EXPECT_THAT(Problems(spec), IsEmpty()) << image;
  }
}

TEST(ValidateTest, Paths) {
  ExpectRules({
      {"dot dot",
       [](SandboxSpec& s) { s.workdir = "/sandbox/../etc"; },
       {"workdir: must not contain \"..\""}},
      {"double slash",
       [](SandboxSpec& s) { s.workdir = "/sandbox//workspace"; },
       {"workdir: must not contain \"//\""}},
      {"trailing slash",
       [](SandboxSpec& s) { s.workdir = "/sandbox/workspace/"; },
       {"workdir: must not end with \"/\""}},
      {"dot",
       [](SandboxSpec& s) { s.workdir = "/sandbox/./workspace"; },
       {"workdir: must not contain \".\" segments"}},
      {"nul",
       [](SandboxSpec& s) { s.workdir = std::string("/sandbox\0x", 10); },
       {"workdir: must not contain NUL or control characters"}},
      {"empty", [](SandboxSpec& s) { s.workdir = ""; }, {"workdir: must not be empty"}},
      {"too long",
       [](SandboxSpec& s) { s.workdir = "/" + std::string(4095, 'a'); },
       {"workdir: must be at most 4095 bytes"}},
  });
}

TEST(ValidateTest, Env) {
  ExpectRules({
      {"bad name",
       [](SandboxSpec& s) { s.env["1X"] = "v"; },
       {"env[\"1X\"]: not a valid variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128 "
        "characters)"}},
      {"name with space",
       [](SandboxSpec& s) { s.env["A B"] = "v"; },
       {"env[\"A B\"]: not a valid variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128 "
        "characters)"}},
      {"reserved",
       [](SandboxSpec& s) { s.env["SESSION_TOKEN"] = "x"; },
       {"env.SESSION_TOKEN: reserved: set by the platform"}},
      {"reserved prefix",
       [](SandboxSpec& s) { s.env["AIRLOCK_DEBUG"] = "1"; },
       {"env.AIRLOCK_DEBUG: reserved: set by the platform"}},
      {"value with NUL",
       [](SandboxSpec& s) { s.env["A"] = std::string("a\0b", 3); },
       {"env.A: must not contain NUL characters"}},
      {"value too long",
       [](SandboxSpec& s) { s.env["A"] = std::string(32769, 'x'); },
       {"env.A: value must be at most 32768 bytes"}},
      {"too many",
       [](SandboxSpec& s) {
         for (int i = 0; i < 257; ++i) s.env["V" + std::to_string(i)] = "";
       },
       {"env: must have at most 256 entries"}},
  });
}

TEST(ValidateTest, Filesystem) {
  ExpectRules({
      {"writable root at level 2",
       [](SandboxSpec& s) { s.filesystem.read_only_root = false; },
       {"filesystem.readOnlyRoot: must be true at level 2 and above"}},
      {"writable root at level 1",
       [](SandboxSpec& s) {
         s.level = Level::kBasic;
         s.filesystem.read_only_root = false;
       },
       {}},
      {"workspace under /proc",
       [](SandboxSpec& s) { s.filesystem.workspace = "/proc/1/root"; },
       {"filesystem.workspace: must not be on or under /proc (host kernel and runtime state)"}},
      {"sizes",
       [](SandboxSpec& s) {
         s.filesystem.workspace_size_mb = 0;
         s.filesystem.tmp_size_mb = -1;
         s.filesystem.home_size_mb = (int64_t{1} << 20) + 1;
       },
       {"filesystem.workspaceSizeMb: must be > 0", "filesystem.tmpSizeMb: must be > 0",
        "filesystem.homeSizeMb: must be at most 1048576"}},
      {"mount source relative",
       [](SandboxSpec& s) {
         s.filesystem.mounts = {Mount{"data", "/sandbox/data"}};
       },
       {"filesystem.mounts[0].source: \"data\" is not an absolute path"}},
      {"mount source host root",
       [](SandboxSpec& s) {
         s.filesystem.mounts = {Mount{"/", "/sandbox/host"}};
       },
       {"filesystem.mounts[0].source: must not be the host's \"/\""}},
      {"mount source docker socket",
       [](SandboxSpec& s) {
         s.filesystem.mounts = {Mount{"/var/run/docker.sock", "/sandbox/docker.sock"}};
       },
       {"filesystem.mounts[0].source: must not be on or under /var/run (host kernel and runtime "
        "state)"}},
      {"mount target root",
       [](SandboxSpec& s) { s.filesystem.mounts = {MountAt("/")}; },
       {"filesystem.mounts[0].target: must not be \"/\""}},
      {"mount target proc",
       [](SandboxSpec& s) {
         s.filesystem.mounts = {MountAt("/data"), MountAt("/x"), MountAt("/proc/sys")};
       },
       {"filesystem.mounts[2].target: must not be on or under /proc (reserved)"}},
      {"mount target dev",
       [](SandboxSpec& s) { s.filesystem.mounts = {MountAt("/dev")}; },
       {"filesystem.mounts[0].target: must not be on or under /dev (reserved)"}},
      {"mount target sys",
       [](SandboxSpec& s) { s.filesystem.mounts = {MountAt("/sys/fs")}; },
       {"filesystem.mounts[0].target: must not be on or under /sys (reserved)"}},
      {"mount target control",
       [](SandboxSpec& s) { s.filesystem.mounts = {MountAt("/sandbox/control/policy")}; },
       {"filesystem.mounts[0].target: must not be on or under /sandbox/control (reserved)"}},
      {"mount target tools",
       [](SandboxSpec& s) { s.filesystem.mounts = {MountAt("/sandbox/tools")}; },
       {"filesystem.mounts[0].target: must not be on or under /sandbox/tools (reserved)"}},
      {"mount target parent of control",
       [](SandboxSpec& s) { s.filesystem.mounts = {MountAt("/sandbox")}; },
       {"filesystem.mounts[0].target: must not be a parent of /sandbox/control (reserved)"}},
      {"mount target workspace",
       [](SandboxSpec& s) { s.filesystem.mounts = {MountAt("/sandbox/workspace")}; },
       {"filesystem.mounts[0].target: must not be /sandbox/workspace (it comes from "
        "filesystem.workspace)"}},
      {"mount under a read-only workspace",
       [](SandboxSpec& s) {
         s.filesystem.workspace_mode = MountMode::kReadOnly;
         s.filesystem.mounts = {MountAt("/sandbox/workspace/vendor")};
         s.filesystem.tmpfs = {{.target = "/sandbox/workspace/build"}};
       },
       {"filesystem.mounts[0].target: must not be under /sandbox/workspace when the workspace is "
        "read-only (filesystem.workspaceMode ro, which risk class R0 derives): no mount point can "
        "be made in it",
        "filesystem.tmpfs[0].target: must not be under /sandbox/workspace when the workspace is "
        "read-only (filesystem.workspaceMode ro, which risk class R0 derives): no mount point can "
        "be made in it"}},
      {"mount target artifacts",
       [](SandboxSpec& s) { s.filesystem.mounts = {MountAt("/sandbox/artifacts/x")}; },
       {"filesystem.mounts[0].target: must not be on or under /sandbox/artifacts (only what the "
        "sandbox writes leaves)"}},
      {"mount target cache",
       [](SandboxSpec& s) { s.filesystem.mounts = {MountAt("/sandbox/cache")}; },
       {"filesystem.mounts[0].target: must not be on or under /sandbox/cache (it comes from "
        "cache.mode)"}},
      {"mount target not normalized",
       [](SandboxSpec& s) { s.filesystem.mounts = {MountAt("/sandbox/data/")}; },
       {"filesystem.mounts[0].target: must not end with \"/\""}},
      {"duplicate targets",
       [](SandboxSpec& s) {
         s.filesystem.mounts = {MountAt("/sandbox/data"), MountAt("/sandbox/data")};
         s.filesystem.tmpfs = {Tmpfs{"/sandbox/data"}};
       },
       {"filesystem.mounts[1].target: duplicate of filesystem.mounts[0].target",
        "filesystem.tmpfs[0].target: duplicate of filesystem.mounts[0].target"}},
      {"tmpfs override of the standard layout",
       [](SandboxSpec& s) {
         s.filesystem.tmpfs = {Tmpfs{"/sandbox/tmp"}, Tmpfs{"/sandbox/home"}};
       },
       {}},
      {"tmpfs bad",
       [](SandboxSpec& s) {
         s.filesystem.tmpfs = {Tmpfs{"/proc", 0, 0, true}};
       },
       {"filesystem.tmpfs[0].target: must not be on or under /proc (reserved)",
        "filesystem.tmpfs[0].sizeMb: must be > 0", "filesystem.tmpfs[0].inodes: must be > 0"}},
      {"too many mounts",
       [](SandboxSpec& s) {
         for (int i = 0; i < 65; ++i)
           s.filesystem.mounts.push_back(MountAt(fmt::format("/m{}", i)));
       },
       {"filesystem.mounts: must have at most 64 entries"}},
  });
}

SyscallRule Syscalls(std::vector<std::string> names, std::string action,
                     std::vector<SyscallArgCondition> args = {}) {
  return SyscallRule{std::move(names), std::move(args), std::move(action)};
}

TEST(ValidateTest, Process) {
  ExpectRules({
      {"no new privs",
       [](SandboxSpec& s) { s.process.no_new_privs = false; },
       {"process.noNewPrivs: must be true at level 2 and above"}},
      {"capabilities at level 2",
       [](SandboxSpec& s) { s.process.capabilities = {"CAP_NET_BIND_SERVICE"}; },
       {"process.capabilities: must be empty at level 2 and above"}},
      {"capabilities at level 1",
       [](SandboxSpec& s) {
         s.level = Level::kBasic;
         s.process.no_new_privs = false;
         s.process.capabilities = {"CAP_NET_BIND_SERVICE", "NET_RAW", "CAP_NET_BIND_SERVICE"};
       },
       {"process.capabilities[1]: unknown capability \"NET_RAW\" (names look like "
        "CAP_NET_BIND_SERVICE)",
        "process.capabilities[2]: duplicate capability CAP_NET_BIND_SERVICE"}},
      {"seccomp profile",
       [](SandboxSpec& s) { s.process.seccomp_profile = "strict"; },
       {"process.seccompProfile: \"strict\" is not one of: default"}},
      {"limits",
       [](SandboxSpec& s) {
         s.process.pids_limit = 0;
         s.process.open_files = 3;
         s.process.stack_mb = 2048;
       },
       {"process.pidsLimit: must be >= 1", "process.openFiles: must be >= 16",
        "process.stackMb: must be at most 1024"}},
      {"pids upper bound",
       [](SandboxSpec& s) { s.process.pids_limit = 4194305; },
       {"process.pidsLimit: must be at most 4194304"}},
      {"supervisor with native runtime",
       [](SandboxSpec& s) { s.process.supervisor = SupervisorMode::kPtrace; },
       {"process.supervisor: ptrace needs runtime traced (levels 1 and 2), not native"}},
      {"supervisor at level 3",
       [](SandboxSpec& s) {
         s.level = Level::kGvisor;
         s.runtime = Runtime::kGvisor;
         s.process.supervisor = SupervisorMode::kNotify;
       },
       {"process.supervisor: notify needs runtime traced (levels 1 and 2), not gvisor"}},
      {"traced with supervisor",
       [](SandboxSpec& s) {
         s.runtime = Runtime::kTraced;
         s.process.supervisor = SupervisorMode::kPtrace;
         s.process.syscalls = {Syscalls({"openat"}, "trace")};
       },
       {}},
      {"syscall rules",
       [](SandboxSpec& s) {
         s.runtime = Runtime::kTraced;
         s.process.supervisor = SupervisorMode::kNotify;
         s.process.syscalls = {
             Syscalls({"read"}, "allow"),
             Syscalls({}, "kill"),
             Syscalls({"", "not_a_syscall"}, "errno(EPERM)"),
             Syscalls({"openat"}, "deny"),
             Syscalls({"openat"}, "errno(ENOTANERRNO)"),
             Syscalls({"openat"}, "trace"),
             Syscalls({"openat"}, ""),
             Syscalls({"ioctl"}, "errno(ENOTTY)",
                      {{6, "eq", 1, 0}, {0, "gte", 1, 0}, {1, "masked_eq", 1, 0}, {2, "eq", 1, 4}}),
         };
       },
       {"process.syscalls[1].names: must list at least one syscall",
        "process.syscalls[2].names[0]: must not be empty",
        "process.syscalls[2].names[1]: unknown system call \"not_a_syscall\" on x86_64 and "
        "aarch64",
        "process.syscalls[3].action: \"deny\" is not one of: allow, errno(NAME), kill, trace, "
        "notify",
        "process.syscalls[4].action: unknown errno name in \"errno(ENOTANERRNO)\"",
        "process.syscalls[5].action: trace needs process.supervisor ptrace",
        "process.syscalls[6].action: required",
        "process.syscalls[7].args[0].index: must be between 0 and 5",
        "process.syscalls[7].args[1].op: \"gte\" is not one of: eq, ne, lt, le, gt, ge, masked_eq",
        "process.syscalls[7].args[2].mask: must be set (non-zero) with op masked_eq",
        "process.syscalls[7].args[3].mask: only used with op masked_eq"}},
      {"names of either architecture",
       [](SandboxSpec& s) {
         // open exists on x86_64 only, renameat2 on both; socketcall on neither (i386 only).
         s.process.syscalls = {Syscalls({"open", "renameat2", "socketcall"}, "errno(EPERM)")};
       },
       {"process.syscalls[0].names[2]: unknown system call \"socketcall\" on x86_64 and "
        "aarch64"}},
      {"notify needs notify supervisor",
       [](SandboxSpec& s) { s.process.syscalls = {Syscalls({"connect"}, "notify")}; },
       {"process.syscalls[0].action: notify needs process.supervisor notify"}},
      {"syscalls at level 0",
       [](SandboxSpec& s) {
         s.level = Level::kInterp;
         s.runtime = Runtime::kInterp;
         s.process.syscalls = {Syscalls({"read"}, "allow")};
       },
       {"process.syscalls: not used at level 0 (the interpreter makes no syscalls)"}},
      {"default action",
       [](SandboxSpec& s) { s.process.syscall_default_action = "errno(EACCES"; },
       {"process.syscallDefaultAction: \"errno(EACCES\" is not one of: allow, errno(NAME), kill, "
        "trace, notify"}},
      {"too many args",
       [](SandboxSpec& s) {
         s.process.syscalls = {
             Syscalls({"read"}, "allow", std::vector<SyscallArgCondition>(7, {0, "eq", 0, 0}))};
       },
       {"process.syscalls[0].args: must have at most 6 entries"}},
  });
}

TEST(ValidateTest, Resources) {
  ExpectRules({
      {"zeroes",
       [](SandboxSpec& s) {
         s.resources.cpu = 0;
         s.resources.memory_mb = 0;
         s.resources.disk_mb = -5;
         s.resources.command_timeout_seconds = 0;
         s.resources.run_timeout_seconds = 0;
         s.resources.cpu_time_seconds = -1;
         s.resources.max_log_bytes = 4095;
       },
       {"resources.cpu: must be > 0", "resources.memoryMb: must be > 0",
        "resources.diskMb: must be > 0", "resources.commandTimeoutSeconds: must be > 0",
        "resources.runTimeoutSeconds: must be > 0", "resources.cpuTimeSeconds: must be >= 0",
        "resources.maxLogBytes: must be >= 4096"}},
      {"upper bounds",
       [](SandboxSpec& s) {
         s.resources.cpu = 2000;
         s.resources.memory_mb = int64_t{1} << 40;
         s.resources.run_timeout_seconds = 31 * 24 * 3600;
         s.resources.max_log_bytes = int64_t{1} << 31;
       },
       {"resources.cpu: must be at most 1024", "resources.memoryMb: must be at most 1048576",
        "resources.runTimeoutSeconds: must be at most 2592000",
        "resources.maxLogBytes: must be at most 1073741824"}},
      {"nan cpu",
       [](SandboxSpec& s) { s.resources.cpu = std::nan(""); },
       {"resources.cpu: must be > 0"}},
      {"command longer than run",
       [](SandboxSpec& s) {
         s.resources.command_timeout_seconds = 600;
         s.resources.run_timeout_seconds = 300;
       },
       {"resources.commandTimeoutSeconds: must not exceed resources.runTimeoutSeconds (300)"}},
  });
}

TEST(ValidateTest, Network) {
  ExpectRules({
      {"egress at level 1",
       [](SandboxSpec& s) {
         s.level = Level::kBasic;
         s.network.profile = NetworkProfile::kOpen;
       },
       {"network.profile: open needs level 2 or above (levels 0 and 1 have no network)"}},
      {"allow hosts with none",
       [](SandboxSpec& s) { s.network.allow_hosts = {"example.com"}; },
       {"network.allowHosts: only used with profiles dependency-egress, repo-egress and "
        "restricted-http (profile is none)"}},
      // docs/network.md: restricted-http is httpRules plus allowHosts (any method, any path).
      {"allow hosts with restricted-http",
       [](SandboxSpec& s) {
         s.network.profile = NetworkProfile::kRestrictedHttp;
         s.network.allow_hosts = {"example.com"};
       },
       {}},
      // "@git-providers" extends repo-egress's list; it means nothing to the other profiles.
      {"git providers token with repo-egress",
       [](SandboxSpec& s) {
         s.network.profile = NetworkProfile::kRepoEgress;
         s.network.allow_hosts = {"@git-providers", "git.example.org"};
       },
       {}},
      {"git providers token with dependency-egress",
       [](SandboxSpec& s) {
         s.network.profile = NetworkProfile::kDependencyEgress;
         s.network.allow_hosts = {"@git-providers"};
       },
       {"network.allowHosts[0]: @git-providers is only used with profile repo-egress"}},
      {"http rules with dependency-egress",
       [](SandboxSpec& s) {
         s.network.profile = NetworkProfile::kDependencyEgress;
         s.network.http_rules = {HttpRule{"example.com", {}, {}}};
       },
       {"network.httpRules: only used with profile restricted-http (profile is "
        "dependency-egress)"}},
      {"host patterns",
       [](SandboxSpec& s) {
         s.network.profile = NetworkProfile::kRepoEgress;
         s.network.allow_hosts = {"github.com",        "github.com:443", "*.githubusercontent.com",
                                  "[2001:db8::1]:443", "*.com",          "exa mple.com",
                                  "Example.com",       "example.com:0",  "example.com:",
                                  "ex*ample.com",      "[::1",           "",
                                  "github.com",        "-a.com",         "a..b"};
       },
       {"network.allowHosts[4]: \"*.com\" is too broad (a wildcard needs at least two labels "
        "after \"*.\")",
        "network.allowHosts[5]: \"exa mple.com\" is not a host name (dot-separated labels of a-z, "
        "0-9 and '-')",
        "network.allowHosts[6]: \"Example.com\" must be lower case",
        "network.allowHosts[7]: \"example.com:0\" has an invalid port (1-65535)",
        "network.allowHosts[8]: \"example.com:\" has an empty port",
        "network.allowHosts[9]: \"ex*ample.com\": a wildcard may only be a leading \"*.\"",
        "network.allowHosts[10]: \"[::1\" lacks \"]\"", "network.allowHosts[11]: must not be empty",
        "network.allowHosts[12]: duplicate of network.allowHosts[0]",
        "network.allowHosts[13]: \"-a.com\" is not a host name (dot-separated labels of a-z, 0-9 "
        "and '-')",
        "network.allowHosts[14]: \"a..b\" is not a host name (dot-separated labels of a-z, 0-9 "
        "and '-')"}},
      {"http rules",
       [](SandboxSpec& s) {
         s.network.profile = NetworkProfile::kRestrictedHttp;
         s.network.http_rules = {
             HttpRule{"api.example.com:8080", {"GET", "POST"}, {"/v1/", "/health"}},
             HttpRule{"*.x", {"get", "GET", "GET"}, {"v1", "/a/../b", "/a b"}},
         };
       },
       {"network.httpRules[1].host: \"*.x\" is too broad (a wildcard needs at least two labels "
        "after \"*.\")",
        "network.httpRules[1].methods[0]: \"get\" is not one of: GET, HEAD, POST, PUT, PATCH, "
        "DELETE, OPTIONS",
        "network.httpRules[1].methods[2]: duplicate method GET",
        "network.httpRules[1].pathPrefixes[0]: must start with \"/\"",
        "network.httpRules[1].pathPrefixes[1]: must not contain \".\" or \"..\" segments",
        "network.httpRules[1].pathPrefixes[2]: must be a URL path (no spaces or control "
        "characters)"}},
      {"cidrs",
       [](SandboxSpec& s) {
         s.network.deny_cidrs = {"10.0.0.0/8",  "2001:db8::/32", "10.0.0.1/8",
                                 "10.0.0.0/33", "10.0.0.0",      "fe80::1/10",
                                 "10.0.0.0/8",  "10.0.0.0/08",   "x/1"};
       },
       {"network.denyCidrs[2]: \"10.0.0.1/8\" has host bits set (the network is 10.0.0.0/8)",
        "network.denyCidrs[3]: \"10.0.0.0/33\" is not a CIDR (IPv4 or IPv6 address/prefix)",
        "network.denyCidrs[4]: \"10.0.0.0\" is not a CIDR (IPv4 or IPv6 address/prefix)",
        "network.denyCidrs[5]: \"fe80::1/10\" has host bits set (the network is fe80::/10)",
        "network.denyCidrs[6]: duplicate CIDR 10.0.0.0/8",
        "network.denyCidrs[7]: \"10.0.0.0/08\" is not a CIDR (IPv4 or IPv6 address/prefix)",
        "network.denyCidrs[8]: \"x/1\" is not a CIDR (IPv4 or IPv6 address/prefix)"}},
  });
}

SecretLease Lease(std::string name, std::string mount_path = "") {
  return SecretLease{std::move(name), "sign the release", 300, std::move(mount_path)};
}

TEST(ValidateTest, Secrets) {
  ExpectRules({
      {"valid",
       [](SandboxSpec& s) { s.secrets.leases = {Lease("deploy/key", "/sandbox/secrets/key")}; },
       {}},
      {"lease fields",
       [](SandboxSpec& s) {
         s.secrets.leases = {SecretLease{"", "", 0, "relative"},
                             SecretLease{"bad name!", "a\nb", 86401, "/sandbox/workspace/key"}};
       },
       {"secrets.leases[0].name: required",
        "secrets.leases[0].purpose: required (say what the secret is for; it is audited)",
        "secrets.leases[0].ttlSeconds: must be > 0",
        "secrets.leases[0].mountPath: \"relative\" is not an absolute path",
        "secrets.leases[1].name: \"bad name!\" is not a secret name (1-128 letters, digits, '.', "
        "'_', '-' or '/', starting with a letter or digit)",
        "secrets.leases[1].purpose: must not contain control characters",
        "secrets.leases[1].ttlSeconds: must be at most 86400",
        "secrets.leases[1].mountPath: must not be on or under /sandbox/workspace (it is synced "
        "out)"}},
      {"duplicates and reserved mount paths",
       [](SandboxSpec& s) {
         s.secrets.leases = {Lease("a", "/sandbox/secrets/a"), Lease("a", "/sandbox/secrets/a"),
                             Lease("b", "/sandbox/artifacts/b")};
       },
       {"secrets.leases[1].name: duplicate of secrets.leases[0].name",
        "secrets.leases[1].mountPath: duplicate of secrets.leases[0].mountPath",
        "secrets.leases[2].mountPath: must not be on or under /sandbox/artifacts (only what the "
        "sandbox writes leaves)"}},
      {"leases need the artifact secret scan",
       [](SandboxSpec& s) {
         s.secrets.leases = {Lease("a")};
         s.artifacts.secret_scan = false;
       },
       {"artifacts.secretScan: must be true when secrets.leases is not empty"}},
  });
}

TEST(ValidateTest, CacheAndArtifacts) {
  ExpectRules({
      {"key without mode",
       [](SandboxSpec& s) { s.cache.key = "npm"; },
       {"cache.key: only used when cache.mode is ro or rw"}},
      {"mode without key",
       [](SandboxSpec& s) { s.cache.mode = CacheMode::kReadOnly; },
       {"cache.key: required when cache.mode is ro or rw"}},
      {"bad key",
       [](SandboxSpec& s) {
         s.cache.mode = CacheMode::kReadWrite;
         s.cache.key = "../npm";
       },
       {"cache.key: \"../npm\" is not a cache key (1-128 letters, digits, '.', '_' or '-')"}},
      {"artifact paths",
       [](SandboxSpec& s) {
         s.artifacts.paths = {
             "/sandbox/artifacts", "/sandbox/workspace/dist", "/etc",
             "sandbox/artifacts",  "/sandbox/artifacts",      "/sandbox/artifactsx"};
         s.artifacts.max_size_mb = 0;
       },
       {"artifacts.paths[2]: must be /sandbox/artifacts, /sandbox/workspace or under them",
        "artifacts.paths[3]: \"sandbox/artifacts\" is not an absolute path",
        "artifacts.paths[4]: duplicate path /sandbox/artifacts",
        "artifacts.paths[5]: must be /sandbox/artifacts, /sandbox/workspace or under them",
        "artifacts.maxSizeMb: must be > 0"}},
  });
}

TEST(ValidateTest, BinaryAllowances) {
  ExpectRules({
      {"threshold range",
       [](SandboxSpec& s) { s.artifacts.binary_threshold_kb = -1; },
       {"artifacts.binaryThresholdKb: must be >= 0"}},
      {"threshold zero is fine", [](SandboxSpec& s) { s.artifacts.binary_threshold_kb = 0; }, {}},
      {"allowances",
       [](SandboxSpec& s) {
         s.artifacts.paths = {"/sandbox/artifacts", "/sandbox/workspace/dist"};
         s.artifacts.allow_binaries = {
             {"/sandbox/artifacts/**/*.png", "charts"},
             {"/sandbox/workspace/dist/app", "the built binary"},
             {"/sandbox/workspace/src/app", "elsewhere"},
             {"/sandbox/artifacts", "the directory itself"},
             {"sandbox/artifacts/x", "relative"},
             {"/sandbox/artifacts/a**b", "bad double star"},
             {"/sandbox/artifacts/../etc/x", "dot dot"},
             {"/sandbox/artifacts/**/*.png", "again"},
             {"/sandbox/artifacts/y", ""},
             {"/sandbox/artifacts/z", "two\nlines"},
         };
       },
       {"artifacts.allowBinaries[2].path: \"/sandbox/workspace/src/app\" is not under any of "
        "artifacts.paths (nothing else is collected)",
        "artifacts.allowBinaries[3].path: \"/sandbox/artifacts\" is not under any of "
        "artifacts.paths (nothing else is collected)",
        "artifacts.allowBinaries[4].path: \"sandbox/artifacts/x\" is not an absolute path",
        "artifacts.allowBinaries[5].path: \"/sandbox/artifacts/a**b\": \"**\" must be a whole "
        "path segment",
        "artifacts.allowBinaries[6].path: must not contain \"..\"",
        "artifacts.allowBinaries[7].path: duplicate of artifacts.allowBinaries[0].path",
        "artifacts.allowBinaries[8].reason: required (it is recorded with every binary released "
        "under it)",
        "artifacts.allowBinaries[9].reason: must be one line without control characters"}},
  });
}

TEST(ValidateTest, CommandPolicy) {
  ExpectRules({
      {"valid rules",
       [](SandboxSpec& s) {
         s.command_policy.deny = {{"terraform-apply", {"terraform ** apply"}, "use CI"},
                                  {"team/no-push", {"git push", "git * push"}, ""}};
         s.command_policy.strict_shell = true;
       },
       {}},
      {"names",
       [](SandboxSpec& s) {
         s.command_policy.deny = {{"", {"a"}, ""},      {"-x", {"a"}, ""},
                                  {"Upper", {"a"}, ""}, {"dup", {"a"}, ""},
                                  {"dup", {"b"}, ""},   {std::string(65, 'a'), {"a"}, ""}};
       },
       {"commandPolicy.deny[0].name: required (refusals name their rule as spec/<name>)",
        "commandPolicy.deny[1].name: \"-x\" is not a rule name (1-64 of a-z, 0-9, '.', '_', "
        "'-', '/', starting with a letter or digit)",
        "commandPolicy.deny[2].name: \"Upper\" is not a rule name (1-64 of a-z, 0-9, '.', '_', "
        "'-', '/', starting with a letter or digit)",
        "commandPolicy.deny[4].name: duplicate of commandPolicy.deny[3].name",
        "commandPolicy.deny[5].name: \"" + std::string(64, 'a') +
            "...\" is not a rule name (1-64 of a-z, 0-9, '.', '_', '-', '/', starting with a "
            "letter or digit)"}},
      {"patterns",
       [](SandboxSpec& s) {
         s.command_policy.deny = {
             {"r",
              {"", "   ", "* x", "/usr/bin/terraform apply", "A=1 make", "make ; rm",
               "git push --force**", "x\ny", std::string(kMaxPatternBytes + 1, 'a')},
              std::string(201, 'r')},
             {"s", {}, ""}};
       },
       {"commandPolicy.deny[0].argv[0]: must not be empty",
        "commandPolicy.deny[0].argv[1]: must not be empty",
        "commandPolicy.deny[0].argv[2]: \"* x\": the first word must be a program name, without "
        "'*'",
        "commandPolicy.deny[0].argv[3]: \"/usr/bin/terraform apply\": the first word must be a "
        "program name without '/' (it is compared with the basename of argv[0])",
        "commandPolicy.deny[0].argv[4]: \"A=1 make\": the first word must be a program name, "
        "not a variable assignment (assignments before a command are not part of its argv)",
        "commandPolicy.deny[0].argv[5]: \"make ; rm\": \";\" is a shell operator; a pattern "
        "matches the argv of one command (shell strings are split into commands before "
        "matching, and pipes into a shell are refused by the built-in pipe-to-shell rules)",
        "commandPolicy.deny[0].argv[6]: \"git push --force**\": \"**\" must be a word of its "
        "own (it stands for any number of arguments)",
        "commandPolicy.deny[0].argv[7]: must be on one line",
        "commandPolicy.deny[0].argv[8]: must be at most 1024 bytes",
        "commandPolicy.deny[0].reason: must be at most 200 bytes",
        "commandPolicy.deny[1].argv: must have at least one pattern"}},
      {"too many patterns",
       [](SandboxSpec& s) {
         s.command_policy.deny = {{"r", std::vector<std::string>(17, "make"), ""}};
       },
       {"commandPolicy.deny[0].argv: must have at most 16 entries"}},
      {"too many rules",
       [](SandboxSpec& s) {
         for (int i = 0; i < 65; ++i) {
           s.command_policy.deny.push_back({fmt::format("r{}", i), {"make"}, ""});
         }
       },
       {"commandPolicy.deny: must have at most 64 entries"}},
  });
}

TEST(ValidateTest, ReportsEveryProblemAtOnce) {
  SandboxSpec spec;
  spec.resources.memory_mb = 0;
  spec.user.uid = 0;
  spec.filesystem.mounts = {MountAt("/proc")};
  spec.network.profile = NetworkProfile::kOpen;
  spec.risk_class = RiskClass::kR1;
  EXPECT_THAT(Problems(spec),
              ElementsAre("user.uid: must not be 0 (root)",
                          "filesystem.mounts[0].target: must not be on or under /proc (reserved)",
                          "resources.memoryMb: must be > 0",
                          "network.profile: open is looser than risk class R1 allows (at most "
                          "none)"));
}

TEST(RuntimeTest, DerivesFromLevel) {
  EXPECT_EQ(DeriveRuntime(Level::kInterp, SupervisorMode::kNone), Runtime::kInterp);
  EXPECT_EQ(DeriveRuntime(Level::kBasic, SupervisorMode::kNone), Runtime::kNative);
  EXPECT_EQ(DeriveRuntime(Level::kHardened, SupervisorMode::kNone), Runtime::kNative);
  EXPECT_EQ(DeriveRuntime(Level::kBasic, SupervisorMode::kPtrace), Runtime::kTraced);
  EXPECT_EQ(DeriveRuntime(Level::kHardened, SupervisorMode::kNotify), Runtime::kTraced);
  EXPECT_EQ(DeriveRuntime(Level::kGvisor, SupervisorMode::kNone), Runtime::kGvisor);
  EXPECT_EQ(DeriveRuntime(Level::kMicroVm, SupervisorMode::kNone), Runtime::kMicroVm);
  EXPECT_EQ(LevelOfRuntime(Runtime::kGvisor), Level::kGvisor);
  EXPECT_EQ(LevelOfRuntime(Runtime::kNative), std::nullopt);
}

TEST(KernelNamesTest, SyscallNumbersPerArchitecture) {
  EXPECT_EQ(SyscallNumber("x86_64", "openat"), 257);
  EXPECT_EQ(SyscallNumber("aarch64", "openat"), 56);
  EXPECT_EQ(SyscallNumber("x86_64", "open"), 2);
  EXPECT_EQ(SyscallNumber("aarch64", "open"), std::nullopt) << "aarch64 has only openat";
  EXPECT_EQ(SyscallNumber("x86_64", "socketcall"), std::nullopt) << "i386 only";
  EXPECT_EQ(SyscallNumber("riscv64", "openat"), std::nullopt) << "not an architecture we check";
  EXPECT_EQ(SyscallNumber("x86_64", "Open"), std::nullopt);
  EXPECT_TRUE(IsKnownSyscall("open"));
  EXPECT_FALSE(IsKnownSyscall("socketcall"));
}

}  // namespace
}  // namespace airlock::spec
