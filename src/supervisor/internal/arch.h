// Register access of a ptrace-stopped tracee, per architecture (x86_64 and aarch64). Reading a
// call's number and arguments goes through PTRACE_GET_SYSCALL_INFO, the same on every
// architecture; changing what a call does needs the registers themselves.
#ifndef AIRLOCK_SUPERVISOR_INTERNAL_ARCH_H_
#define AIRLOCK_SUPERVISOR_INTERNAL_ARCH_H_

#include <sys/types.h>

namespace airlock::supervisor::internal {

// At a seccomp stop: skips the call, which returns -err to the tracee. 0 or an errno value.
int SkipSyscall(pid_t tid, int err);

}  // namespace airlock::supervisor::internal

#endif  // AIRLOCK_SUPERVISOR_INTERNAL_ARCH_H_
