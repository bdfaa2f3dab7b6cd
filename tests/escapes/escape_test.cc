// Escape tests: each test is one attack from inside a level-2 sandbox, and the exact outcome
// airlock guarantees. After every sandbox the fixture checks that no process, cgroup, mount or
// namespace of it is left.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "common/files.h"
#include "common/unique_fd.h"
#include "engine/testing/sandbox_fixture.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "pathguard/path_guard.h"

namespace airlock::engine {
namespace {

// Every attack runs without a supervisor, under notify and under ptrace: a supervisor must
// never make the sandbox weaker, and attacks on the supervisor itself are at the end.
class EscapeTest : public testing::SupervisedSandboxTest {
 protected:
  // Runs airlock-probe ATTACK [ARG] in a fresh sandbox and returns its one-line verdict.
  std::string Probe(const std::string& attack, const std::string& arg = "") {
    std::vector<std::string> argv = {"/opt/probe", attack};
    if (!arg.empty()) argv.push_back(arg);
    last_ = RunOnce(WithProbe(TestSpec()), argv);
    std::string out = last_.stdout_preview;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    if (out.empty()) {
      // No verdict: the probe itself was stopped. Say how, so a failure is readable.
      return fmt::format("[{} signal {}] {}", ToString(last_.classification), last_.signal,
                         last_.stderr_preview);
    }
    return out;
  }
  CommandResult last_;

  // A sandbox that keeps its commands' raw logs in `logs`, for the redaction tests that read
  // them (as before, without the suite's supervisor mode); null (and a failure) on error.
  std::unique_ptr<NativeSandbox> CreateWithLogs(spec::SandboxSpec spec, const std::string& logs) {
    SandboxOptions options;
    options.spec = std::move(spec);
    options.tools_dir = AIRLOCK_TEST_TOOLS_DIR;
    options.cgroups = cgroups_.get();
    options.log_dir = logs;
    auto sandbox = NativeSandbox::Create(std::move(options));
    EXPECT_TRUE(sandbox.ok()) << sandbox.status();
    return sandbox.ok() ? std::move(*sandbox) : nullptr;
  }
};

bool IsSupervised(spec::SupervisorMode mode) { return mode != spec::SupervisorMode::kNone; }

// --- file system ---------------------------------------------------------------------------

TEST_P(EscapeTest, HostHomesAndKeysAreAbsent) {
  EXPECT_EQ(Probe("read", "/root/.ssh/id_rsa"), "read: ENOENT");
  EXPECT_EQ(Probe("read", "/home"), "read: ENOENT");
  EXPECT_EQ(Probe("read", "/var/run/docker.sock"), "read: ENOENT");
  EXPECT_EQ(Probe("read", "/run/dbus/system_bus_socket"), "read: ENOENT");
  EXPECT_EQ(Probe("read", "/tmp/.X11-unix/X0"), "read: ENOENT");
}

// Attack: read the host's password hashes, sudoers, SSH host keys, root's and users' homes.
// Expected: reading /etc/shadow, /etc/gshadow and /etc/sudoers fails (EACCES), /etc/ssh is
// empty, /root and /home do not exist.
TEST_P(EscapeTest, HostSecretsCannotBeRead) {
  CommandResult r = Shell(
      "for f in /etc/shadow /etc/gshadow /etc/sudoers; do cat $f >/dev/null 2>&1 && echo read $f; "
      "done; ls -A /etc/ssh | wc -l; ls /root /home 2>&1 | sed 's/.*cannot access/cannot access/'");
  EXPECT_EQ(r.stdout_preview,
            "0\ncannot access '/root': No such file or directory\n"
            "cannot access '/home': No such file or directory\n");
  EXPECT_EQ(Probe("read", "/etc/shadow"), "read: EACCES");
}

TEST_P(EscapeTest, HostProcIsNotVisible) {
  // PID 1 in the sandbox is airlock-init (not dumpable); the host's init is not visible at all.
  EXPECT_EQ(Probe("read", "/proc/1/environ"), "read: EACCES");
  CommandResult r = Shell("ls /proc | grep -c '^[0-9]'");
  EXPECT_LE(std::stoi(r.stdout_preview), 4) << "more processes visible than the sandbox's own";
}

// Attack: read the host kernel's secrets and maps from /proc: its memory image, the keys of its
// keyrings, timer and scheduler internals with kernel addresses, its symbol table, its build
// configuration (which mitigations it has), its boot command line. Each file the host has reads
// as empty in the sandbox.
TEST_P(EscapeTest, KernelInterfacesInProcReadEmpty) {
  std::string script = "for f in";
  std::string expected;
  for (const char* f : {"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
                        "/proc/kallsyms", "/proc/config.gz", "/proc/cmdline"}) {
    if (access(f, F_OK) != 0) continue;
    script += fmt::format(" {}", f);
    expected += fmt::format("{} 0\n", f);
  }
  ASSERT_FALSE(expected.empty()) << "the host has none of the files";
  script += "; do printf '%s %s\\n' $f $(cat $f 2>/dev/null | wc -c); done";
  CommandResult r = Shell(script);
  EXPECT_EQ(r.stdout_preview, expected) << r.stderr_preview;
}

TEST_P(EscapeTest, MountinfoShowsNoHostPaths) {
  // Only the configured mounts (the root file system's directories, the tools directory) may
  // name host paths; the sandbox's private state on the host must not appear. The tools
  // directory's line names where airlock is installed (a build directory in tests, which may
  // itself be under /tmp), so it is left out. The check runs inside the sandbox, on the whole
  // file (a preview of it may leave lines out): it prints the count of tools lines, then every
  // other line naming one of the host paths.
  CommandResult r = Shell(
      "grep -c ' /sandbox/tools ' /proc/self/mountinfo; grep -v ' /sandbox/tools ' "
      "/proc/self/mountinfo | grep -E ' (/run/airlock|/tmp/|/home|/root|/var/lib)'; true");
  ASSERT_EQ(r.classification, Classification::kOk) << r.stderr_preview;
  EXPECT_EQ(r.stdout_preview, "1\n") << r.stderr_preview;
}

TEST_P(EscapeTest, RootProcSysAndSysAreNotWritable) {
  EXPECT_EQ(Probe("write", "/usr/bin/evil"), "write: EROFS");
  EXPECT_EQ(Probe("write", "/etc/passwd"), "write: EROFS");
  EXPECT_EQ(Probe("write", "/evil"), "write: EROFS");
  EXPECT_EQ(Probe("write", "/proc/sys/kernel/hostname"), "write: EROFS");
  // Masked read-only where the kernel has it; absent otherwise.
  EXPECT_EQ(Probe("write", "/proc/sysrq-trigger"),
            access("/proc/sysrq-trigger", F_OK) == 0 ? "write: EROFS" : "write: ENOENT");
  EXPECT_EQ(Probe("write", "/sys/kernel/evil"), "write: ENOENT");  // no sysfs at all
}

TEST_P(EscapeTest, LandlockConfinesWritesEvenWhereModesAllow) {
  // /dev/shm and /sandbox/tmp are writable; the read-only root's tmpfs is not, and Landlock
  // refuses creating files anywhere outside the writable mounts.
  EXPECT_EQ(Probe("write", "/sandbox/tmp/ok"), "write: ok");
  EXPECT_EQ(Probe("write", "/dev/shm/ok"), "write: ok");
  EXPECT_EQ(Probe("write", "/dev/evil"), "write: EACCES");
}

TEST_P(EscapeTest, SetuidBinariesGainNothing) {
  // A setuid-root copy of id(1), mounted into the sandbox.
  char tmpl[] = "/tmp/airlock-suid-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  std::string id_copy = dir + "/id";
  ASSERT_EQ(system(fmt::format("cp /usr/bin/id {0} && chmod 4755 {0}", id_copy).c_str()), 0);
  spec::SandboxSpec s = TestSpec();
  s.filesystem.mounts.push_back({dir, "/opt/suid", spec::MountMode::kReadOnly});
  CommandResult r = RunOnce(s, {"/opt/suid/id"});
  EXPECT_EQ(r.stdout_preview, "uid=10001(sandbox) gid=10001(sandbox) groups=10001(sandbox)\n");
  // uid 0 does not even exist in the sandbox's user namespace.
  EXPECT_EQ(Probe("setuid-root"), "setuid-root: EINVAL");
  ASSERT_TRUE(RemoveTree(dir).ok());
}

TEST_P(EscapeTest, NoSetuidOrSetgidFileReachesTheHost) {
  // Attack: the workspace is a root-owned host directory, idmapped so that the sandbox user
  // owns it; files the sandbox creates there are root's on the host, and nosuid holds only for
  // the sandbox's own mount. A setuid copy of a shell made there would give any host user root.
  // Expected: every call that would set S_ISUID or S_ISGID answers EPERM (openat2 ENOSYS), and
  // no file in the workspace carries either bit afterwards.
  char tmpl[] = "/tmp/airlock-setid-XXXXXX";
  std::string ws = mkdtemp(tmpl);
  spec::SandboxSpec s = WithProbe(TestSpec());
  s.filesystem.workspace = ws;
  CommandResult r = RunOnce(s, {"/opt/probe", "setid-files", "/sandbox/workspace"});
  EXPECT_EQ(r.stdout_preview, "setid-files: ok\n") << r.stderr_preview;
  r = RunOnce(s, {"sh", "-c", "cp /bin/sh rootsh; chmod 6755 rootsh; install -m 4755 /bin/sh x"});
  EXPECT_EQ(r.exit_code, 1) << r.stdout_preview << r.stderr_preview;
  int set_id = 0, files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(ws)) {
    ++files;
    struct stat st {};
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0) << e.path();
    if (st.st_mode & (S_ISUID | S_ISGID)) {
      ++set_id;
      ADD_FAILURE() << e.path() << " has a set-id bit";
    }
  }
  EXPECT_GE(files, 3);  // plain, g, rootsh at least: the probe did run
  EXPECT_EQ(set_id, 0);
  ASSERT_TRUE(RemoveTree(ws).ok());
}

