#include "supervisor/policy.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>

#include "common/status.h"
#include "fmt/format.h"
#include "init/protocol.h"
#include "spec/kernel_names.h"
#include "supervisor/internal/bpf.h"

namespace airlock::supervisor {
namespace {

using internal::BpfProgram;
using Kind = Verdict::Kind;

#if defined(__x86_64__)
constexpr uint32_t kNativeArch = AUDIT_ARCH_X86_64;
// x32 calls reach the same entry point with this bit set in the number.
constexpr uint32_t kX32Bit = 0x40000000;
#elif defined(__aarch64__)
constexpr uint32_t kNativeArch = AUDIT_ARCH_AARCH64;
#else
#error "the syscall policy knows x86_64 and aarch64"
#endif

constexpr int kMaxSyscallNumber = 1024;

const std::vector<std::string>& NameTable() {
  static const std::vector<std::string>* names = [] {
    auto* v = new std::vector<std::string>(kMaxSyscallNumber);
    for (int nr = 0; nr < kMaxSyscallNumber; ++nr) {
      char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
      (*v)[static_cast<size_t>(nr)] = name ? name : fmt::format("syscall_{}", nr);
      std::free(name);
    }
    return v;
  }();
  return *names;
}

std::string IndexPath(std::string_view field, size_t i) { return fmt::format("{}[{}]", field, i); }

absl::StatusOr<Verdict> ParseVerdict(const std::string& path, std::string_view text, int rule,
                                     spec::SupervisorMode mode) {
  if (text.empty()) return Verdict{Kind::kAllow, 0, rule};  // no default: the profile decides
  std::optional<spec::SyscallAction> action = spec::ParseSyscallAction(text);
  if (!action) return InvalidArgument(fmt::format("{}: \"{}\" is not an action", path, text));
  switch (action->kind) {
    case spec::SyscallAction::Kind::kAllow:
      return Verdict{Kind::kAllow, 0, rule};
    case spec::SyscallAction::Kind::kErrno:
      return Verdict{Kind::kErrno, action->errno_value, rule};
    case spec::SyscallAction::Kind::kKill:
      return Verdict{Kind::kKill, 0, rule};
    case spec::SyscallAction::Kind::kTrace:
      if (mode != spec::SupervisorMode::kPtrace) {
        return InvalidArgument(fmt::format("{}: trace needs process.supervisor ptrace", path));
      }
      return Verdict{Kind::kRoute, 0, rule};
    case spec::SyscallAction::Kind::kNotify:
      if (mode != spec::SupervisorMode::kNotify) {
        return InvalidArgument(fmt::format("{}: notify needs process.supervisor notify", path));
      }
      return Verdict{Kind::kRoute, 0, rule};
  }
  return Internal("unknown syscall action kind");
}

bool LetsThrough(Kind kind) { return kind == Kind::kAllow || kind == Kind::kRoute; }

// Calls that do what another call does. A rule that restricts one of `calls` must be matched by
// rules that restrict each of `same` too, or a program would simply use another of them.
struct SameEffect {
  std::vector<std::string_view> calls;
  std::vector<std::string_view> same;  // empty: the other members of `calls`
  std::string_view hint;
};

const std::vector<SameEffect>& SameEffects() {
  static const auto* groups = new std::vector<SameEffect>{
      {{"open", "openat", "creat"},
       {},
       "open's flags are args[1], openat's args[2]; creat(path, mode) is open(path, "
       "O_CREAT|O_WRONLY|O_TRUNC, mode)"},
      {{"execve", "execveat"}, {}, "execveat's path is args[1]"},
      {{"connect"},
       {"sendto", "sendmsg", "sendmmsg"},
       "they reach an address without connect (TCP Fast Open, UDP); sendto has one when args[4] "
       "is not 0, sendmsg's and sendmmsg's is in memory, beyond a filter's reach"},
      {{"unlink", "unlinkat", "rmdir"}, {}, "unlinkat's path is args[1], its flags args[2]"},
      {{"rename", "renameat", "renameat2"}, {}, ""},
      {{"mkdir", "mkdirat"}, {}, ""},
      {{"mknod", "mknodat"}, {}, ""},
      {{"link", "linkat"}, {}, ""},
      {{"symlink", "symlinkat"}, {}, ""},
      {{"chmod", "fchmod", "fchmodat", "fchmodat2"}, {}, ""},
      {{"chown", "fchown", "lchown", "fchownat"}, {}, ""},
      {{"truncate", "ftruncate"}, {}, ""},
      {{"utime", "utimes", "futimesat", "utimensat"}, {}, ""},
      {{"access", "faccessat", "faccessat2"}, {}, ""},
      {{"stat", "lstat", "fstat", "newfstatat", "statx"}, {}, ""},
      {{"readlink", "readlinkat"}, {}, ""},
      {{"getdents", "getdents64"}, {}, ""},
      {{"read", "readv", "pread64", "preadv", "preadv2"}, {}, ""},
      {{"read", "readv", "pread64", "preadv", "preadv2"},
       {"recvfrom", "recvmsg", "recvmmsg", "sendfile", "splice", "vmsplice", "copy_file_range"},
       "they read from a descriptor too (a socket, or a file into another descriptor)"},
      {{"write", "writev", "pwrite64", "pwritev", "pwritev2"}, {}, ""},
      {{"write", "writev", "pwrite64", "pwritev", "pwritev2"},
       {"sendto", "sendmsg", "sendmmsg", "sendfile", "splice", "vmsplice", "tee",
        "copy_file_range"},
       "they write to a descriptor too (a socket, or from another descriptor or a pipe)"},
      {{"sendto", "sendmsg", "sendmmsg"}, {}, ""},
      {{"recvfrom", "recvmsg", "recvmmsg"}, {}, ""},
      {{"mprotect", "pkey_mprotect"}, {}, "pkey_mprotect with key -1 is mprotect"},
      {{"mprotect", "pkey_mprotect"},
       {"mmap"},
       "mmap maps memory with the protection in args[2], executable included"},
      {{"setrlimit", "prlimit64"}, {}, "prlimit64 with pid 0 sets the caller's limits"},
      {{"dup", "dup2", "dup3"}, {"fcntl"}, "fcntl's F_DUPFD and F_DUPFD_CLOEXEC duplicate too"},
      {{"close", "close_range"}, {}, ""},
      {{"truncate", "ftruncate"}, {"fallocate"}, "fallocate punches holes and collapses ranges"},
      {{"getxattr", "lgetxattr", "fgetxattr"}, {}, ""},
      {{"setxattr", "lsetxattr", "fsetxattr"}, {}, ""},
      {{"listxattr", "llistxattr", "flistxattr"}, {}, ""},
      {{"removexattr", "lremovexattr", "fremovexattr"}, {}, ""},
      {{"fork", "vfork", "clone"}, {}, "fork is clone with no flags"},
      {{"kill", "tkill", "tgkill", "pidfd_send_signal", "rt_sigqueueinfo", "rt_tgsigqueueinfo"},
       {},
       ""},
      {{"dup", "dup2", "dup3"}, {}, ""},
      {{"pipe", "pipe2"}, {}, ""},
      {{"accept", "accept4"}, {}, ""},
      {{"setuid", "setreuid", "setresuid", "setfsuid"}, {}, ""},
      {{"setgid", "setregid", "setresgid", "setfsgid"}, {}, ""},
      {{"epoll_create", "epoll_create1"}, {}, ""},
      {{"eventfd", "eventfd2"}, {}, ""},
      {{"signalfd", "signalfd4"}, {}, ""},
      {{"inotify_init", "inotify_init1"}, {}, ""},
  };
  return *groups;
}

// InvalidArgument naming the first call that a restricting rule leaves open through another
// call of the same effect (one this architecture has and the profile lets run). `restricts[i]`:
// whether process.syscalls[i] restricts (its verdict, as Compile parsed it, is errno or kill).
absl::Status CheckSameEffects(const spec::Process& process, const std::vector<bool>& restricts,
                              const ProfileLookup& profile) {
  std::set<std::string_view> restricted;
  for (size_t i = 0; i < process.syscalls.size(); ++i) {
    if (restricts[i]) {
      restricted.insert(process.syscalls[i].names.begin(), process.syscalls[i].names.end());
    }
  }
  for (size_t i = 0; i < process.syscalls.size(); ++i) {
    if (!restricts[i]) continue;
    const spec::SyscallRule& rule = process.syscalls[i];
    for (size_t j = 0; j < rule.names.size(); ++j) {
      for (const SameEffect& g : SameEffects()) {
        if (std::find(g.calls.begin(), g.calls.end(), rule.names[j]) == g.calls.end()) continue;
        const std::vector<std::string_view>& same = g.same.empty() ? g.calls : g.same;
        std::vector<std::string_view> open;
        for (std::string_view other : same) {
          ProfileTreatment t = profile(other);
          if (other == rule.names[j] || restricted.contains(other) || SyscallNumber(other) < 0 ||
              t == ProfileTreatment::kAlwaysDenied || t == ProfileTreatment::kNotAllowed) {
            continue;
          }
          open.push_back(other);
        }
        if (open.empty()) continue;
        std::string list;
        for (size_t k = 0; k < open.size(); ++k) {
          list += k == 0 ? "" : (k + 1 == open.size() ? " and " : ", ");
          list += open[k];
        }
        return InvalidArgument(fmt::format(
            "{}: {} is restricted, but {} can do the same and {} not: restrict {} as well (an "
            "errno or kill rule naming {}){}{}",
            IndexPath(IndexPath("process.syscalls", i) + ".names", j), rule.names[j], list,
            open.size() == 1 ? "is" : "are", open.size() == 1 ? "it" : "them",
            open.size() == 1 ? "it" : "them", g.hint.empty() ? "" : "; ", g.hint));
      }
    }
  }
  return absl::OkStatus();
}

// The own-filter check (Verdict::kOwnFilterRule): seccomp(SECCOMP_SET_MODE_FILTER, ...) and
// prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ...), on the low 32 bits the kernel reads.
bool InstallsAFilter(const seccomp_data& call) {
  static const int kSeccomp = SyscallNumber("seccomp");
  static const int kPrctl = SyscallNumber("prctl");
  const auto low = [&](int i) { return static_cast<uint32_t>(call.args[i]); };
  return (call.nr == kSeccomp && low(0) == SECCOMP_SET_MODE_FILTER) ||
         (call.nr == kPrctl && low(0) == PR_SET_SECCOMP && low(1) == SECCOMP_MODE_FILTER);
}

}  // namespace

uint32_t NativeAuditArch() { return kNativeArch; }

std::string RuleName(int rule) {
  if (rule >= 0) return fmt::format("process.syscalls[{}]", rule);
  switch (rule) {
    case Verdict::kDefaultRule:
      return "process.syscallDefaultAction";
    case Verdict::kOwnFilterRule:
      return "the supervisor (a supervised program may not install seccomp filters)";
    default:
      return "the policy's built-in checks";
  }
}

spec::SyscallRule AddressedSendto(const std::string& action) {
  return {{"sendto"}, {{4, "ne", 0, 0}}, action};
}

std::vector<spec::SyscallRule> RulesRestricting(const std::string& name,
                                                const std::string& action) {
  std::vector<spec::SyscallRule> rules = {{{name}, {}, action}};
  for (const SameEffect& g : SameEffects()) {
    if (std::find(g.calls.begin(), g.calls.end(), name) == g.calls.end()) continue;
    for (std::string_view other : g.same.empty() ? g.calls : g.same) {
      if (other == name) continue;
      if (other == "sendto" && name == "connect") {
        // Only a sendto with an address reaches a peer connect did not: send() on a connected
        // socket stays allowed.
        rules.push_back(AddressedSendto(action));
      } else if (other == "mmap") {
        // Only executable mappings: every program maps memory.
        rules.push_back({{"mmap"}, {{2, "masked_eq", PROT_EXEC, PROT_EXEC}}, action});
      } else if (other == "fcntl") {
        // Only the duplicating commands: every program uses fcntl for its flags.
        for (int command : {F_DUPFD, F_DUPFD_CLOEXEC}) {
          rules.push_back({{"fcntl"}, {{1, "eq", static_cast<uint64_t>(command), 0}}, action});
        }
      } else if (std::find(rules[0].names.begin(), rules[0].names.end(), other) ==
                 rules[0].names.end()) {
        rules[0].names.emplace_back(other);
      }
    }
  }
  return rules;
}

std::string SyscallName(int nr) {
  if (nr >= 0 && nr < kMaxSyscallNumber) return NameTable()[static_cast<size_t>(nr)];
  return fmt::format("syscall_{}", nr);
}

int SyscallNumber(std::string_view name) {
  std::string copy(name);
  int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_NATIVE, copy.c_str());
  return nr < 0 ? -1 : nr;
}

