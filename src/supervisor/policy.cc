#include "supervisor/policy.h"

#include <linux/audit.h>
#include <linux/sched.h>
#include <seccomp.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
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

}  // namespace

uint32_t NativeAuditArch() { return kNativeArch; }

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
      if (treatment == ProfileTreatment::kNotAllowed) widened.insert(name);
      // A name of the other architecture ("open" on aarch64) has nothing to match here.
      if (int nr = SyscallNumber(name); nr >= 0) rule.numbers.push_back(nr);
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

bool SyscallPolicy::Holds(const Condition& c, uint64_t v) {
  switch (c.op) {
    case Condition::Op::kEq:
      return v == c.value;
    case Condition::Op::kNe:
      return v != c.value;
    case Condition::Op::kLt:
      return v < c.value;
    case Condition::Op::kLe:
      return v <= c.value;
    case Condition::Op::kGt:
      return v > c.value;
    case Condition::Op::kGe:
      return v >= c.value;
    case Condition::Op::kMaskedEq:
      return (v & c.mask) == c.value;
  }
  return false;
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
  for (const Rule& rule : rules_) {
    if (std::find(rule.numbers.begin(), rule.numbers.end(), call.nr) == rule.numbers.end()) {
      continue;
    }
    bool all = std::all_of(rule.conditions.begin(), rule.conditions.end(),
                           [&](const Condition& c) { return Holds(c, call.args[c.index]); });
    if (all) return rule.verdict;
  }
  if (LetsThrough(default_.kind) && std::find(widened_numbers_.begin(), widened_numbers_.end(),
                                              call.nr) != widened_numbers_.end()) {
    return kBuiltinKill;  // what the profile would have said
  }
  return default_;
}

uint32_t SyscallPolicy::FilterReturn(const Verdict& v) const {
  // Rule index + 1 as the trace data (0 for the default), for debugging tracers.
  uint32_t data = static_cast<uint32_t>(v.rule + 1) & SECCOMP_RET_DATA;
  bool supervised = mode_ != spec::SupervisorMode::kNone && v.rule != Verdict::kBuiltinRule;
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
  for (const Rule& rule : rules_) {
    if (rule.numbers.empty()) continue;
    BpfProgram::Label match = b.NewLabel();
    BpfProgram::Label next = b.NewLabel();
    for (int nr : rule.numbers) b.JumpIf(BPF_JEQ, static_cast<uint32_t>(nr), match);
    b.Jump(next);
    b.Bind(match);
    for (const Condition& c : rule.conditions) {
      const uint32_t hi = static_cast<uint32_t>(c.value >> 32);
      const uint32_t lo = static_cast<uint32_t>(c.value);
      BpfProgram::Label ok = b.NewLabel();
      // Goes to `no` unless (args[i] & mask) == value, word by word.
      auto equal = [&](uint64_t mask, BpfProgram::Label no) {
        for (bool high : {true, false}) {
          const uint32_t m = static_cast<uint32_t>(high ? mask >> 32 : mask);
          high ? b.LoadArgHigh(c.index) : b.LoadArgLow(c.index);
          if (m != ~0u) b.And(m);
          b.JumpUnless(BPF_JEQ, high ? hi : lo, no);
        }
      };
      // Goes to `yes` when args[i] > value (>= with or_equal), to `no` otherwise: the high words
      // decide unless they are equal.
      auto greater = [&](bool or_equal, BpfProgram::Label yes, BpfProgram::Label no) {
        b.LoadArgHigh(c.index);
        b.JumpIf(BPF_JGT, hi, yes);
        b.JumpUnless(BPF_JEQ, hi, no);
        b.LoadArgLow(c.index);
        b.JumpIf(or_equal ? BPF_JGE : BPF_JGT, lo, yes);
        b.Jump(no);
      };
      switch (c.op) {
        case Condition::Op::kEq:
          equal(~0ull, next);
          break;
        case Condition::Op::kMaskedEq:
          equal(c.mask, next);
          break;
        case Condition::Op::kNe:
          equal(~0ull, ok);  // any word differs: the condition holds
          b.Jump(next);
          break;
        case Condition::Op::kGt:
          greater(false, ok, next);
          break;
        case Condition::Op::kGe:
          greater(true, ok, next);
          break;
        case Condition::Op::kLt:
          greater(true, next, ok);
          break;
        case Condition::Op::kLe:
          greater(false, next, ok);
          break;
      }
      b.Bind(ok);
    }
    b.Return(FilterReturn(rule.verdict));
    b.Bind(next);
    b.LoadNr();
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