TEST_P(EscapeTest, LimitsOfAirlockInitCannotBeChanged) {
  // Attack: prlimit(1, RLIMIT_NOFILE, {0, 0}) from a command; the kernel allows it for any
  // process of the same uid, and airlock-init could then spawn nothing more. Expected: EPERM,
  // while a process's own limits stay settable.
  EXPECT_EQ(Probe("prlimit-init"), "prlimit-init: EPERM");
  EXPECT_EQ(Probe("setrlimit-self"), "setrlimit-self: ok");
}

TEST_P(EscapeTest, InotifyInstancesAreBoundedPerSandbox) {
  // Attack: open inotify instances until the kernel refuses. They are charged to the owner of
  // the sandbox's user namespace, root on the host, whose 128 instances the host's own services
  // share. Expected: the sandbox stops at its own limit of 16 (EMFILE), and it may make no user
  // namespace of its own.
  EXPECT_EQ(Probe("inotify-flood"), "16 instances\ninotify-flood: errno24");
  CommandResult r = RunOnce(TestSpec(), {"cat", "/proc/sys/user/max_user_namespaces"});
  EXPECT_EQ(r.stdout_preview, "0\n");
}

TEST_P(EscapeTest, HostWidePoolsCannotBeDrained) {
  // Attack: take a pool the whole host shares. Native AIO contexts come out of fs.aio-max-nr
  // (65,536 by default, for every process on the host); terminals of every devpts instance but
  // the host's own out of kernel.pty.max less its reserve (3,072). Expected: io_setup answers
  // ENOSYS (libaio's users fall back to threads), and a sandbox holds at most 16 terminals.
  EXPECT_EQ(Probe("io_setup"), "io_setup: ENOSYS");
  EXPECT_EQ(Probe("ptmx-hoard"), "16 terminals\nptmx-hoard: ENOSPC");
}

