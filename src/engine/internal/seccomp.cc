#include "engine/internal/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/files.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "fmt/format.h"

namespace airlock::engine::internal {
namespace {

// Everything ordinary programs (shells, coreutils, python3, gcc, git, node, make, JVMs) use.
// Names unknown on an architecture are skipped.
constexpr const char* kAllowed[] = {
    // files and descriptors
    "read",
    "write",
    "readv",
    "writev",
    "pread64",
    "pwrite64",
    "preadv",
    "pwritev",
    "preadv2",
    "pwritev2",
    "close",
    "close_range",
    "lseek",
    "_llseek",
    "dup",
    "dup2",
    "dup3",
    "fcntl",
    "fcntl64",
    "flock",
    "fsync",
    "fdatasync",
    "sync",
    "syncfs",
    "sync_file_range",
    "truncate",
    "ftruncate",
    "fallocate",
    "fadvise64",
    "readahead",
    "sendfile",
    "sendfile64",
    "splice",
    "tee",
    "vmsplice",
    "copy_file_range",
    "pipe",
    "pipe2",
    "stat",
    "fstat",
    "lstat",
    "newfstatat",
    "fstatat64",
    "statx",
    "statfs",
    "fstatfs",
    "statfs64",
    "fstatfs64",
    "ustat",
    "access",
    "faccessat",
    "faccessat2",
    "readlink",
    "readlinkat",
    "getdents",
    "getdents64",
    "getcwd",
    "chdir",
    "fchdir",
    "mkdir",
    "mkdirat",
    "rmdir",
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "unlink",
    "unlinkat",
    "symlink",
    "symlinkat",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "umask",
    "utime",
    "utimes",
    "utimensat",
    "futimesat",
    "getxattr",
    "lgetxattr",
    "fgetxattr",
    "listxattr",
    "llistxattr",
    "flistxattr",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "inotify_init",
    "inotify_init1",
    "inotify_add_watch",
    "inotify_rm_watch",
    "select",
    "_newselect",
    "pselect6",
    "poll",
    "ppoll",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "eventfd",
    "eventfd2",
    "signalfd",
    "signalfd4",
    "timerfd_create",
    "timerfd_settime",
    "timerfd_gettime",
    "memfd_create",
    "cachestat",
    // memory
    "mmap",
    "mmap2",
    "munmap",
    "mprotect",
    "mremap",
    "msync",
    "mincore",
    "madvise",
    "mlock",
    "mlock2",
    "munlock",
    "mlockall",
    "munlockall",
    "brk",
    "membarrier",
    "remap_file_pages",
    "get_mempolicy",
    "set_mempolicy",
    "mbind",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "map_shadow_stack",
    "mseal",
    // processes and threads (clone, unshare and personality are filtered by argument below)
    "fork",
    "vfork",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "wait4",
    "waitid",
    "waitpid",
    "kill",
    "tkill",
    "tgkill",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigpending",
    "rt_sigtimedwait",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    "sigaltstack",
    "sigreturn",
    "restart_syscall",
    "pause",
    "alarm",
    "getpid",
    "getppid",
    "gettid",
    "getpgid",
    "getpgrp",
    "setpgid",
    "getsid",
    "setsid",
    "getuid",
    "geteuid",
    "getgid",
    "getegid",
    "getresuid",
    "getresgid",
    "getgroups",
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setgroups",
    "setfsuid",
    "setfsgid",
    "capget",
    "capset",
    "prctl",
    "arch_prctl",
    "set_tid_address",
    "set_robust_list",
    "get_robust_list",
    "futex",
    "futex_waitv",
    "futex_wake",
    "futex_wait",
    "futex_requeue",
    "rseq",
    "sched_yield",
    "sched_getaffinity",
    "sched_setaffinity",
    "sched_getparam",
    "sched_setparam",
    "sched_getscheduler",
    "sched_setscheduler",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_rr_get_interval",
    "sched_getattr",
    "sched_setattr",
    "getpriority",
    "setpriority",
    "getrlimit",
    "setrlimit",
    "ugetrlimit",
    "getrusage",
    "times",
    "uname",
    "sysinfo",
    "getrandom",
    "getcpu",
    "nanosleep",
    "clock_nanosleep",
    "clock_gettime",
    "clock_getres",
    "gettimeofday",
    "time",
    "timer_create",
    "timer_settime",
    "timer_gettime",
    "timer_getoverrun",
    "timer_delete",
    "setitimer",
    "getitimer",
    "ioprio_get",
    "ioprio_set",
    "pidfd_open",
    "pidfd_send_signal",
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    // sockets (socket and socketpair are filtered by family below)
    "bind",
    "listen",
    "accept",
    "accept4",
    "connect",
    "getsockname",
    "getpeername",
    "sendto",
    "recvfrom",
    "sendmsg",
    "recvmsg",
    "sendmmsg",
    "recvmmsg",
    "shutdown",
    "setsockopt",
    "getsockopt",
    // System V and POSIX IPC (private to the sandbox's IPC namespace)
    "shmget",
    "shmat",
    "shmdt",
    "shmctl",
    "semget",
    "semop",
    "semtimedop",
    "semctl",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
};

// Denied with EPERM whatever the spec says: escaping the namespaces, reaching the kernel's
// shared state, observing or tampering with other processes.
constexpr const char* kDeniedEperm[] = {
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "pidfd_getfd",
    "kcmp",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "statmount",
    "listmount",
    "setns",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "quotactl_fd",
    "open_by_handle_at",
    "name_to_handle_at",
    "lookup_dcookie",
    "syslog",
    "vhangup",
    "iopl",
    "ioperm",
    "modify_ldt",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "stime",
    "sethostname",
    "setdomainname",
    "fanotify_init",
    "nfsservctl",
    "uselib",
    "create_module",
    "get_kernel_syms",
    "query_module",
    "_sysctl",
    "migrate_pages",
    "move_pages",
    "vm86",
    "vm86old",
    "memfd_secret",
    "lsm_get_self_attr",
    "lsm_set_self_attr",
    "lsm_list_modules",
};

// Denied with ENOSYS so that libraries fall back: clone3 and openat2 (their flags and mode live
// in memory a filter cannot read; libraries then use clone and openat, whose arguments it can),
// io_uring (its operations bypass seccomp entirely), and native AIO, whose contexts come out of
// one pool for the whole host (fs.aio-max-nr): a sandbox that took it all would fail every
// io_setup on the host, databases' and QEMU's among them (libaio's users fall back to threads).
constexpr const char* kDeniedEnosys[] = {
    "clone3",     "openat2",   "io_uring_setup", "io_uring_enter", "io_uring_register", "io_setup",
    "io_destroy", "io_submit", "io_getevents",   "io_pgetevents",  "io_cancel",
};

// Namespace flags that clone/unshare may not use.
constexpr uint64_t kCloneNamespaceFlags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS |
                                          CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
                                          CLONE_NEWNET;
constexpr uint64_t kUnshareNamespaceFlags = kCloneNamespaceFlags | 0x00000080 /*CLONE_NEWTIME*/;

constexpr uint64_t kSeccompNewListener = 1u << 3;  // SECCOMP_FILTER_FLAG_NEW_LISTENER

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using Ctx = std::unique_ptr<void, CtxDeleter>;

std::vector<uint64_t> SetBits(uint64_t v) {
  std::vector<uint64_t> bits;
  for (int bit = 0; bit < 64; ++bit) {
    if (v & (uint64_t{1} << bit)) bits.push_back(uint64_t{1} << bit);
  }
  return bits;
}

class Builder {
 public:
  // `killed`: calls whose refusals by argument kill instead of answering an errno.
  Builder(scmp_filter_ctx ctx, const std::vector<std::string>& killed)
      : ctx_(ctx), killed_(killed) {}

