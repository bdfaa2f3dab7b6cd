#include "engine/fork_worker.h"

#include <dirent.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/status.h"
#include "engine/internal/plan.h"
#include "engine/internal/syscalls.h"
#include "fmt/format.h"

namespace airlock::engine {

namespace {

// The ids of this process's threads (/proc/self/task).
absl::StatusOr<std::vector<pid_t>> ThreadIds() {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return ErrnoStatus(errno, "open /proc/self/task");
  std::vector<pid_t> tids;
  while (struct dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') tids.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  }
  ::closedir(dir);
  return tids;
}

// /proc/self/task/TID/NAME.
std::string TaskFile(pid_t tid, const char* name) {
  return fmt::format("/proc/self/task/{}/{}", tid, name);
}

// Whether the thread `tid` of this process is blocked in a wait that holds no lock: a futex wait
// (a condition variable or semaphore; the mutex of a condition wait is released) or epoll. Its
// state and the system call it is blocked in come from /proc ("running" while it runs).
bool Parked(pid_t tid) {
  absl::StatusOr<std::string> line = ReadFile(TaskFile(tid, "syscall"), 4096);
  if (!line.ok() || line->empty() || (*line)[0] < '0' || (*line)[0] > '9') return false;
  long nr = std::strtol(line->c_str(), nullptr, 10);
  return nr == SYS_futex || nr == SYS_epoll_pwait || nr == SYS_epoll_pwait2
#ifdef SYS_epoll_wait
         || nr == SYS_epoll_wait
#endif
      ;
}

// How often the thread `tid` of this process has left a CPU (voluntary and involuntary context
// switches, /proc/self/task/TID/status), or -1 if that cannot be read.
long Switches(pid_t tid) {
  absl::StatusOr<std::string> status = ReadFile(TaskFile(tid, "status"), 64 << 10);
  if (!status.ok()) return -1;
  long total = 0;
  int found = 0;
  for (std::string_view key : {"\nvoluntary_ctxt_switches:", "\nnonvoluntary_ctxt_switches:"}) {
    size_t at = status->find(key);
    if (at == std::string::npos) continue;
    total += std::strtol(status->c_str() + at + key.size(), nullptr, 10);
    ++found;
  }
  return found == 2 ? total : -1;
}

// A helper thread found parked, with its switch count read just before.
struct Helper {
  pid_t tid;
  long switches;
};

// Every thread but the caller's is parked; tries a few times, a helper may be between waits.
absl::StatusOr<std::vector<Helper>> ParkedHelpers() {
  pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
  pid_t busy = 0;
  for (int attempt = 0; attempt < 20; ++attempt) {
    if (attempt > 0) ::usleep(500);
    busy = 0;
    ASSIGN_OR_RETURN(std::vector<pid_t> tids, ThreadIds());
    std::vector<Helper> helpers;
    for (pid_t tid : tids) {
      if (tid == self) continue;
      long switches = Switches(tid);
      if (switches < 0 || !Parked(tid)) busy = tid;
      helpers.push_back({tid, switches});
    }
    if (busy == 0) return helpers;
  }
  return FailedPrecondition(fmt::format(
      "the zygote's helper thread {} is not parked in a wait; a worker forked now could inherit a "
      "lock it holds",
      busy));
}

// Whether every helper stayed in its wait since ParkedHelpers found it there: parked now, and it
// has not left a CPU since. A helper that woke would be running or runnable now (not parked), or
// would have been switched out again (one more switch).
bool StayedParked(const std::vector<Helper>& helpers) {
  for (const Helper& h : helpers) {
    if (!Parked(h.tid) || Switches(h.tid) != h.switches) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<int> ThreadCount() {
  ASSIGN_OR_RETURN(std::vector<pid_t> tids, ThreadIds());
  return static_cast<int>(tids.size());
}

absl::StatusOr<ForkedWorker> ForkWorker(std::string_view plan, const int* fds, int nfds,
                                        int threads, const std::function<void()>& before_clone) {
  internal::WorkerPlan worker;
  if (!internal::DecodeWorkerPlan(plan, fds, nfds, &worker)) {
    return InvalidArgument("worker plan: malformed");
  }
  ASSIGN_OR_RETURN(int running, ThreadCount());
  if (threads == 1 && running != 1) {
    return FailedPrecondition(fmt::format(
        "the zygote has {} threads; it must be single-threaded when it forks (a library started "
        "a thread: set OPENBLAS_NUM_THREADS=1, OMP_NUM_THREADS=1, or do not preload it)",
        running));
  }
  if (running != threads) {
    return FailedPrecondition(fmt::format(
        "the zygote has {} threads where its runtime keeps {}; a preloaded module started "
        "threads (a thread pool, worker threads), and a worker forked now would lack them",
        running, threads));
  }
  std::vector<Helper> helpers;
  if (threads > 1) {
    ASSIGN_OR_RETURN(helpers, ParkedHelpers());
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
  if (before_clone) before_clone();
  long pid = internal::Clone3(&args);
  if (pid < 0) return ErrnoStatus(errno, "clone3 worker");
  if (pid == 0) {
    internal::EnterWorker(&worker);  // returns only when contained
    return ForkedWorker{0, UniqueFd()};
  }
  ForkedWorker forked{static_cast<pid_t>(pid), UniqueFd(pidfd)};
  // A helper that woke between the check and the clone may have held a lock at the instant the
  // memory was copied. The worker has run none of our code yet (it waits for the host's go), so
  // it is killed unseen and the host asks again.
  // (The host kills it too before it reaps it, should this kill fail.)
  if (!helpers.empty() && !StayedParked(helpers)) {
    (void)internal::PidfdSendSignal(forked.pidfd.get(), SIGKILL);
    forked.discarded = true;
  }
  return forked;
}

}  // namespace airlock::engine