TEST_P(EscapeTest, ResourceLimitsAreNotInherited) {
  // Attack: run SCHED_FIFO when whatever started airlock allowed real-time priority (a service
  // manager's LimitRTPRIO), to take CPU time past the cgroup's quota. Expected: the command's
  // RLIMIT_RTPRIO and RLIMIT_NICE are 0, so EPERM, and its memlock limit is 8 MiB (or our hard
  // limit, if lower), whatever the caller's. The caller's real-time limit is raised first where
  // this process may (a container without CAP_SYS_RESOURCE may not), and its memlock soft limit
  // lowered, which any process may.
  struct rlimit saved_rtprio, saved_memlock;
  ASSERT_EQ(getrlimit(RLIMIT_RTPRIO, &saved_rtprio), 0);
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &saved_memlock), 0);
  struct rlimit raised = {50, 50};
  const bool rtprio_raised = setrlimit(RLIMIT_RTPRIO, &raised) == 0;
  struct rlimit lowered = {64 << 10, saved_memlock.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &lowered), 0);
  EXPECT_EQ(Probe("sched-fifo"), "sched-fifo: EPERM");
  const uint64_t memlock = std::min<uint64_t>(8 << 20, saved_memlock.rlim_max);
  EXPECT_EQ(RunOnce(TestSpec(), {"python3", "-c",
                                 "import resource as r; print(*(r.getrlimit(x) for x in "
                                 "(r.RLIMIT_RTPRIO, r.RLIMIT_NICE, r.RLIMIT_MEMLOCK)))"})
                .stdout_preview,
            fmt::format("(0, 0) (0, 0) ({}, {})\n", memlock, memlock));
  if (rtprio_raised) {
    ASSERT_EQ(setrlimit(RLIMIT_RTPRIO, &saved_rtprio), 0);
  }
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &saved_memlock), 0);
}

TEST_P(EscapeTest, NoCapabilitiesAtAll) {
  EXPECT_EQ(Probe("caps"),
            "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
            "CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\ncaps: ok");
}

TEST_P(EscapeTest, UidMapCannotBeRewritten) {
  EXPECT_EQ(Probe("uid-map-write"), "uid-map-write: EACCES");
}

TEST_P(EscapeTest, WorkspaceSymlinkCannotLeadTheHostOut) {
  // The sandbox plants symlinks in its workspace; the platform later reads the workspace (file
  // download, artifact collection) through the path guard, which must not follow them out.
  char tmpl[] = "/tmp/airlock-ws-XXXXXX";
  std::string ws = mkdtemp(tmpl);
  spec::SandboxSpec s = TestSpec();
  s.filesystem.workspace = ws;
  CommandResult r = RunOnce(s, {"sh", "-c",
                                "ln -s /etc etc && ln -s ../../../../etc/shadow up && "
                                "mkdir d && ln -s /proc/self/root d/root && echo ok"});
  ASSERT_EQ(r.stdout_preview, "ok\n") << r.stderr_preview;
  auto guard = PathGuard::Open(ws);
  ASSERT_TRUE(guard.ok());
  for (const char* path : {"etc/passwd", "up", "d/root/etc/passwd"}) {
    auto fd = guard->OpenPath(path, O_RDONLY);
    EXPECT_FALSE(fd.ok()) << path << " was followed out of the workspace";
    EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied)
        << path << ": " << fd.status();
  }
  ASSERT_TRUE(RemoveTree(ws).ok());
}

TEST_P(EscapeTest, PlantedSymlinkCannotRedirectALaterMount) {
  // Attack: a sandbox plants symlinks in its workspace (cache -> a host directory outside it,
  // runlink -> /run, which no spec may mount); a later spec mounts workspace/cache read-write and
  // workspace/runlink read-only. Expected: neither sandbox is created (InvalidArgument naming
  // the symlink, or /run), and the host directory is untouched.
  char ws_tmpl[] = "/tmp/airlock-plant-XXXXXX";
  char victim_tmpl[] = "/tmp/airlock-victim-XXXXXX";
  std::string ws = mkdtemp(ws_tmpl);
  std::string victim = mkdtemp(victim_tmpl);
  ASSERT_TRUE(WriteFileAtomic(victim + "/secret.conf", "original").ok());
  spec::SandboxSpec planting = TestSpec();
  planting.filesystem.workspace = ws;
  CommandResult r =
      RunOnce(planting,
              {"sh", "-c", fmt::format("ln -s {} cache && ln -s /run runlink && echo ok", victim)});
  ASSERT_EQ(r.stdout_preview, "ok\n") << r.stderr_preview;

  spec::SandboxSpec rw = TestSpec();
  rw.filesystem.mounts.push_back({ws + "/cache", "/opt/cache", spec::MountMode::kReadWrite});
  auto sandbox = TryCreate(rw);
  ASSERT_FALSE(sandbox.ok()) << "a mount followed the planted symlink";
  EXPECT_EQ(sandbox.status().code(), absl::StatusCode::kInvalidArgument) << sandbox.status();
  EXPECT_THAT(std::string(sandbox.status().message()),
              ::testing::HasSubstr("a component is a symbolic link"));
  spec::SandboxSpec ro = TestSpec();
  ro.filesystem.mounts.push_back({ws + "/runlink", "/opt/run", spec::MountMode::kReadOnly});
  sandbox = TryCreate(ro);
  ASSERT_FALSE(sandbox.ok()) << "/run was mounted through a symlink";
  EXPECT_EQ(sandbox.status().code(), absl::StatusCode::kInvalidArgument) << sandbox.status();
  // A ".." that leads under /run is caught on the path actually opened.
  ro.filesystem.mounts.back().source = ws + "/../../run";
  sandbox = TryCreate(ro);
  ASSERT_FALSE(sandbox.ok()) << "/run was mounted through ..";
  EXPECT_THAT(std::string(sandbox.status().message()), ::testing::HasSubstr("/run"));
  // The same for a root file system named through the planted link.
  spec::SandboxSpec rooted = TestSpec();
  rooted.rootfs = ws + "/cache";
  sandbox = TryCreate(rooted);
  ASSERT_FALSE(sandbox.ok()) << "a rootfs followed the planted symlink";
  EXPECT_THAT(std::string(sandbox.status().message()),
              ::testing::HasSubstr("a component is a symbolic link"));
  EXPECT_EQ(*ReadFile(victim + "/secret.conf"), "original");
  ASSERT_TRUE(RemoveTree(ws).ok());
  ASSERT_TRUE(RemoveTree(victim).ok());
}

// --- system calls --------------------------------------------------------------------------

TEST_P(EscapeTest, NamespaceCreationIsDenied) {
  EXPECT_EQ(Probe("unshare-user"), "unshare-user: EPERM");
  EXPECT_EQ(Probe("unshare-mount"), "unshare-mount: EPERM");
  EXPECT_EQ(Probe("clone-newuser"), "clone-newuser: EPERM");
  EXPECT_EQ(Probe("clone3"), "clone3: ENOSYS");
  EXPECT_EQ(Probe("setns"), "setns: EPERM");
  CommandResult r = Shell("unshare -U true; echo $?");
  EXPECT_EQ(r.stdout_preview, "1\n");
  EXPECT_NE(r.stderr_preview.find("Operation not permitted"), std::string::npos);
}

