// The seccomp-bpf filter of sandboxed commands, built with libseccomp on the host side.
#ifndef AIRLOCK_ENGINE_INTERNAL_SECCOMP_H_
#define AIRLOCK_ENGINE_INTERNAL_SECCOMP_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "supervisor/policy.h"

namespace airlock::engine::internal {

// The default profile as a raw BPF program (struct sock_filter[]) for the native architecture:
// an allowlist of what shells, compilers, interpreters and build tools need, the always-denied
// operations answered with an errno, and SECCOMP_RET_KILL_PROCESS for everything else
// (including foreign-architecture and x32 system calls).
absl::StatusOr<std::string> BuildSeccompFilter();

// The same default profile, compiled by BuildSeccompFilter() when airlock was built
// (seccomp_gen.cc writes it into the engine library): what sandboxes use, with no libseccomp
// work at run time. seccomp_test checks that both are the same program.
std::string_view DefaultSeccompFilter();

// Whether the profile lets a process create a seccomp user-notification listener. Only
// airlock-init's, under a notify supervisor, does: each command installs the policy filter with
// its listener before the whole profile (supervisor/policy.h, init/protocol.h).
enum class Listeners { kRefused, kAllowed };

// The same profile, also allowing `widened` (names it does not otherwise allow, for a syscall
// policy that decides those calls itself: supervisor/policy.h), and killing where it refuses a
// call of `killed` by its arguments (names of FilteredSyscalls()). Built at each call.
absl::StatusOr<std::string> BuildSeccompFilter(const std::vector<std::string>& widened,
                                               Listeners listeners = Listeners::kRefused,
                                               const std::vector<std::string>& killed = {});

// Names of the system calls the profile allows or refuses by their arguments (kFiltered).
const std::vector<std::string>& FilteredSyscalls();

// How the profile treats a system call, by name (for checking a syscall policy against it;
// kFiltered: ioctl, clone, unshare, seccomp, personality, socket, and the calls that create or
// chmod files, refused with a setuid or setgid bit).
supervisor::ProfileTreatment TreatmentOf(std::string_view name);

// Names of the system calls that are always denied, whatever the spec says (for docs and
// for the supervisor's "cannot re-allow" check).
const std::vector<std::string>& AlwaysDeniedSyscalls();

}  // namespace airlock::engine::internal

#endif  // AIRLOCK_ENGINE_INTERNAL_SECCOMP_H_
