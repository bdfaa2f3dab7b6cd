#include "supervisor/supervisor.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "common/files.h"
#include "common/status.h"
#include "fmt/format.h"
#include "supervisor/internal/monitor.h"

namespace airlock::supervisor {
namespace {

absl::Status ActionAvailable(uint32_t action, const char* name) {
  if (::syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) != 0) {
    return FailedPrecondition(
        fmt::format("the kernel has no seccomp {} ({})", name, std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ProbeNotify() {
  RETURN_IF_ERROR(ActionAvailable(SECCOMP_RET_USER_NOTIF, "user notification"),
                  "process.supervisor notify");
  // pidfd_getfd (5.6) hands the listener over; the CONTINUE answer (5.5) comes with it.
  if (::syscall(SYS_pidfd_getfd, -1, 0, 0) == 0 || errno == ENOSYS) {
    return FailedPrecondition(
        "process.supervisor notify: the kernel has no pidfd_getfd (Linux 5.6 or later)");
  }
  struct seccomp_notif_sizes sizes;
  if (::syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) {
    return ErrnoStatus(errno, "process.supervisor notify: SECCOMP_GET_NOTIF_SIZES");
  }
  return absl::OkStatus();
}

absl::Status ProbePtrace() {
  RETURN_IF_ERROR(ActionAvailable(SECCOMP_RET_TRACE, "trace action"), "process.supervisor ptrace");
  if (auto scope = ReadFile("/proc/sys/kernel/yama/ptrace_scope");
      scope.ok() && !scope->empty() && (*scope)[0] == '3') {
    return FailedPrecondition(
        "process.supervisor ptrace: kernel.yama.ptrace_scope is 3 (no ptrace at all until reboot)");
  }
  // What counts is whether we may seize a process here (an outer seccomp filter or LSM may
  // refuse): try on a child that only waits.
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  pid_t child = ::fork();
  if (child == 0) {
    char c;
    (void)!::read(pipefd[0], &c, 1);
    _exit(0);
  }
  ::close(pipefd[0]);
  int err = 0;
  int stop_err = 0;  // stopping the seized child (PTRACE_INTERRUPT and its wait)
  int info_err = 0;  // PTRACE_GET_SYSCALL_INFO's (Linux 5.3), which reads every stopped call
  if (child < 0) {
    err = errno;
  } else if (::ptrace(PTRACE_SEIZE, child, nullptr,
                      reinterpret_cast<void*>(static_cast<long>(PTRACE_O_EXITKILL))) != 0) {
    err = errno;
  } else if (::ptrace(PTRACE_INTERRUPT, child, nullptr, nullptr) != 0 ||
             TEMP_FAILURE_RETRY(::waitpid(child, nullptr, __WALL)) != child) {
    stop_err = errno;  // waitpid of one pid returns it or -1
  } else {
    struct __ptrace_syscall_info info;
    if (::ptrace(PTRACE_GET_SYSCALL_INFO, child, reinterpret_cast<void*>(sizeof(info)), &info) <
        0) {
      info_err = errno;
    }
  }
  ::close(pipefd[1]);
  if (child > 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, __WALL);
  }
  if (child < 0) return ErrnoStatus(err, "process.supervisor ptrace: fork a probe");
  if (err != 0) {
    return FailedPrecondition(fmt::format(
        "process.supervisor ptrace: this process may not trace others here (PTRACE_SEIZE: {})",
        std::strerror(err)));
  }
  if (stop_err != 0) {
    return Internal(fmt::format("process.supervisor ptrace: probe: stop the seized child: {}",
                                std::strerror(stop_err)));
  }
  if (info_err != 0) {
    return FailedPrecondition(
        fmt::format("process.supervisor ptrace: PTRACE_GET_SYSCALL_INFO is not available ({}); "
                    "it needs Linux 5.3 or later",
                    std::strerror(info_err)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckAvailable(spec::SupervisorMode mode) {
  // Each probe runs once, the first time its mode is asked for.
  switch (mode) {
    case spec::SupervisorMode::kNone:
      return absl::OkStatus();
    case spec::SupervisorMode::kNotify: {
      static const absl::Status* notify = new absl::Status(ProbeNotify());
      return *notify;
    }
    case spec::SupervisorMode::kPtrace: {
      static const absl::Status* ptrace = new absl::Status(ProbePtrace());
      return *ptrace;
    }
  }
  return InvalidArgument("unknown supervisor mode");
}

absl::StatusOr<std::unique_ptr<Supervisor>> Supervisor::Start(SupervisorOptions options) {
  if (options.policy == nullptr || !options.kill_command) {
    return InvalidArgument("supervisor: a policy and a way to kill the command are required");
  }
  spec::SupervisorMode mode = options.policy->mode();
  RETURN_IF_ERROR(CheckAvailable(mode));
  // No other process of the same user may read or trace the process whose thread decides.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return ErrnoStatus(errno, "PR_SET_DUMPABLE");
  switch (mode) {
    case spec::SupervisorMode::kNotify:
      return internal::StartNotifyMonitor(std::move(options));
    case spec::SupervisorMode::kPtrace:
      return internal::StartPtraceMonitor(std::move(options));
    case spec::SupervisorMode::kNone:
      break;
  }
  return InvalidArgument("supervisor: the policy's mode is none");
}

}  // namespace airlock::supervisor