TEST_P(EscapeTest, MountFamilyIsDenied) {
  EXPECT_EQ(Probe("mount"), "mount: EPERM");
  EXPECT_EQ(Probe("chroot"), "chroot: EPERM");
  EXPECT_EQ(Probe("open_by_handle_at"), "open_by_handle_at: EPERM");
}

TEST_P(EscapeTest, KernelAttackSurfaceIsDenied) {
  EXPECT_EQ(Probe("ptrace"), "ptrace: EPERM");
  EXPECT_EQ(Probe("keyctl"), "keyctl: EPERM");
  EXPECT_EQ(Probe("add_key"), "add_key: EPERM");
  EXPECT_EQ(Probe("bpf"), "bpf: EPERM");
  EXPECT_EQ(Probe("io_uring_setup"), "io_uring_setup: ENOSYS");
  EXPECT_EQ(Probe("perf_event_open"), "perf_event_open: EPERM");
  EXPECT_EQ(Probe("userfaultfd"), "userfaultfd: EPERM");
  EXPECT_EQ(Probe("seccomp-listener"), "seccomp-listener: EPERM");
  // The rest of the always-denied set, each called once (request_key, umount2, pivot_root, the
  // kexec and module calls, reboot, swapon/swapoff, acct, quotactl, process_vm_readv,
  // io_uring_enter/register): every one fails with EPERM or ENOSYS, none is let through and none
  // kills the probe.
  EXPECT_EQ(Probe("denied-set"), "denied-set: ok");
}

TEST_P(EscapeTest, DangerousSocketFamiliesAreDenied) {
  EXPECT_EQ(Probe("socket-vsock"), "socket-vsock: EAFNOSUPPORT");
  EXPECT_EQ(Probe("socket-packet"), "socket-packet: EAFNOSUPPORT");
  EXPECT_EQ(Probe("socket-netlink-audit"), "socket-netlink-audit: EPERM");
  EXPECT_EQ(Probe("socket-netlink-route"), "socket-netlink-route: ok");
  EXPECT_EQ(Probe("socket-inet"), "socket-inet: ok");
  EXPECT_EQ(Probe("socket-inet6-udp"), "socket-inet6-udp: ok");
  // IP sockets are TCP and UDP: SOCK_PACKET (which the kernel turns into a packet socket) and
  // the protocols ordinary tools never use (whose modules a modular kernel would load) are
  // refused before any protocol code runs.
  for (const char* attack : {"socket-inet-packet", "socket-inet-sctp", "socket-inet6-seqpacket",
                             "socket-inet-udplite", "socket-inet-proto-high"}) {
    EXPECT_EQ(Probe(attack), std::string(attack) + ": EPROTONOSUPPORT");
  }
  // socketpair is the other way into a family's code: AF_TIPC makes working pairs where the
  // module loads, and AF_VSOCK runs its socket code before it answers EOPNOTSUPP. The filter
  // answers both before any family code runs.
  EXPECT_EQ(Probe("socketpair-tipc"), "socketpair-tipc: EAFNOSUPPORT");
  EXPECT_EQ(Probe("socketpair-vsock"), "socketpair-vsock: EAFNOSUPPORT");
  EXPECT_EQ(Probe("socketpair-unix"), "socketpair-unix: ok");
}

TEST_P(EscapeTest, TerminalInjectionIsDenied) {
  EXPECT_EQ(Probe("tiocsti"), "tiocsti: EPERM");
  EXPECT_EQ(Probe("tiocsti-high-bits"), "tiocsti-high-bits: EPERM");
  EXPECT_EQ(Probe("tioclinux"), "tioclinux: EPERM");
  EXPECT_EQ(Probe("tcgets"), "tcgets: ok");  // ordinary terminal ioctls still work
}

TEST_P(EscapeTest, ForeignArchitectureSyscallsAreKilled) {
  EXPECT_EQ(Probe("int80"), "[POLICY_BLOCKED signal 31] ");
  EXPECT_EQ(last_.classification, Classification::kPolicyBlocked);
  EXPECT_EQ(last_.signal, SIGSYS);
  ASSERT_EQ(last_.violations.size(), 1u);
  EXPECT_EQ(last_.violations[0].kind, "seccomp");
  EXPECT_EQ(Probe("x32"), "[POLICY_BLOCKED signal 31] ");
  EXPECT_EQ(last_.classification, Classification::kPolicyBlocked);
}

TEST_P(EscapeTest, PersonalityChangesAreKilled) {
  EXPECT_EQ(Probe("personality"), "[POLICY_BLOCKED signal 31] ");
  EXPECT_EQ(last_.classification, Classification::kPolicyBlocked);
}

TEST_P(EscapeTest, OnlyStdioIsInherited) {
  // Open descriptors of the engine must not leak in: open a few before the run.
  int leaked[3];
  for (int& fd : leaked) fd = dup(2);
  EXPECT_EQ(Probe("fds"), "fds: ok");
  for (int fd : leaked) close(fd);
}

// --- processes and resources ---------------------------------------------------------------

TEST_P(EscapeTest, KillAllKillsOnlySandboxProcesses) {
  pid_t outside = fork();
  if (outside == 0) {
    pause();
    _exit(0);
  }
  CommandResult r = Shell("sleep 100 & kill -9 -1; echo survived");
  int status;
  EXPECT_EQ(waitpid(outside, &status, WNOHANG), 0) << "a host process was killed from inside";
  kill(outside, SIGKILL);
  waitpid(outside, nullptr, 0);
  EXPECT_EQ(r.stdout_preview, "survived\n");  // kill(-1) spares the caller (and init)
}

TEST_P(EscapeTest, ForkBombHitsThePidsLimit) {
  spec::SandboxSpec s = TestSpec();
  s.process.pids_limit = 64;
  s.resources.command_timeout_seconds = 3;
  auto start = std::chrono::steady_clock::now();
  CommandResult r = RunOnce(s, {"bash", "-c", "f() { f | f & }; f; sleep 10"});
  EXPECT_EQ(r.classification, Classification::kResourceExhaustedPids)
      << ToString(r.classification) << " " << r.error << " " << r.syscalls.error;
  EXPECT_LE(r.usage.pids_peak, 64);
  // The host stayed responsive: the whole run took about the timeout, not more.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
}