absl::StatusOr<SyscallPolicy> SyscallPolicy::Compile(const spec::Process& process,
                                                     const ProfileLookup& profile) {
  SyscallPolicy p;
  p.mode_ = process.supervisor;
  std::set<std::string> widened;
  for (size_t i = 0; i < process.syscalls.size(); ++i) {
    const spec::SyscallRule& in = process.syscalls[i];
    std::string path = IndexPath("process.syscalls", i);
    Rule rule;
    if (in.action.empty()) return InvalidArgument(fmt::format("{}.action: required", path));
    ASSIGN_OR_RETURN(rule.verdict,
                     ParseVerdict(path + ".action", in.action, static_cast<int>(i), p.mode_));
    for (size_t j = 0; j < in.names.size(); ++j) {
      const std::string& name = in.names[j];
      std::string name_path = IndexPath(path + ".names", j);
      if (!spec::IsKnownSyscall(name)) {
        return InvalidArgument(fmt::format("{}: unknown system call \"{}\"", name_path, name));
      }
      ProfileTreatment treatment = profile(name);
      if (treatment == ProfileTreatment::kAlwaysDenied && LetsThrough(rule.verdict.kind)) {
        return InvalidArgument(fmt::format(
            "{}: {} is always denied; no rule can let it through (only errno and kill rules may "
            "name it)",
            name_path, name));
      }
      // Under notify the profile is installed after the policy's filter (which holds the
      // listener), so it answers first, and its EPERM ties with, and wins over, another errno.
      if (treatment == ProfileTreatment::kAlwaysDenied && rule.verdict.kind == Kind::kErrno &&
          rule.verdict.errno_value != EPERM && p.mode_ == spec::SupervisorMode::kNotify) {
        return InvalidArgument(fmt::format(
            "{}: {} is always denied, and under the notify supervisor the built-in profile "
            "answers it EPERM before any rule; use errno(EPERM) or kill",
            name_path, name));
      }
      if (treatment == ProfileTreatment::kNotAllowed) widened.insert(name);
      // A name of the other architecture ("open" on aarch64) has nothing to match here.
      if (int nr = SyscallNumber(name); nr >= 0) {
        (treatment == ProfileTreatment::kAlwaysDenied ? rule.kernel_numbers : rule.numbers)
            .push_back(nr);
      }
    }
    for (size_t j = 0; j < in.args.size(); ++j) {
      const spec::SyscallArgCondition& a = in.args[j];
      std::string arg_path = IndexPath(path + ".args", j);
      static constexpr std::pair<std::string_view, Condition::Op> kOps[] = {
          {"eq", Condition::Op::kEq},
          {"ne", Condition::Op::kNe},
          {"lt", Condition::Op::kLt},
          {"le", Condition::Op::kLe},
          {"gt", Condition::Op::kGt},
          {"ge", Condition::Op::kGe},
          {"masked_eq", Condition::Op::kMaskedEq}};
      auto op = std::find_if(std::begin(kOps), std::end(kOps),
                             [&](const auto& o) { return o.first == a.op; });
      if (op == std::end(kOps) || a.index < 0 || a.index > 5) {
        return InvalidArgument(fmt::format("{}: invalid condition", arg_path));
      }
      rule.conditions.push_back({a.index, op->second, a.value, a.mask});
    }
    p.rules_.push_back(std::move(rule));
  }
  std::vector<bool> restricts;
  for (const Rule& rule : p.rules_) restricts.push_back(!LetsThrough(rule.verdict.kind));
  RETURN_IF_ERROR(CheckSameEffects(process, restricts, profile));
  ASSIGN_OR_RETURN(p.default_,
                   ParseVerdict("process.syscallDefaultAction", process.syscall_default_action,
                                Verdict::kDefaultRule, p.mode_));
  p.widened_.assign(widened.begin(), widened.end());
  for (const std::string& name : p.widened_) {
    if (int nr = SyscallNumber(name); nr >= 0) p.widened_numbers_.push_back(nr);
  }
  bool needs_filter = p.mode_ != spec::SupervisorMode::kNone || !p.rules_.empty() ||
                      p.default_.kind != Kind::kAllow;
  if (needs_filter) {
    ASSIGN_OR_RETURN(p.filter_, p.BuildFilter(), "process.syscalls");
  }
  return p;
}