  // What a refusal of `name` by its arguments answers: `err`, or a kill for a call in `killed`.
  uint32_t Refuse(const char* name, int err) const {
    return std::find(killed_.begin(), killed_.end(), name) != killed_.end()
               ? SCMP_ACT_KILL_PROCESS
               : SCMP_ACT_ERRNO(static_cast<uint32_t>(err));
  }

  // Adds a rule for `name`; names the architecture does not have are skipped.
  void Add(uint32_t action, const char* name, std::initializer_list<scmp_arg_cmp> args = {}) {
    Add(action, name, std::vector<scmp_arg_cmp>(args));
  }
  void Add(uint32_t action, const char* name, const std::vector<scmp_arg_cmp>& args) {
    int nr = seccomp_syscall_resolve_name(name);
    // The default action needs no rule (libseccomp refuses one, EACCES): a refusal that kills
    // (Refuse) is what the filter does with whatever no rule matches.
    if (nr == __NR_SCMP_ERROR || action == SCMP_ACT_KILL_PROCESS) return;
    int rc = seccomp_rule_add_array(ctx_, action, nr, static_cast<unsigned>(args.size()),
                                    args.empty() ? nullptr : args.data());
    if (rc != 0 && status_.ok()) {
      status_ = Internal(fmt::format("seccomp rule for {}: {}", name, std::strerror(-rc)));
    }
  }