TEST_P(EscapeTest, MemoryBombIsClassified) {
  spec::SandboxSpec s = TestSpec();
  s.resources.memory_mb = 64;
  CommandResult r = RunOnce(s, {"python3", "-c", "b = [bytearray(1 << 20) for _ in range(1000)]"});
  EXPECT_EQ(r.classification, Classification::kResourceExhaustedMemory);
  EXPECT_GE(r.usage.oom_kills, 1);
  EXPECT_EQ(r.signal, SIGKILL);
  // Memory filled without being mapped (a file in /sandbox/tmp, larger than the memory limit)
  // by a process smaller than airlock-init: still the command's OOM kill, and the sandbox
  // lives on.
  s = WithProbe(s);
  s.resources.memory_mb = 32;
  s.filesystem.tmp_size_mb = 128;
  auto sandbox = Create(s);
  ASSERT_NE(sandbox, nullptr);
  auto filled = sandbox->Exec({.argv = {"/opt/probe", "fill-tmp"}}, {});
  ASSERT_TRUE(filled.ok()) << filled.status();
  EXPECT_EQ(filled->classification, Classification::kResourceExhaustedMemory) << filled->error;
  EXPECT_EQ(filled->signal, SIGKILL);
  auto after = sandbox->Exec({.argv = {"sh", "-c", "rm /sandbox/tmp/fill && echo alive"}}, {});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->stdout_preview, "alive\n");
  DestroyAndCheckGone(std::move(sandbox));
}

// Attack: read the caller's environment (API keys, tokens) from inside the sandbox. Expected:
// a command sees exactly the minimal set, the spec's env and its own; a variable of the
// process that runs the engine (HOST_SECRET) is not there.
TEST_P(EscapeTest, EnvironmentHoldsOnlyTheAllowlist) {
  spec::SandboxSpec s = TestSpec();
  s.env["FROM_SPEC"] = "1";
  auto sandbox = Create(s);
  ASSERT_NE(sandbox, nullptr);
  setenv("HOST_SECRET", "do-not-leak", 1);
  auto r = sandbox->Exec({.argv = {"env"}, .env = {{"FROM_COMMAND", "2"}}}, {});
  unsetenv("HOST_SECRET");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stdout_preview,
            "AGENT_SANDBOX=true\nCI=true\nFROM_COMMAND=2\nFROM_SPEC=1\nHOME=/sandbox/home\n"
            "LANG=C.UTF-8\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
            "TMPDIR=/sandbox/tmp\n");
  DestroyAndCheckGone(std::move(sandbox));
}

TEST_P(EscapeTest, TimeoutKillsTheWholeTree) {
  spec::SandboxSpec s = TestSpec();
  auto sandbox = Create(s);
  ASSERT_NE(sandbox, nullptr);
  auto r =
      sandbox->Exec({.argv = {"sh", "-c", "sleep 1000 & sleep 1000 & echo partial; sleep 1000"},
                     .timeout = std::chrono::seconds(1)},
                    {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->classification, Classification::kCommandTimeout);
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->stdout_preview, "partial\n") << "partial output is kept";
  // Ended at the deadline, not by the sleeps (a supervised, sanitized tree on a busy host takes
  // a while to drain its exit stops).
  EXPECT_LT(r->duration_ms, 10000);
  auto ps = sandbox->Exec({.argv = {"sh", "-c", "pgrep -c sleep || true"}}, {});
  ASSERT_TRUE(ps.ok());
  EXPECT_EQ(ps->stdout_preview, "0\n") << "sleepers survived the timeout";
  DestroyAndCheckGone(std::move(sandbox));
}

TEST_P(EscapeTest, BackgroundDaemonDoesNotSurviveTheRun) {
  auto sandbox = Create(TestSpec());
  ASSERT_NE(sandbox, nullptr);
  auto r = sandbox->Exec(
      {.argv = {"sh", "-c", "setsid nohup sleep 1000 > /dev/null 2>&1 & echo ok"}}, {});
  ASSERT_TRUE(r.ok());
  auto ps = sandbox->Exec({.argv = {"sh", "-c", "pgrep -c sleep || true"}}, {});
  ASSERT_TRUE(ps.ok());
  EXPECT_EQ(ps->stdout_preview, "0\n");
  DestroyAndCheckGone(std::move(sandbox));  // and nothing of the sandbox is left on the host
}

// A line "Key:  N kB" of /proc/self/status, in KiB; -1 when absent.
int64_t StatusKiB(std::string_view key) {
  std::string status = ReadFile("/proc/self/status").value_or("");
  size_t at = status.find(fmt::format("\n{}:", key));
  if (at == std::string::npos) return -1;
  return std::strtoll(status.c_str() + at + key.size() + 2, nullptr, 10);
}

TEST_P(EscapeTest, HugeOutputIsTruncatedWithBoundedMemory) {
  // The peak RSS is reset to the current RSS first (clear_refs 5), so what is measured is this
  // run's peak, not an earlier test's (ru_maxrss never goes down within a process).
  {
    UniqueFd clear(::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC));
    ASSERT_TRUE(clear) << std::strerror(errno);
    ASSERT_TRUE(WriteAll(clear.get(), "5").ok());
  }
  const int64_t rss_before = StatusKiB("VmRSS");
  ASSERT_GT(rss_before, 0);
  spec::SandboxSpec s = TestSpec();
  s.resources.max_log_bytes = 1 << 20;
  // The 10 GB without a supervisor in the normal build; 2 GiB (32 times what the engine
  // may grow by) under each supervisor, whose drain path is the same, and in the sanitizer
  // build, which drains at 0.05-0.3 GB/s depending on the machine's load (the normal one at
  // 0.6). The command gets a timeout well above the default minute, under the test's 300 s.
#if defined(__SANITIZE_ADDRESS__)
  constexpr bool kSanitized = true;
#else
  constexpr bool kSanitized = false;
#endif
  const int64_t bytes =
      GetParam() == spec::SupervisorMode::kNone && !kSanitized ? 10'000'000'000 : 2LL << 30;
  s.resources.command_timeout_seconds = 270;
  CommandResult r = RunOnce(s, {"head", "-c", std::to_string(bytes), "/dev/zero"});
  const int64_t peak = StatusKiB("VmHWM");
  EXPECT_EQ(r.classification, Classification::kOk);
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.stdout_bytes, bytes);
  EXPECT_LT(peak - rss_before, 64 << 10) << "engine RSS grew by more than 64 MiB during the run";
}