// An ordered comparison with a value beyond 32 bits is about a 64-bit argument (an offset, a
// length): its low half alone says nothing about it, so only the whole register is read.
bool SyscallPolicy::WholeRegisterOnly(const Condition& c) {
  using Op = Condition::Op;
  bool ordered = c.op == Op::kLt || c.op == Op::kLe || c.op == Op::kGt || c.op == Op::kGe;
  return ordered && c.value > 0xffffffff;
}

bool SyscallPolicy::Holds(const Condition& c, uint64_t v, bool restricts) {
  auto holds = [&](uint64_t width_mask) {
    const uint64_t x = v & width_mask;
    const uint64_t value = c.value & width_mask;
    switch (c.op) {
      case Condition::Op::kEq:
        return x == value;
      case Condition::Op::kNe:
        return x != value;
      case Condition::Op::kLt:
        return x < value;
      case Condition::Op::kLe:
        return x <= value;
      case Condition::Op::kGt:
        return x > value;
      case Condition::Op::kGe:
        return x >= value;
      case Condition::Op::kMaskedEq:
        return (x & c.mask) == value;
    }
    return false;
  };
  const bool whole = holds(~uint64_t{0});
  if (WholeRegisterOnly(c)) return whole;
  const bool low = holds(0xffffffff);
  return restricts ? whole || low : whole && low;
}

