#include "supervisor/testing/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/status.h"
#include "init/protocol.h"
#include "supervisor/supervisor.h"

namespace airlock::supervisor::testing {

absl::StatusOr<Launched> Launch(std::string_view profile, const SyscallPolicy& policy,
                                const std::vector<std::string>& argv, bool keep_stderr) {
  int start[2], out[2], info[2];
  if (::pipe2(start, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 ||
      ::pipe2(info, O_CLOEXEC) != 0) {
    return ErrnoStatus(errno, "pipe");
  }
  // Everything the child needs, prepared before fork (the caller may have threads).
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const init::PolicyListener listener = policy.mode() == spec::SupervisorMode::kNotify
                                            ? init::PolicyListener::kNotify
                                            : init::PolicyListener::kNone;
  Launched l;
  l.reaper = ::fork();
  if (l.reaper < 0) return ErrnoStatus(errno, "fork");
  if (l.reaper == 0) {
    pid_t child = ::fork();
    if (child == 0) {
      ::setpgid(0, 0);
      ::dup2(out[1], 1);
      if (!keep_stderr) {
        int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 2);
      }
      ::dup2(start[0], 3);  // fds 0-3 taken: the listener lands at 4, as in airlock-init
      ::close_range(4, ~0U, 0);
      char go;
      if (::read(3, &go, 1) != 1) _exit(125);
      ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
      if (int err = init::InstallFilters(profile, policy.filter(), listener, init::kListenerFd);
          err != 0) {
        _exit(100 + err);
      }
      ::execv(args[0], args.data());
      _exit(127);
    }
    (void)!::write(info[1], &child, sizeof(child));
    ::close(out[1]);
    ::close(start[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    _exit(WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status));
  }
  ::close(start[0]);
  ::close(out[1]);
  ::close(info[1]);
  l.start.Reset(start[1]);
  l.output.Reset(out[0]);
  UniqueFd info_r(info[0]);
  if (::read(info_r.get(), &l.pid, sizeof(l.pid)) != static_cast<ssize_t>(sizeof(l.pid))) {
    return Internal("the launcher died");
  }
  l.pidfd.Reset(static_cast<int>(::syscall(SYS_pidfd_open, l.pid, 0)));
  if (!l.pidfd) return ErrnoStatus(errno, "pidfd_open");
  return l;
}

int WaitReaper(pid_t reaper) {
  int status = 0;
  if (::waitpid(reaper, &status, 0) != reaper) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

absl::StatusOr<HostRun> RunUnderPolicy(std::string_view profile,
                                       std::shared_ptr<const SyscallPolicy> policy,
                                       const std::vector<std::string>& argv,
                                       SyscallEventSink* events) {
  ASSIGN_OR_RETURN(Launched l, Launch(profile, *policy, argv));
  std::unique_ptr<Supervisor> sup;
  if (policy->mode() != spec::SupervisorMode::kNone) {
    pid_t pid = l.pid;
    auto started = Supervisor::Start(
        {.policy = policy, .kill_command = [pid] { ::kill(-pid, SIGKILL); }, .events = events});
    absl::Status attached =
        started.ok() ? (*started)->Attach({.pidfd = l.pidfd.get(), .pid = pid}) : started.status();
    if (!attached.ok()) {
      ::kill(pid, SIGKILL);
      WaitReaper(l.reaper);
      return attached;
    }
    sup = std::move(*started);
  }
  HostRun r;
  if (::write(l.start.get(), "g", 1) != 1) return ErrnoStatus(errno, "start");
  l.start.Reset();
  char buf[4096];
  ssize_t n;
  while ((n = ::read(l.output.get(), buf, sizeof(buf))) > 0) {
    r.output.append(buf, static_cast<size_t>(n));
  }
  r.exit_code = WaitReaper(l.reaper);
  if (sup) {
    if (!sup->WaitDone(std::chrono::seconds(5))) {
      return absl::DeadlineExceededError(
          "the supervisor still had processes 5 s after the program ended");
    }
    r.report = sup->Report();
  }
  return r;
}

}  // namespace airlock::supervisor::testing