TEST_P(EscapeTest, FillingTmpStopsAtItsSize) {
  spec::SandboxSpec s = TestSpec();
  s.filesystem.tmp_size_mb = 16;
  CommandResult r =
      RunOnce(s, {"sh", "-c",
                  "dd if=/dev/zero of=/sandbox/tmp/fill bs=1M count=100 2>&1 | "
                  "grep -o 'No space left on device'; du -m /sandbox/tmp/fill | cut -f1"});
  EXPECT_EQ(r.stdout_preview, "No space left on device\n16\n");
}

TEST_P(EscapeTest, RegisteredSecretNeverLeavesInOutput) {
  // The command prints the secret plainly, split across writes, URL-encoded and base64-encoded;
  // none of it may reach the previews, the kept raw log, the report for the model (which quotes
  // the command line, where the secret is too) or any other field of the result.
  const std::string secret = "s3cr3t-Value/With+Chars";
  char tmpl[] = "/tmp/airlock-logs-XXXXXX";
  std::string logs = mkdtemp(tmpl);
  auto sandbox = CreateWithLogs(TestSpec(), logs);
  ASSERT_NE(sandbox, nullptr);
  std::string script = fmt::format(
      "printf '%s' 's3cr3t-Va'; sleep 0.1; printf 'lue/With+Chars\\n'; "
      "echo 'token in url: https://x/?k=s3cr3t-Value%2FWith%2BChars'; "
      "printf 'Authorization: Basic %s\\n' $(printf 'user:{}' | base64 -w0) >&2; "
      "head -c 100000 /dev/zero | tr '\\0' x; echo {}",
      secret, secret);
  auto r = sandbox->Exec({.argv = {"sh", "-c", script}}, {.secrets = {secret}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->classification, Classification::kOk) << r->stderr_preview;
  std::string log = ReadFile(r->raw_log).value_or("");
  EXPECT_GT(log.size(), 100000u);
  for (const std::string& where : {r->stdout_preview, r->stderr_preview, log}) {
    EXPECT_EQ(where.find("s3cr3t"), std::string::npos) << where.substr(0, 400);
    EXPECT_EQ(where.find("dXNlcjpzM2NyM3Qt"), std::string::npos) << "base64 form leaked";
  }
  EXPECT_NE(r->stdout_preview.find("[REDACTED:secret]"), std::string::npos) << r->stdout_preview;
  // A failing command with the secret in its command line: the report for the model quotes the
  // command and the failing lines, and no field of the result holds the secret.
  auto failed = sandbox->Exec({.argv = {"sh", "-c", fmt::format("echo {} >&2; exit 3", secret)}},
                              {.secrets = {secret}});
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->exit_code, 3);
  std::string all = ToJson(*failed).dump();
  EXPECT_EQ(all.find(secret), std::string::npos) << all;
  EXPECT_EQ(failed->report.find(secret), std::string::npos) << failed->report;
  EXPECT_NE(failed->report.find("$ sh -c 'echo [REDACTED:secret]"), std::string::npos)
      << failed->report;
  // The secret and a detected token each split by a line on the other stream: the raw log, which
  // holds both streams in the order they came, redacts each stream on its own.
  auto split = sandbox->Exec(
      {.argv = {"sh", "-c",
                "printf 's3cr3t-Va'; echo E1 >&2; printf 'lue/With+Chars\\n'; "
                "printf 'ghp_aBcDeFgHiJkLm'; echo E2 >&2; printf 'NoPqRsTuVwXyZ0123456789\\n'; "
                "echo 'error: login failed' >&2; exit 1"}},
      {.secrets = {secret}});
  ASSERT_TRUE(split.ok()) << split.status();
  std::string split_log = ReadFile(split->raw_log).value_or("");
  EXPECT_NE(split_log.find("E1"), std::string::npos) << split_log;
  for (const char* part : {"s3cr3t", "lue/With", "ghp_aBcD", "NoPqRsTu"}) {
    EXPECT_EQ(split_log.find(part), std::string::npos) << part << " in " << split_log;
    // (The command line holds the parts by construction; what the command printed must not.)
    for (const std::string& where : {split->stdout_preview, split->stderr_preview,
                                     fmt::format("{}", fmt::join(split->key_lines, "\n"))}) {
      EXPECT_EQ(where.find(part), std::string::npos) << part << " in " << where;
    }
  }
  EXPECT_NE(split_log.find("[REDACTED:secret]"), std::string::npos) << split_log;
  EXPECT_NE(split_log.find("[REDACTED:github_token]"), std::string::npos) << split_log;
  DestroyAndCheckGone(std::move(sandbox));
  ASSERT_TRUE(RemoveTree(logs).ok());
}

// Attack: carry a registered secret and a detected token out through what the supervisor reports
// instead of the output: as a program's arguments, an opened path and a denied call's path.
// Expected: the supervisor saw the calls (notify and ptrace), and neither the secret, nor its
// lowercase form, nor the token is in any field of the result or in an event streamed while the
// command ran; the redacted forms stand in their place.
TEST_P(EscapeTest, RegisteredSecretNeverLeavesThroughTheSyscallReport) {
  const std::string secret = "Hunter2SecretValue99";
  const std::string token = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789";
  spec::SandboxSpec s = TestSpec();
  if (IsSupervised(supervisor_)) {
    const std::string route = supervisor_ == spec::SupervisorMode::kPtrace ? "trace" : "notify";
    s.process.syscalls = {{{"execve", "openat"}, {}, route},
                          {{"mkdir", "mkdirat"}, {}, "errno(EACCES)"}};
  }
  BoundedSyscallEventQueue events(1000);
  CommandResult r = RunOnce(
      s,
      {"sh", "-c", "cat /tmp/$0 2>/dev/null; mkdir /tmp/$0 2>/dev/null; /bin/true $0 $1; exit 0",
       secret, token},
      {.secrets = {secret}, .syscall_events = &events});
  std::string all = ToJson(r).dump();
  for (const SyscallEvent& e : events.Drain()) all += ToJson(e).dump();
  for (const std::string& part : {secret, std::string("hunter2secretvalue99"), token.substr(4)}) {
    EXPECT_EQ(all.find(part), std::string::npos) << part << " in " << all;
  }
  if (IsSupervised(supervisor_)) {
    EXPECT_EQ(r.syscalls.denied, 1) << all;
    EXPECT_NE(all.find("/tmp/[REDACTED:secret]"), std::string::npos) << all;
    EXPECT_NE(all.find("[REDACTED:github_token]"), std::string::npos) << all;
  }
}

