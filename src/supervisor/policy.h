// The syscall policy of a sandbox (process.syscalls, process.syscallDefaultAction and
// process.supervisor), compiled for this machine's architecture into a seccomp filter, and
// evaluated by the supervisor exactly as the filter decides.
//
// The policy filter is installed beside the engine's built-in profile
// (engine/internal/seccomp.cc). The kernel runs both and applies the more restrictive answer
// (kill > errno > notify > trace > allow), so a rule can narrow what the profile allows or route
// a call to the supervisor, and can never loosen the profile. Rules are tried in order and the
// first whose syscall and argument conditions match decides; calls no rule matches get the
// default action ("allow", the default, leaves them to the profile).
//
// A rule that restricts a call (errno, kill) must be matched by restricting rules for every call
// that does the same (open/openat/creat, execve/execveat, connect and the sends that take an
// address, unlink/unlinkat/rmdir, ...; RulesRestricting builds such a set), or Compile refuses
// the policy naming the calls left open.
//
// Checks against the profile, with the rule's path in the error:
//   - a rule that would let an always-denied call through (allow, trace, notify) is an error;
//   - a rule that names a call the profile does not allow at all (it would be killed) widens the
//     profile for that call (widened()): the policy then decides every such call, and one that
//     no rule matches is still killed unless the default action says otherwise.
// The profile's argument filters (namespace flags of clone/unshare, socket families, TIOCSTI,
// seccomp listeners, personality changes) always apply.
//
// With a supervisor every rule other than allow goes through it, so that denied calls are
// reported with their arguments decoded: notify mode answers a denied call with its errno (or
// kills the command), ptrace mode skips it with its errno (or kills). Rules' argument
// conditions compare register values (no pointers are read), so what the supervisor decides
// matches what the filter decided; each is read on the whole register and on its low 32 bits,
// and a rule takes the less permissive reading (Holds). A supervised program cannot install
// seccomp filters of its own (Verdict::kOwnFilterRule).
//
// Immutable after Compile; thread-safe.
#ifndef AIRLOCK_SUPERVISOR_POLICY_H_
#define AIRLOCK_SUPERVISOR_POLICY_H_

#include <linux/seccomp.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "spec/sandbox_spec.h"

namespace airlock::supervisor {
namespace internal {
class BpfProgram;
}

// What the built-in profile does with a system call, by name.
enum class ProfileTreatment {
  kAllowed,       // allowed whatever the arguments
  kFiltered,      // allowed or refused depending on its arguments
  kAlwaysDenied,  // refused whatever the arguments and the spec
  kNotAllowed,    // not in the profile: killed
};
using ProfileLookup = std::function<ProfileTreatment(std::string_view name)>;

struct Verdict {
  static constexpr int kDefaultRule = -1;  // process.syscallDefaultAction
  // A check of the policy's own (foreign architecture, CLONE_UNTRACED under ptrace, a widened
  // call no rule matched): the filter answers it itself, never through the supervisor.
  static constexpr int kBuiltinRule = -2;
  // A program's own seccomp filter under a supervisor: refused with EPERM, through the
  // supervisor, which records the attempt (and, under notify, lets airlock's own profile through
  // during the handshake). A filter of the program's could otherwise answer a call before ours:
  // between equal actions the newest filter decides, so its "notify" or "errno" would hide a
  // routed call from the supervisor and turn a kill rule into a plain error.
  static constexpr int kOwnFilterRule = -3;

  enum class Kind {
    kAllow,      // let it run (the profile still applies)
    kErrno,      // fail it with errno_value
    kKill,       // kill the command
    kRoute,      // a trace or notify rule: record it, then let it run
    kHandshake,  // the listener handshake call (init/protocol.h)
  };
  Kind kind = Kind::kAllow;
  int errno_value = 0;  // kErrno
  int rule = -1;        // index in process.syscalls, kDefaultRule or kBuiltinRule
  uint64_t phase = 0;   // kHandshake: kHandshakeListenerReady or kHandshakeDone

  friend bool operator==(const Verdict&, const Verdict&) = default;
};

class SyscallPolicy {
 public:
  // Compiles `process` for the native architecture. InvalidArgument with the field path when a
  // rule conflicts with the profile or the program would be too long.
  static absl::StatusOr<SyscallPolicy> Compile(const spec::Process& process,
                                               const ProfileLookup& profile);

