#include "engine/fork_worker.h"

#include <dirent.h>
#include <linux/sched.h>
#include <signal.h>

#include <cerrno>

#include "common/status.h"
#include "engine/internal/plan.h"
#include "engine/internal/syscalls.h"
#include "fmt/format.h"

namespace airlock::engine {

absl::StatusOr<int> ThreadCount() {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return ErrnoStatus(errno, "open /proc/self/task");
  int n = 0;
  while (struct dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n;
}

absl::StatusOr<ForkedWorker> ForkWorker(std::string_view plan, const int* fds, int nfds) {
  internal::WorkerPlan worker;
  if (!internal::DecodeWorkerPlan(plan, fds, nfds, &worker)) {
    return InvalidArgument("worker plan: malformed");
  }
  ASSIGN_OR_RETURN(int threads, ThreadCount());
  if (threads != 1) {
    return FailedPrecondition(fmt::format(
        "the zygote has {} threads; it must be single-threaded when it forks (a library started "
        "a thread: set OPENBLAS_NUM_THREADS=1, OMP_NUM_THREADS=1, or do not preload it)",
        threads));
  }
  int pidfd = -1;
  struct clone_args args = {};
  args.flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
               CLONE_NEWUTS | CLONE_PARENT | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  // With CLONE_PARENT the kernel takes the exit signal from the caller's own (SIGCHLD to the
  // host); clone3 still insists on a valid value here.
  args.exit_signal = 0;
  if (worker.cgroup_fd >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(worker.cgroup_fd);
  }
  long pid = internal::Clone3(&args);
  if (pid < 0) return ErrnoStatus(errno, "clone3 worker");
  if (pid == 0) {
    internal::EnterWorker(&worker);  // returns only when contained
    return ForkedWorker{0, UniqueFd()};
  }
  return ForkedWorker{static_cast<pid_t>(pid), UniqueFd(pidfd)};
}

}  // namespace airlock::engine