Verdict SyscallPolicy::Evaluate(const seccomp_data& call, bool handshake) const {
  // The same order of checks as BuildFilter.
  constexpr Verdict kBuiltinKill{Kind::kKill, 0, Verdict::kBuiltinRule};
  if (call.arch != kNativeArch) return kBuiltinKill;
  uint32_t nr = static_cast<uint32_t>(call.nr);
#if defined(__x86_64__)
  if (nr >= kX32Bit) return kBuiltinKill;
#endif
  static const int kGetppid = SyscallNumber("getppid");
  static const int kClone = SyscallNumber("clone");
  if (mode_ == spec::SupervisorMode::kNotify && handshake && call.nr == kGetppid &&
      call.args[0] == init::kHandshakeMagic) {
    return Verdict{Kind::kHandshake, 0, -1, call.args[1]};
  }
  if (mode_ == spec::SupervisorMode::kPtrace && call.nr == kClone &&
      (call.args[0] & CLONE_UNTRACED) != 0) {
    return Verdict{Kind::kErrno, EPERM, Verdict::kBuiltinRule};
  }
  if (mode_ != spec::SupervisorMode::kNone && InstallsAFilter(call)) {
    return Verdict{Kind::kErrno, EPERM, Verdict::kOwnFilterRule};
  }
  for (const Rule& rule : rules_) {
    if (std::find(rule.numbers.begin(), rule.numbers.end(), call.nr) == rule.numbers.end()) {
      continue;
    }
    const bool restricts = !LetsThrough(rule.verdict.kind);
    bool all = std::all_of(rule.conditions.begin(), rule.conditions.end(), [&](const Condition& c) {
      return Holds(c, call.args[c.index], restricts);
    });
    if (all) return rule.verdict;
  }
  if (LetsThrough(default_.kind) && std::find(widened_numbers_.begin(), widened_numbers_.end(),
                                              call.nr) != widened_numbers_.end()) {
    return kBuiltinKill;  // what the profile would have said
  }
  return default_;
}