// Attack: print a registered secret exactly where a limit cuts the output, so that the cut
// leaves its first bytes on the kept side: at maxLogBytes in the raw log, and at the end of a
// preview's window with a secret longer than the window's context (4 KiB); then a detected
// token (no registration) at maxLogBytes. Expected: no part of any of them reaches the log or
// the previews; the cut part is a [REDACTED:secret] marker, which at the log's cap takes the run
// of token characters there (512 bytes at most: here the secret and the padding before it).
TEST_P(EscapeTest, ASecretCutByALimitLeavesNoPartInLogOrPreview) {
  const std::string secret = "s3cr3t-Value/With+Chars";
  const std::string long_secret = "L0ng-" + std::string(6000, 'q') + "-end";
  char tmpl[] = "/tmp/airlock-logs-XXXXXX";
  std::string logs = mkdtemp(tmpl);
  spec::SandboxSpec spec = TestSpec();
  spec.resources.max_log_bytes = 4096;
  auto sandbox = CreateWithLogs(spec, logs);
  ASSERT_NE(sandbox, nullptr);
  // The log keeps 4096 bytes: 4086 of padding and the secret's first ten.
  std::string at_cap = fmt::format(
      "head -c 4086 /dev/zero | tr '\\0' x; printf '%s' '{}'; head -c 20000 /dev/zero | tr "
      "'\\0' y",
      secret);
  auto r = sandbox->Exec({.argv = {"sh", "-c", at_cap}}, {.secrets = {secret}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->truncated);
  std::string log = ReadFile(r->raw_log).value_or("");
  EXPECT_EQ(log, std::string(4096 - 512, 'x') + "[REDACTED:secret]") << log.substr(3500);
  // A GitHub token cut after 25 of its 40 characters, after a line of padding.
  r = sandbox->Exec({.argv = {"sh", "-c",
                              "head -c 4070 /dev/zero | tr '\\0' x; echo; "
                              "printf 'ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789\\n'; "
                              "head -c 20000 /dev/zero | tr '\\0' y"}},
                    {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->truncated);
  log = ReadFile(r->raw_log).value_or("");
  EXPECT_EQ(log, std::string(4070, 'x') + "\n[REDACTED:secret]") << log.substr(4000);
  // The preview's head window (2 KiB shown, 4 KiB of context) ends inside the long secret.
  std::string at_window = fmt::format(
      "head -c 1000 /dev/zero | tr '\\0' z >&2; printf '%s' '{}' >&2; head -c 20000 /dev/zero | "
      "tr '\\0' w >&2",
      long_secret);
  r = sandbox->Exec({.argv = {"sh", "-c", at_window}}, {.secrets = {long_secret}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stderr_preview.find("L0ng"), std::string::npos) << r->stderr_preview.substr(0, 1200);
  EXPECT_EQ(r->stderr_preview.find("qqq"), std::string::npos) << r->stderr_preview.substr(0, 1200);
  EXPECT_TRUE(r->stderr_preview.starts_with(std::string(1000, 'z') + "[REDACTED:secret]"))
      << r->stderr_preview.substr(0, 1200);
  DestroyAndCheckGone(std::move(sandbox));
  ASSERT_TRUE(RemoveTree(logs).ok());
}

TEST_P(EscapeTest, DetectedCredentialsAreRedactedWithoutRegistration) {
  CommandResult r = Shell(
      "echo AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY; "
      "echo ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789");
  EXPECT_EQ(r.stdout_preview.find("wJalrXUtnFEMI"), std::string::npos) << r.stdout_preview;
  EXPECT_EQ(r.stdout_preview.find("ghp_aBcD"), std::string::npos) << r.stdout_preview;
}

// --- the syscall supervisor (cases 43-48 of the escape list; 49 and 50 in tests/cli) --------

TEST_P(EscapeTest, SupervisorCannotBeTracedOrWrittenTo) {
  // Nothing of the host is visible or reachable: tracing or writing into any process is denied,
  // siblings included (whose tracer, under ptrace, is the supervisor).
  EXPECT_EQ(Probe("ptrace"), "ptrace: EPERM");
  EXPECT_EQ(Probe("process_vm_writev"), "process_vm_writev: EPERM");
}

TEST_P(EscapeTest, KillAllLeavesTheSupervisorWorking) {
  auto sandbox = Create(WithProbe(TestSpec()));
  ASSERT_NE(sandbox, nullptr);
  auto killer = sandbox->Exec({.argv = {"sh", "-c", "sleep 100 & kill -9 -1; echo survived"}}, {});
  ASSERT_TRUE(killer.ok());
  EXPECT_EQ(killer->stdout_preview, "survived\n");
  auto after = sandbox->Exec({.argv = {"/usr/bin/cat", "/etc/hostname"}}, {});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->stdout_preview, "sandbox\n");
  if (IsSupervised(supervisor_)) {
    ASSERT_FALSE(after->syscalls.execs.empty()) << "the supervisor stopped supervising";
    EXPECT_EQ(after->syscalls.execs[0].path, "/usr/bin/cat");
    EXPECT_EQ(after->syscalls.error, "");
  }
  DestroyAndCheckGone(std::move(sandbox));
}

TEST_P(EscapeTest, CloneUntracedCannotEscapeTheTracer) {
  // Under ptrace a CLONE_UNTRACED child would run untraced: refused. Elsewhere the flag changes
  // nothing (filters are inherited) and is allowed.
  EXPECT_EQ(Probe("clone-untraced"), supervisor_ == spec::SupervisorMode::kPtrace
                                         ? "clone-untraced: EPERM"
                                         : "clone-untraced: ok");
}

TEST_P(EscapeTest, ForkStormStaysSupervised) {
  CommandResult r = Shell("for i in $(seq 60); do /usr/bin/true & done; wait; echo done");
  EXPECT_EQ(r.stdout_preview, "done\n");
  if (!IsSupervised(supervisor_)) return;
  int64_t execs = 0;
  for (const SyscallCount& c : r.syscalls.counts) execs += c.name == "execve" ? c.count : 0;
  EXPECT_EQ(execs, 62) << "every child's exec went through the supervisor (sh, seq, 60 trues)";
  EXPECT_EQ(r.syscalls.execs.size(), SyscallReport::kMaxExecs) << "the list stays bounded";
  EXPECT_GT(r.syscalls.dropped, 0);
}

TEST_P(EscapeTest, PointerRaceCannotWidenWhatLandlockAllows) {
  // openat is routed to the supervisor (the fixture's default rules); the path changes under it.
  EXPECT_EQ(Probe("toctou-open"), "toctou-open: ok");
}

TEST_P(EscapeTest, NotificationFloodStillMeetsTheDeadline) {
  if (!IsSupervised(supervisor_)) GTEST_SKIP() << "no supervisor to flood";
  spec::SandboxSpec s = WithProbe(TestSpec());
  s.runtime = spec::Runtime::kTraced;
  s.process.supervisor = supervisor_;
  s.process.syscalls = {{{"getppid"}, {}, "errno(EPERM)"}};  // every call through the supervisor
  auto sandbox = Create(s);
  ASSERT_NE(sandbox, nullptr);
  auto start = std::chrono::steady_clock::now();
  auto r =
      sandbox->Exec({.argv = {"/opt/probe", "flood", "8"}, .timeout = std::chrono::seconds(2)}, {});
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->classification, Classification::kCommandTimeout);
  EXPECT_LT(took, std::chrono::seconds(10)) << "the deadline slipped under the flood";
  EXPECT_GT(r->syscalls.denied, 1000);
  EXPECT_EQ(r->syscalls.denied_calls.size(), SyscallReport::kMaxDenied);
  EXPECT_LE(ToJson(r->syscalls).dump().size(), 64u << 10) << "the report must stay bounded";
  // The sandbox is still usable and still supervised.
  auto after = sandbox->Exec({.argv = {"/opt/probe", "fds"}}, {});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->stdout_preview, "fds: ok\n");
  DestroyAndCheckGone(std::move(sandbox));
}