  // Adds `action` for `name` when the low 32 bits of argument `arg` are outside `allowed` and
  // the comparisons in `with` (on other arguments) hold: one rule per aligned block of the
  // values between the allowed ones (a masked comparison), and one for those above them all.
  void AddOutside(uint32_t action, const char* name, const std::vector<scmp_arg_cmp>& with,
                  unsigned arg, std::vector<uint32_t> allowed) {
    std::sort(allowed.begin(), allowed.end());
    auto rule = [&](scmp_arg_cmp cmp) {
      std::vector<scmp_arg_cmp> args = with;
      args.push_back(cmp);
      Add(action, name, args);
    };
    uint64_t from = 0;  // the first value not yet covered
    for (uint32_t v : allowed) {
      while (from < v) {
        // The largest block aligned at `from` that ends before v.
        uint64_t size = from == 0 ? uint64_t{1} << 32 : from & (~from + 1);
        while (from + size > v) size >>= 1;
        rule(SCMP_CMP32(arg, SCMP_CMP_MASKED_EQ, static_cast<uint32_t>(~(size - 1)),
                        static_cast<uint32_t>(from)));
        from += size;
      }
      from = uint64_t{v} + 1;
    }
    if (from <= UINT32_MAX) rule(SCMP_CMP32(arg, SCMP_CMP_GE, static_cast<uint32_t>(from)));
  }

  // Allows `name` unless the low 32 bits of argument `arg` are one of `denied` (which get
  // EPERM). libseccomp 2.5 takes one comparison per argument and rule, and an unconditional
  // rule would override the conditional ones, so the allowed set is written as disjoint
  // rules: one per bit where the denied values agree (that bit differs, so the value cannot be
  // denied) and one per combination of the bits where they differ that is not itself denied.
  void AllowExceptLow32(const char* name, unsigned arg, std::initializer_list<uint32_t> denied) {
    uint32_t same = ~0u;
    for (uint32_t v : denied) same &= ~(v ^ *denied.begin());
    const uint32_t common = *denied.begin() & same;
    for (int bit = 0; bit < 32; ++bit) {
      uint32_t b = 1u << bit;
      if (!(same & b)) continue;
      Add(SCMP_ACT_ALLOW, name, {SCMP_CMP64(arg, SCMP_CMP_MASKED_EQ, b, (~common) & b)});
    }
    const uint32_t varying = ~same;
    // Enumerate the subsets of the varying bits (few: the denied values are close together).
    for (uint32_t sub = varying;; sub = (sub - 1) & varying) {
      uint32_t value = common | sub;
      bool is_denied = false;
      for (uint32_t v : denied) is_denied |= v == value;
      if (!is_denied) {
        Add(SCMP_ACT_ALLOW, name, {SCMP_CMP64(arg, SCMP_CMP_MASKED_EQ, 0xffffffffu, value)});
      }
      if (sub == 0) break;
    }
    for (uint32_t v : denied) {
      Add(Refuse(name, EPERM), name, {SCMP_CMP64(arg, SCMP_CMP_MASKED_EQ, 0xffffffffu, v)});
    }
  }

  // Allows `name` when none of `flags` is set in argument `arg`; EPERM when any is.
  void AllowWithoutFlags(const char* name, unsigned arg, uint64_t flags) {
    Add(SCMP_ACT_ALLOW, name, {SCMP_CMP64(arg, SCMP_CMP_MASKED_EQ, flags, 0)});
    for (uint64_t b : SetBits(flags)) {
      Add(Refuse(name, EPERM), name, {SCMP_CMP64(arg, SCMP_CMP_MASKED_EQ, b, b)});
    }
  }