bool SyscallPolicy::KillsEveryCall(std::string_view name) const {
  const int nr = SyscallNumber(name);
  if (nr < 0) return false;
  // (Evaluate's own checks before the rules, a program's own filter and CLONE_UNTRACED under
  // ptrace, answer some calls EPERM where the rules would kill; the profile's kill of the
  // arguments it refuses, a listener or namespace flags, is then the stricter answer, as the
  // rules ask.)
  for (const Rule& rule : rules_) {
    if (std::find(rule.numbers.begin(), rule.numbers.end(), nr) == rule.numbers.end() &&
        std::find(rule.kernel_numbers.begin(), rule.kernel_numbers.end(), nr) ==
            rule.kernel_numbers.end()) {
      continue;
    }
    return rule.conditions.empty() && rule.verdict.kind == Kind::kKill;
  }
  return default_.kind == Kind::kKill;
}

uint32_t SyscallPolicy::FilterReturn(const Verdict& v, bool in_kernel) const {
  // Rule index + 1 as the trace data (0 for the default), for debugging tracers.
  uint32_t data = static_cast<uint32_t>(v.rule + 1) & SECCOMP_RET_DATA;
  bool supervised =
      mode_ != spec::SupervisorMode::kNone && v.rule != Verdict::kBuiltinRule && !in_kernel;
  uint32_t routed =
      mode_ == spec::SupervisorMode::kNotify ? SECCOMP_RET_USER_NOTIF : SECCOMP_RET_TRACE | data;
  switch (v.kind) {
    case Kind::kAllow:
      return SECCOMP_RET_ALLOW;
    case Kind::kErrno:
      return supervised
                 ? routed
                 : SECCOMP_RET_ERRNO | (static_cast<uint32_t>(v.errno_value) & SECCOMP_RET_DATA);
    case Kind::kKill:
      return supervised ? routed : SECCOMP_RET_KILL_PROCESS;
    case Kind::kRoute:
    case Kind::kHandshake:
      return routed;
  }
  return SECCOMP_RET_KILL_PROCESS;
}