// Attack: mount, an always-denied call, under a policy that answers it with its own errno or a
// kill. Expected, under every supervisor mode alike: a kill that ends the command
// (POLICY_BLOCKED, SIGSYS), and the rule's errno (ENOSYS; under notify, where the profile answers
// first, only EPERM may be asked for, and another errno is refused when the sandbox is made).
// Routed to a supervisor, such a rule met the profile's EPERM, which outranks a routed call:
// mount got EPERM and the kill never came.
TEST_P(EscapeTest, RulesOnAlwaysDeniedCallsActUnderEverySupervisor) {
  spec::SandboxSpec s = WithProbe(TestSpec());
  s.process.syscalls = {{{"mount"}, {}, "errno(ENOSYS)"}};
  if (supervisor_ == spec::SupervisorMode::kNotify) {
    auto refused = TryCreate(s);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().ToString().find("process.syscalls[0].names[0]: mount is always "
                                               "denied, and under the notify supervisor"),
              std::string::npos)
        << refused.status();
  } else {
    EXPECT_EQ(RunOnce(s, {"/opt/probe", "mount"}).stdout_preview, "mount: ENOSYS\n");
  }
  s.process.syscalls = {{{"mount"}, {}, "kill"}};
  CommandResult r = RunOnce(s, {"/opt/probe", "mount"});
  EXPECT_EQ(r.classification, Classification::kPolicyBlocked) << r.stdout_preview;
  EXPECT_EQ(r.signal, SIGSYS);
  EXPECT_EQ(r.stdout_preview, "");
  // The same for a kill rule on a call the profile refuses only with some arguments: routed, the
  // refused arguments met the profile's EPERM and the kill never came. (The profile of such a
  // sandbox kills them itself.)
  for (const auto& [names, attack] :
       {std::pair<std::vector<std::string>, const char*>{{"unshare"}, "unshare-user"},
        {{"socket"}, "socket-packet"},
        {{"clone", "fork", "vfork"}, "clone-newuser"}}) {
    s.process.syscalls = {{names, {}, "kill"}};
    r = RunOnce(s, {"/opt/probe", attack});
    EXPECT_EQ(r.classification, Classification::kPolicyBlocked) << attack << r.stdout_preview;
    EXPECT_EQ(r.signal, SIGSYS) << attack;
    EXPECT_EQ(r.stdout_preview, "") << attack;
  }
  // The arguments the profile allows still go to the supervisor, which kills the command's
  // whole tree and records the call, even when a child makes it. Without a supervisor the kernel
  // kills the child alone, and its parent goes on.
  s.process.syscalls = {{{"socket"}, {}, "kill"}};
  r = RunOnce(s, {"sh", "-c", "/opt/probe socket-inet; echo after=$?"});
  if (IsSupervised(supervisor_)) {
    EXPECT_EQ(r.classification, Classification::kPolicyBlocked) << r.stdout_preview;
    EXPECT_TRUE(r.syscalls.killed);
    EXPECT_EQ(r.stdout_preview, "");
    ASSERT_FALSE(r.syscalls.denied_calls.empty());
    EXPECT_EQ(r.syscalls.denied_calls[0].syscall, "socket");
  } else {
    EXPECT_EQ(r.stdout_preview, "after=159\n");
  }
}

TEST_P(EscapeTest, ProcessesDyingMidNotificationAreNotActedOn) {
  if (!IsSupervised(supervisor_)) GTEST_SKIP() << "no supervisor";
  spec::SandboxSpec s = WithProbe(TestSpec());
  s.runtime = spec::Runtime::kTraced;
  s.process.supervisor = supervisor_;
  s.process.syscalls = {
      {{"getppid"}, {}, supervisor_ == spec::SupervisorMode::kPtrace ? "trace" : "notify"}};
  CommandResult r = RunOnce(s, {"/opt/probe", "routed-then-die", "300"});
  EXPECT_EQ(r.stdout_preview, "routed-then-die: ok\n");
  EXPECT_EQ(r.classification, Classification::kOk);
  EXPECT_EQ(r.syscalls.error, "") << "the supervisor failed on a vanished process";
  EXPECT_FALSE(r.syscalls.killed);
}

INSTANTIATE_TEST_SUITE_P(Supervisors, EscapeTest, testing::SupervisorModes(),
                         testing::SupervisorModeName);

}  // namespace
}  // namespace airlock::engine
