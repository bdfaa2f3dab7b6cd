#include "supervisor/internal/arch.h"

#include <elf.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>

#include <cerrno>

namespace airlock::supervisor::internal {

#if defined(__x86_64__)

int SkipSyscall(pid_t tid, int err) {
  // orig_rax is the call's number: -1 skips it (the kernel re-reads it after the seccomp stop)
  // and rax, which the skipped call leaves alone, becomes its return value.
  struct user_regs_struct regs;
  if (::ptrace(PTRACE_GETREGS, tid, nullptr, &regs) != 0) return errno;
  regs.orig_rax = static_cast<unsigned long long>(-1);
  regs.rax = static_cast<unsigned long long>(-static_cast<long long>(err));
  if (::ptrace(PTRACE_SETREGS, tid, nullptr, &regs) != 0) return errno;
  return 0;
}

#elif defined(__aarch64__)

int SkipSyscall(pid_t tid, int err) {
  // The number lives in its own register set (NT_ARM_SYSTEM_CALL); x0 is the return value of
  // a skipped call (the argument it held is kept apart in orig_x0).
  struct user_pt_regs regs;
  struct iovec iov = {&regs, sizeof(regs)};
  if (::ptrace(PTRACE_GETREGSET, tid, NT_PRSTATUS, &iov) != 0) return errno;
  regs.regs[0] = static_cast<unsigned long long>(-static_cast<long long>(err));
  if (::ptrace(PTRACE_SETREGSET, tid, NT_PRSTATUS, &iov) != 0) return errno;
  int nr = -1;
  struct iovec nr_iov = {&nr, sizeof(nr)};
  if (::ptrace(PTRACE_SETREGSET, tid, NT_ARM_SYSTEM_CALL, &nr_iov) != 0) return errno;
  return 0;
}

#else
#error "the ptrace supervisor knows x86_64 and aarch64"
#endif

}  // namespace airlock::supervisor::internal