void SyscallPolicy::EmitCondition(BpfProgram& b, const Condition& c, bool whole, int yes, int no) {
  const uint32_t hi = static_cast<uint32_t>(c.value >> 32);
  const uint32_t lo = static_cast<uint32_t>(c.value);
  // Goes to `differ` unless (args[i] & mask) == value, word by word (the low word alone when
  // not `whole`).
  auto equal = [&](uint64_t mask, BpfProgram::Label differ) {
    for (bool high : {true, false}) {
      if (high && !whole) continue;
      const uint32_t m = static_cast<uint32_t>(high ? mask >> 32 : mask);
      high ? b.LoadArgHigh(c.index) : b.LoadArgLow(c.index);
      if (m != ~0u) b.And(m);
      b.JumpUnless(BPF_JEQ, high ? hi : lo, differ);
    }
  };
  // Goes to `above` when args[i] > value (>= with or_equal), to `below` otherwise: the high
  // words decide unless they are equal (the low word alone when not `whole`).
  auto greater = [&](bool or_equal, BpfProgram::Label above, BpfProgram::Label below) {
    if (whole) {
      b.LoadArgHigh(c.index);
      b.JumpIf(BPF_JGT, hi, above);
      b.JumpUnless(BPF_JEQ, hi, below);
    }
    b.LoadArgLow(c.index);
    b.JumpIf(or_equal ? BPF_JGE : BPF_JGT, lo, above);
    b.Jump(below);
  };
  switch (c.op) {
    case Condition::Op::kEq:
      equal(~0ull, no);
      b.Jump(yes);
      break;
    case Condition::Op::kMaskedEq:
      equal(c.mask, no);
      b.Jump(yes);
      break;
    case Condition::Op::kNe:
      equal(~0ull, yes);  // any word differs: the condition holds
      b.Jump(no);
      break;
    case Condition::Op::kGt:
      greater(false, yes, no);
      break;
    case Condition::Op::kGe:
      greater(true, yes, no);
      break;
    case Condition::Op::kLt:
      greater(true, no, yes);
      break;
    case Condition::Op::kLe:
      greater(false, no, yes);
      break;
  }
}