  // Allows `name` unless it creates a file (a bit of `create_flags` set in argument
  // `flags_arg`) with a bit of `mode_bits` set in argument `mode_arg`, which gets EPERM. The
  // mode of an open that creates nothing is whatever the caller left in the register.
  void AllowUnlessCreatingWith(const char* name, unsigned flags_arg, uint64_t create_flags,
                               unsigned mode_arg, uint64_t mode_bits) {
    Add(SCMP_ACT_ALLOW, name, {SCMP_CMP64(flags_arg, SCMP_CMP_MASKED_EQ, create_flags, 0)});
    Add(SCMP_ACT_ALLOW, name, {SCMP_CMP64(mode_arg, SCMP_CMP_MASKED_EQ, mode_bits, 0)});
    for (uint64_t f : SetBits(create_flags)) {
      for (uint64_t m : SetBits(mode_bits)) {
        Add(Refuse(name, EPERM), name,
            {SCMP_CMP64(flags_arg, SCMP_CMP_MASKED_EQ, f, f),
             SCMP_CMP64(mode_arg, SCMP_CMP_MASKED_EQ, m, m)});
      }
    }
  }

  const absl::Status& status() const { return status_; }

 private:
  scmp_filter_ctx ctx_;
  const std::vector<std::string>& killed_;
  absl::Status status_;
};

}  // namespace

const std::vector<std::string>& AlwaysDeniedSyscalls() {
  static const std::vector<std::string>* names = [] {
    auto* v = new std::vector<std::string>();
    for (const char* n : kDeniedEperm) v->emplace_back(n);
    for (const char* n : kDeniedEnosys) v->emplace_back(n);
    return v;
  }();
  return *names;
}

namespace {
// Allowed or refused by their arguments, by the rules at the end of Build.
constexpr const char* kFiltered[] = {
    "ioctl",     "clone",  "unshare", "seccomp",   "personality", "socket",
    "open",      "openat", "creat",   "chmod",     "fchmod",      "fchmodat",
    "fchmodat2", "mknod",  "mknodat", "prlimit64", "socketpair"};

absl::StatusOr<std::string> Build(const std::vector<std::string>& widened, Listeners listeners,
                                  const std::vector<std::string>& killed);
}  // namespace

absl::StatusOr<std::string> BuildSeccompFilter() {
  // The default profile does not depend on the spec: compile it once per process.
  static const absl::StatusOr<std::string>* filter =
      new absl::StatusOr<std::string>(Build({}, Listeners::kRefused, {}));
  return *filter;
}

absl::StatusOr<std::string> BuildSeccompFilter(const std::vector<std::string>& widened,
                                               Listeners listeners,
                                               const std::vector<std::string>& killed) {
  if (widened.empty() && listeners == Listeners::kRefused && killed.empty()) {
    return BuildSeccompFilter();
  }
  for (const std::string& name : widened) {
    if (TreatmentOf(name) != supervisor::ProfileTreatment::kNotAllowed) {
      return Internal(fmt::format("seccomp profile: {} cannot be widened", name));
    }
  }
  for (const std::string& name : killed) {
    if (TreatmentOf(name) != supervisor::ProfileTreatment::kFiltered) {
      return Internal(fmt::format("seccomp profile: {} is not refused by its arguments", name));
    }
  }
  return Build(widened, listeners, killed);
}

const std::vector<std::string>& FilteredSyscalls() {
  static const std::vector<std::string>* names =
      new std::vector<std::string>(std::begin(kFiltered), std::end(kFiltered));
  return *names;
}

supervisor::ProfileTreatment TreatmentOf(std::string_view name) {
  using supervisor::ProfileTreatment;
  for (const char* n : kAllowed) {
    if (name == n) return ProfileTreatment::kAllowed;
  }
  for (const char* n : kFiltered) {
    if (name == n) return ProfileTreatment::kFiltered;
  }
  for (const std::string& n : AlwaysDeniedSyscalls()) {
    if (name == n) return ProfileTreatment::kAlwaysDenied;
  }
  return ProfileTreatment::kNotAllowed;
}

namespace {

absl::StatusOr<std::string> Build(const std::vector<std::string>& widened, Listeners listeners,
                                  const std::vector<std::string>& killed) {
  Ctx ctx(seccomp_init(SCMP_ACT_KILL_PROCESS));
  if (!ctx) return Internal("seccomp_init failed");
  // Anything not for the native architecture (int 0x80 on x86-64, x32) is killed.
  if (seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0 ||
      seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0) != 0 ||
      // A binary search over the syscall numbers instead of a linear chain: every system call
      // of a sandboxed program runs this filter.
      seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2) != 0) {
    return Internal("seccomp_attr_set failed");
  }
  Builder b(ctx.get(), killed);
  for (const char* name : kAllowed) b.Add(SCMP_ACT_ALLOW, name);
  for (const char* name : kDeniedEperm) b.Add(SCMP_ACT_ERRNO(EPERM), name);
  for (const char* name : kDeniedEnosys) b.Add(SCMP_ACT_ERRNO(ENOSYS), name);
  for (const std::string& name : widened) b.Add(SCMP_ACT_ALLOW, name.c_str());