  spec::SupervisorMode mode() const { return mode_; }
  // The policy filter (struct sock_filter[]); empty when there is nothing to install (no
  // supervisor and no rules).
  const std::string& filter() const { return filter_; }
  // Names (sorted, distinct) the profile must allow so that the policy can decide them.
  const std::vector<std::string>& widened() const { return widened_; }

  // Whether the policy kills every call of `name`, whatever its arguments: the first rule naming
  // it kills and has no conditions, or no rule names it and the default kills. Under a
  // supervisor the engine then builds its profile so that the arguments the profile refuses
  // (clone's namespace flags, socket families, ...) kill too: a routed kill never meets them,
  // as the profile's errno outranks a routed call.
  bool KillsEveryCall(std::string_view name) const;

  // What the filter decides for a call of the native architecture. With `handshake` false the
  // handshake call is evaluated as the getppid it is (after the handshake ended, a program
  // that makes the same call gets no special treatment).
  Verdict Evaluate(const seccomp_data& call, bool handshake = true) const;

  // What the filter returns for `verdict` (SECCOMP_RET_*), in this policy's mode.
  // `in_kernel`: the filter acts on the verdict itself, whatever the mode.
  uint32_t FilterReturn(const Verdict& verdict, bool in_kernel = false) const;

  // "allow", "errno(EACCES)", "kill", "trace" or "notify".
  std::string ActionName(const Verdict& verdict) const;

 private:
  struct Condition {
    int index = 0;
    enum class Op { kEq, kNe, kLt, kLe, kGt, kGe, kMaskedEq } op = Op::kEq;
    uint64_t value = 0;
    uint64_t mask = 0;
  };
  struct Rule {
    std::vector<int> numbers;  // on the native architecture
    // Always-denied calls the rule names (only an errno or kill rule may). The filter answers
    // them itself even under a supervisor: routed, they would meet the profile's own EPERM,
    // which outranks a routed call's action, and the rule would never act.
    std::vector<int> kernel_numbers;
    std::vector<Condition> conditions;
    Verdict verdict;
  };

  absl::StatusOr<std::string> BuildFilter() const;
  // Jumps to label `yes` when `c` holds on the whole register (`whole`) or on its low 32 bits,
  // to label `no` otherwise.
  static void EmitCondition(internal::BpfProgram& b, const Condition& c, bool whole, int yes,
                            int no);
  // Whether `c` holds for the register `value`. A condition is read two ways, on the whole
  // register and on its low 32 bits (all the kernel uses of an `int` argument, whatever a program
  // puts in the upper half); a rule that restricts (errno, kill) applies when either reading
  // holds, one that lets a call through (allow, trace, notify) only when both do.
  static bool Holds(const Condition& c, uint64_t value, bool restricts);
  static bool WholeRegisterOnly(const Condition& c);

  spec::SupervisorMode mode_ = spec::SupervisorMode::kNone;
  std::vector<Rule> rules_;
  Verdict default_;
  std::vector<std::string> widened_;
  std::vector<int> widened_numbers_;
  std::string filter_;
};

// The name of system call `nr` of the native architecture ("openat"), or "syscall_<nr>".
std::string SyscallName(int nr);

// The number of `name` on the native architecture, or -1 when it has no such call.
int SyscallNumber(std::string_view name);

// Where a verdict's rule is: "process.syscalls[2]", "process.syscallDefaultAction", or what
// the built-in checks are.
std::string RuleName(int rule);

// Rules that restrict `name` with `action` (errno(E) or kill) together with every call of the
// same effect that Compile would ask for: {open, openat, creat}, {execve, execveat}, connect with
// sendmsg, sendmmsg and sendto when it carries an address, and so on (policy.cc, SameEffects).
std::vector<spec::SyscallRule> RulesRestricting(const std::string& name, const std::string& action);

// A rule giving `action` to sendto calls that carry a destination address (args[4] is not 0):
// those reach an endpoint without connect. sendto without one is send() on a connected socket.
spec::SyscallRule AddressedSendto(const std::string& action);

// AUDIT_ARCH_* of the architecture this build runs on.
uint32_t NativeAuditArch();

}  // namespace airlock::supervisor

#endif  // AIRLOCK_SUPERVISOR_POLICY_H_