absl::StatusOr<std::string> SyscallPolicy::BuildFilter() const {
  BpfProgram b;
  BpfProgram::Label kill = b.NewLabel();
  b.LoadArch();
  b.JumpUnless(BPF_JEQ, kNativeArch, kill);
  b.LoadNr();
#if defined(__x86_64__)
  b.JumpIf(BPF_JGE, kX32Bit, kill);
#endif
  // Every check reads the number, possibly after loading an argument: reload it at each label
  // where the next check starts.
  if (mode_ == spec::SupervisorMode::kNotify) {
    BpfProgram::Label next = b.NewLabel();
    b.JumpUnless(BPF_JEQ, static_cast<uint32_t>(SyscallNumber("getppid")), next);
    b.LoadArgLow(0);
    b.JumpUnless(BPF_JEQ, static_cast<uint32_t>(init::kHandshakeMagic), next);
    b.LoadArgHigh(0);
    b.JumpUnless(BPF_JEQ, static_cast<uint32_t>(init::kHandshakeMagic >> 32), next);
    b.Return(SECCOMP_RET_USER_NOTIF);
    b.Bind(next);
    b.LoadNr();
  }
  if (mode_ == spec::SupervisorMode::kPtrace) {
    // A child made with CLONE_UNTRACED would escape the tracer (clone3 is ENOSYS in the
    // profile, fork and vfork cannot ask for it).
    BpfProgram::Label next = b.NewLabel();
    b.JumpUnless(BPF_JEQ, static_cast<uint32_t>(SyscallNumber("clone")), next);
    b.LoadArgLow(0);
    b.JumpUnless(BPF_JSET, CLONE_UNTRACED, next);
    b.Return(FilterReturn(Verdict{Kind::kErrno, EPERM, Verdict::kBuiltinRule}));
    b.Bind(next);
    b.LoadNr();
  }
  if (mode_ != spec::SupervisorMode::kNone) {
    BpfProgram::Label next = b.NewLabel();
    BpfProgram::Label not_seccomp = b.NewLabel();
    BpfProgram::Label refuse = b.NewLabel();
    b.JumpUnless(BPF_JEQ, static_cast<uint32_t>(SyscallNumber("seccomp")), not_seccomp);
    b.LoadArgLow(0);
    b.JumpIf(BPF_JEQ, SECCOMP_SET_MODE_FILTER, refuse);
    b.Jump(next);
    b.Bind(not_seccomp);
    b.JumpUnless(BPF_JEQ, static_cast<uint32_t>(SyscallNumber("prctl")), next);
    b.LoadArgLow(0);
    b.JumpUnless(BPF_JEQ, PR_SET_SECCOMP, next);
    b.LoadArgLow(1);
    b.JumpUnless(BPF_JEQ, SECCOMP_MODE_FILTER, next);
    b.Bind(refuse);
    b.Return(FilterReturn(Verdict{Kind::kErrno, EPERM, Verdict::kOwnFilterRule}));
    b.Bind(next);
    b.LoadNr();
  }
  // One block per rule and kind of number: the numbers, the conditions, the verdict.
  auto emit_rule = [&](const Rule& rule, const std::vector<int>& numbers, bool in_kernel) {
    if (numbers.empty()) return;
    BpfProgram::Label match = b.NewLabel();
    BpfProgram::Label next = b.NewLabel();
    for (int nr : numbers) b.JumpIf(BPF_JEQ, static_cast<uint32_t>(nr), match);
    b.Jump(next);
    b.Bind(match);
    const bool restricts = !LetsThrough(rule.verdict.kind);
    for (const Condition& c : rule.conditions) {
      // Either reading matches a restricting rule, both are needed for one that lets through
      // (Holds): the low word's first, then the whole register's.
      BpfProgram::Label ok = b.NewLabel();
      if (WholeRegisterOnly(c)) {
        EmitCondition(b, c, /*whole=*/true, ok, next);
        b.Bind(ok);
        continue;
      }
      BpfProgram::Label whole = b.NewLabel();
      EmitCondition(b, c, /*whole=*/false, restricts ? ok : whole, restricts ? whole : next);
      b.Bind(whole);
      EmitCondition(b, c, /*whole=*/true, ok, next);
      b.Bind(ok);
    }
    b.Return(FilterReturn(rule.verdict, in_kernel));
    b.Bind(next);
    b.LoadNr();
  };
  for (const Rule& rule : rules_) {
    emit_rule(rule, rule.kernel_numbers, true);
    emit_rule(rule, rule.numbers, false);
  }
  if (LetsThrough(default_.kind)) {
    for (int nr : widened_numbers_) b.JumpIf(BPF_JEQ, static_cast<uint32_t>(nr), kill);
  }
  b.Return(FilterReturn(default_));
  b.Bind(kill);
  b.Return(SECCOMP_RET_KILL_PROCESS);
  return b.Finish();
}

std::string SyscallPolicy::ActionName(const Verdict& v) const {
  switch (v.kind) {
    case Kind::kAllow:
      return "allow";
    case Kind::kErrno: {
      const char* name = strerrorname_np(v.errno_value);
      return fmt::format("errno({})", name ? name : std::to_string(v.errno_value));
    }
    case Kind::kKill:
      return "kill";
    case Kind::kRoute:
      return mode_ == spec::SupervisorMode::kPtrace ? "trace" : "notify";
    case Kind::kHandshake:
      return "handshake";
  }
  return "unknown";
}

}  // namespace airlock::supervisor