  // Terminal injection into whatever terminal is reachable (CVE-2017-5226), with the upper
  // 32 bits of the request ignored as the kernel ignores them (CVE-2019-10063).
  b.AllowExceptLow32("ioctl", 1, {TIOCSTI, TIOCLINUX});
  b.AllowWithoutFlags("clone", 0, kCloneNamespaceFlags);
  b.AllowWithoutFlags("unshare", 0, kUnshareNamespaceFlags);
  // A second seccomp listener would let sandboxed code supervise (and forge answers for) its
  // own children; plain filters can only restrict further and stay allowed.
  if (listeners == Listeners::kRefused) {
    b.AllowWithoutFlags("seccomp", 1, kSeccompNewListener);
  } else {
    b.Add(SCMP_ACT_ALLOW, "seccomp");
  }
  // prlimit64 on the caller only (pid 0, what getrlimit and setrlimit use): the kernel lets a
  // process set the limits of any other of the same uid, airlock-init's among them.
  b.Add(SCMP_ACT_ALLOW, "prlimit64", {SCMP_A0_32(SCMP_CMP_EQ, 0)});
  b.Add(b.Refuse("prlimit64", EPERM), "prlimit64", {SCMP_A0_32(SCMP_CMP_NE, 0)});
  // No setuid or setgid file from a sandbox: a writable host mount shows the file to the host
  // with its owner there (root, for a root-owned workspace under an idmapped mount), and the
  // sandbox's nosuid mount does not travel with it.
  constexpr uint64_t kSetId = S_ISUID | S_ISGID;
  constexpr uint64_t kCreates = O_CREAT | 020000000 /*__O_TMPFILE*/;
  b.AllowUnlessCreatingWith("open", 1, kCreates, 2, kSetId);
  b.AllowUnlessCreatingWith("openat", 2, kCreates, 3, kSetId);
  b.AllowWithoutFlags("creat", 1, kSetId);
  b.AllowWithoutFlags("chmod", 1, kSetId);
  b.AllowWithoutFlags("fchmod", 1, kSetId);
  b.AllowWithoutFlags("fchmodat", 2, kSetId);
  b.AllowWithoutFlags("fchmodat2", 2, kSetId);
  b.AllowWithoutFlags("mknod", 1, kSetId);
  b.AllowWithoutFlags("mknodat", 2, kSetId);
  // personality: the query (0xffffffff) and PER_LINUX only; changes fall to the default kill.
  b.Add(SCMP_ACT_ALLOW, "personality", {SCMP_CMP64(0, SCMP_CMP_MASKED_EQ, 0xffffffffu, 0)});
  b.Add(SCMP_ACT_ALLOW, "personality",
        {SCMP_CMP64(0, SCMP_CMP_MASKED_EQ, 0xffffffffu, 0xffffffffu)});
  // Sockets: unix, IP, and netlink route (for getaddrinfo and `ip addr`); every other family
  // from 0 to 63 answers EAFNOSUPPORT, and any other value is killed.
  b.Add(SCMP_ACT_ALLOW, "socket", {SCMP_A0_32(SCMP_CMP_EQ, AF_UNIX)});
  // IP: TCP and UDP (and ICMP echo over datagrams, which the kernel grants by group), nothing
  // else. Any other protocol or socket type reaches a protocol's code that ordinary tools never
  // use, and on a modular kernel makes the kernel load that protocol's module (SCTP, DCCP, L2TP,
  // ...); SOCK_PACKET turns an IP socket into a packet socket. They answer EPROTONOSUPPORT, on
  // which libraries fall back (Go's MPTCP to TCP); raw sockets answer EPERM, as the kernel would
  // without CAP_NET_RAW.
  constexpr uint32_t kTypeMask = 0xf;  // the rest of the type argument is SOCK_NONBLOCK|CLOEXEC
  const std::pair<uint32_t, std::vector<uint32_t>> kIpProtocols[] = {
      {SOCK_STREAM, {0, IPPROTO_TCP}},
      {SOCK_DGRAM, {0, IPPROTO_ICMP, IPPROTO_UDP, IPPROTO_ICMPV6}},
  };
  for (uint32_t family : {AF_INET, AF_INET6}) {
    const scmp_arg_cmp is_family = SCMP_A0_32(SCMP_CMP_EQ, family);
    for (const auto& [type, protocols] : kIpProtocols) {
      const scmp_arg_cmp is_type = SCMP_A1_32(SCMP_CMP_MASKED_EQ, kTypeMask, type);
      for (uint32_t protocol : protocols) {
        b.Add(SCMP_ACT_ALLOW, "socket", {is_family, is_type, SCMP_A2_32(SCMP_CMP_EQ, protocol)});
      }
      b.AddOutside(b.Refuse("socket", EPROTONOSUPPORT), "socket", {is_family, is_type}, 2,
                   protocols);
    }
    b.Add(b.Refuse("socket", EPERM), "socket",
          {is_family, SCMP_A1_32(SCMP_CMP_MASKED_EQ, kTypeMask, SOCK_RAW)});
    // The other types: 0, 4 to 7, 8 to 15.
    for (auto [mask, value] : {std::pair<uint32_t, uint32_t>{kTypeMask, 0}, {0xc, 4}, {0x8, 8}}) {
      b.Add(b.Refuse("socket", EPROTONOSUPPORT), "socket",
            {is_family, SCMP_A1_32(SCMP_CMP_MASKED_EQ, mask, value)});
    }
  }
  b.Add(SCMP_ACT_ALLOW, "socket",
        {SCMP_A0_32(SCMP_CMP_EQ, AF_NETLINK), SCMP_A2_32(SCMP_CMP_EQ, 0 /*NETLINK_ROUTE*/)});
  b.Add(b.Refuse("socket", EPERM), "socket",
        {SCMP_A0_32(SCMP_CMP_EQ, AF_NETLINK), SCMP_A2_32(SCMP_CMP_NE, 0)});
  for (uint32_t family = 0; family < 64; ++family) {
    if (family == AF_UNIX || family == AF_INET || family == AF_INET6 || family == AF_NETLINK) {
      continue;
    }
    b.Add(b.Refuse("socket", EAFNOSUPPORT), "socket", {SCMP_A0_32(SCMP_CMP_EQ, family)});
  }
  // socketpair reaches a family's socket code (and module autoloading) before it fails, and
  // AF_TIPC makes working pairs: unix pairs only.
  b.Add(SCMP_ACT_ALLOW, "socketpair", {SCMP_A0_32(SCMP_CMP_EQ, AF_UNIX)});
  b.Add(b.Refuse("socketpair", EAFNOSUPPORT), "socketpair", {SCMP_A0_32(SCMP_CMP_NE, AF_UNIX)});
  RETURN_IF_ERROR(b.status());

  UniqueFd mem(memfd_create("airlock-seccomp", MFD_CLOEXEC));
  if (!mem) return ErrnoStatus(errno, "memfd_create");
  if (int rc = seccomp_export_bpf(ctx.get(), mem.get()); rc != 0) {
    return Internal(fmt::format("seccomp_export_bpf: {}", std::strerror(-rc)));
  }
  ASSIGN_OR_RETURN(std::string bpf, ReadFile(fmt::format("/proc/self/fd/{}", mem.get())));
  if (bpf.empty() || bpf.size() % 8 != 0) return Internal("seccomp filter has an odd size");
  return bpf;
}

}  // namespace

}  // namespace airlock::engine::internal
