// Names of kernel objects a spec refers to, checked and resolved the same way by validation and
// by the engine that applies them: capabilities, errno values, syscalls and syscall rule actions.
//
// Pure functions; thread-safe.
#ifndef AIRLOCK_SPEC_KERNEL_NAMES_H_
#define AIRLOCK_SPEC_KERNEL_NAMES_H_

#include <optional>
#include <string_view>
#include <vector>

namespace airlock::spec {

// "CAP_NET_BIND_SERVICE" -> 10. Upper case with the CAP_ prefix, as in capabilities(7).
std::optional<int> CapabilityFromName(std::string_view name);

// "EPERM" -> 1, for every errno value this libc names.
std::optional<int> ErrnoFromName(std::string_view name);

// The architectures whose syscall names a spec is checked against, so that one spec serves
// both: {"x86_64", "aarch64"}.
const std::vector<std::string_view>& SyscallArchitectures();

// The number of `name` on `arch` (one of SyscallArchitectures(), resolved by libseccomp), or
// nullopt when that architecture has no such system call ("open" on aarch64) or the name is
// not a system call at all.
std::optional<int> SyscallNumber(std::string_view arch, std::string_view name);

// Whether `name` is a system call on at least one of SyscallArchitectures().
bool IsKnownSyscall(std::string_view name);

// The action of a process.syscalls rule: "allow", "errno(EPERM)", "kill", "trace" (hand the call to
// the ptrace supervisor) or "notify" (hand it to the seccomp user-notify supervisor).
struct SyscallAction {
  enum class Kind { kAllow, kErrno, kKill, kTrace, kNotify };
  Kind kind = Kind::kAllow;
  int errno_value = 0;  // kErrno only
};

// nullopt when `text` is not one of the forms above (or names an unknown errno).
std::optional<SyscallAction> ParseSyscallAction(std::string_view text);

// Comparison operators of a syscall argument condition: eq, ne, lt, le, gt, ge, masked_eq.
bool IsSyscallArgOp(std::string_view op);

}  // namespace airlock::spec

#endif  // AIRLOCK_SPEC_KERNEL_NAMES_H_
