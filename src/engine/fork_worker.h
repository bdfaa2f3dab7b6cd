// The zygote's side of a fork-server worker (the host's side is engine/forked_sandbox.h): a
// small library (airlock_engine_worker: the containment steps, libc and abseil) that a zygote
// program links without the rest of the engine.
#ifndef AIRLOCK_ENGINE_FORK_WORKER_H_
#define AIRLOCK_ENGINE_FORK_WORKER_H_

#include <sys/types.h>

#include <functional>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace airlock::engine {

// A forked worker as the host sees it: its pid (in the host's pid namespace) and a pidfd.
struct ForkedWorker {
  pid_t pid = -1;
  UniqueFd pidfd;
  // Cloned while a helper thread of the zygote ran, so its memory may hold a lock taken midway.
  // It was sent SIGKILL while it waited for the host's release, before it ran any code of the
  // zygote (only the first containment steps). The host kills it too, reaps it, asks again.
  bool discarded = false;
};

// Zygote side: decodes a WorkerLaunch's plan (with the descriptors that came with it) and clones
// the worker: clone3(CLONE_NEWUSER|NEWPID|NEWNS|NEWNET|NEWIPC|NEWUTS|CLONE_PARENT|CLONE_PIDFD),
// on cgroup v2 straight into its cgroup. In the caller, returns the worker's pid and pidfd (send
// them to the host; the caller closes its copies of `fds`). In the worker, returns pid 0 once it
// is contained (stdio on its pipes, every other descriptor closed, seccomp on): the caller then
// runs the code and exits. A failed containment step is reported to the host and the worker
// _exits; it never returns.
//
// A fork copies only the calling thread: a lock another thread holds stays locked forever in the
// worker. So the caller must be single-threaded (`threads` = 1), or declare the idle helper
// threads its runtime keeps (`threads` = 1 + their number; node's platform threads): there must
// be exactly that many, and every other thread must be parked in a wait (futex, epoll) when the
// worker is cloned, holding no lock the worker could need. Each helper is found parked before the
// clone and found again in the same wait after it, with no context switch in between; otherwise
// the worker comes back `discarded`.
// Errors: a malformed plan (InvalidArgument); another number of threads, or a helper thread not
// parked (FailedPrecondition); clone3's errno.
// `before_clone`, if set, runs after the helpers were found parked, just before the clone.
absl::StatusOr<ForkedWorker> ForkWorker(std::string_view plan, const int* fds, int nfds,
                                        int threads = 1,
                                        const std::function<void()>& before_clone = nullptr);

// The number of threads of the calling process (/proc/self/task), or an error.
absl::StatusOr<int> ThreadCount();

}  // namespace airlock::engine

#endif  // AIRLOCK_ENGINE_FORK_WORKER_H_
