// The ptrace monitor. Every ptrace request for a tracee must come from the thread that seized
// it, so the seize happens on the monitor's own thread, which then waits for its tracees only
// (__WNOTHREAD: never for the host process's children, such as other sandboxes' init).
//
// A tracee that has stopped, or ended without this thread having collected its end, cannot be
// reaped by its parent, so its tid stays its own while we look at it: memory is read with
// process_vm_readv and registers changed by tid without a reuse race.
#include <poll.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>

#include "common/status.h"
#include "fmt/format.h"
#include "supervisor/internal/arch.h"
#include "supervisor/internal/monitor.h"

namespace airlock::supervisor::internal {
namespace {

constexpr long kOptions = PTRACE_O_EXITKILL | PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACECLONE |
                          PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACEEXEC |
                          PTRACE_O_TRACESECCOMP;

void Resume(pid_t tid, int sig) {
  // ESRCH: killed meanwhile; its end comes through waitpid.
  (void)::ptrace(PTRACE_CONT, tid, nullptr, reinterpret_cast<void*>(static_cast<long>(sig)));
}

bool IsStopSignal(int sig) {
  return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

class PtraceMonitor : public Monitor {
 public:
  explicit PtraceMonitor(SupervisorOptions options) : Monitor(std::move(options), "ptrace") {}
  ~PtraceMonitor() override { Shutdown(); }

  void Begin() { StartThread(); }

 private:
  void Run() override;
  absl::Status Seize(const Target& target);
  void HandleSeccompStop(pid_t tid);
};

absl::Status PtraceMonitor::Seize(const Target& target) {
  if (::ptrace(PTRACE_SEIZE, target.pid, nullptr, reinterpret_cast<void*>(kOptions)) != 0) {
    return ErrnoStatus(errno, "PTRACE_SEIZE");
  }
  // The process waits for its start and nobody else ends it, but the pid was looked up before:
  // if its pidfd says it is gone, the seized pid belongs to someone else. Let that one go
  // (interrupt, wait for the stop, detach: EXITKILL no longer applies) and fail.
  struct pollfd p = {target.pidfd, POLLIN, 0};
  if (::poll(&p, 1, 0) == 1) {
    ::ptrace(PTRACE_INTERRUPT, target.pid, nullptr, nullptr);
    int status;
    if (::waitpid(target.pid, &status, __WALL | __WNOTHREAD) == target.pid && WIFSTOPPED(status)) {
      ::ptrace(PTRACE_DETACH, target.pid, nullptr, nullptr);
    }
    return NotFound("the process ended before it could be traced");
  }
  return absl::OkStatus();
}

void PtraceMonitor::Run() {
  std::optional<Target> target = WaitForTarget();
  if (!target) return;
  absl::Status seized = Seize(*target);
  Attached(seized);
  if (!seized.ok()) return;
  for (;;) {
    int status = 0;
    pid_t tid = ::waitpid(-1, &status, __WALL | __WNOTHREAD);
    if (tid < 0) {
      if (errno == EINTR) continue;
      if (errno != ECHILD) Fail(fmt::format("waitpid: {}", std::strerror(errno)));
      return;  // ECHILD: every tracee has ended
    }
    if (!WIFSTOPPED(status)) continue;  // ended
    const int sig = WSTOPSIG(status);
    const int event = (status >> 16) & 0xff;
    switch (event) {
      case PTRACE_EVENT_SECCOMP:
        HandleSeccompStop(tid);
        break;
      case PTRACE_EVENT_STOP:
        // A group stop (SIGSTOP and friends) waits for SIGCONT without running; any other
        // event stop (a new child's first stop, an interrupt) just continues.
        if (IsStopSignal(sig)) {
          (void)::ptrace(PTRACE_LISTEN, tid, nullptr, nullptr);
        } else {
          Resume(tid, 0);
        }
        break;
      case 0:
        // A signal on its way to the tracee: deliver it.
        Resume(tid, sig == (SIGTRAP | 0x80) ? 0 : sig);
        break;
      default:  // fork, vfork, clone (the child is traced already), exec, vfork done
        Resume(tid, 0);
        break;
    }
  }
}

void PtraceMonitor::HandleSeccompStop(pid_t tid) {
  struct __ptrace_syscall_info info;
  std::memset(&info, 0, sizeof(info));
  long n = ::ptrace(PTRACE_GET_SYSCALL_INFO, tid, reinterpret_cast<void*>(sizeof(info)), &info);
  if (n <= 0 || info.op != PTRACE_SYSCALL_INFO_SECCOMP) {
    // Not resumed: a call we cannot read may be one to deny, and the kernel runs it once we
    // let it go. The kill wakes it to die; a thread already gone (ESRCH) needs nothing.
    if (n < 0 && errno == ESRCH) return;
    Fail(fmt::format("read the stopped call of thread {}: {}", tid,
                     n < 0 ? std::strerror(errno) : "not a seccomp stop"));
    return;
  }
  seccomp_data call = {};
  call.nr = static_cast<int>(info.seccomp.nr);
  call.arch = info.arch;
  call.instruction_pointer = info.instruction_pointer;
  for (int i = 0; i < 6; ++i) call.args[i] = info.seccomp.args[i];
  ProcessVmReader mem(tid);
  Decision d = Decide(call, &mem);
  if (d.what != Decision::What::kContinue) {
    if (int err = SkipSyscall(tid, d.err); err != 0) {
      // Not resumed: the denied call must not run. The kill wakes it to die.
      if (err != ESRCH) {
        Fail(fmt::format("skip a denied {}: {}", SyscallName(call.nr), std::strerror(err)));
      }
      return;
    }
  }
  Resume(tid, 0);
}

}  // namespace

std::unique_ptr<Supervisor> StartPtraceMonitor(SupervisorOptions options) {
  auto m = std::make_unique<PtraceMonitor>(std::move(options));
  m->Begin();
  return m;
}

}  // namespace airlock::supervisor::internal
