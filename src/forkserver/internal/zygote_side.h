// What every zygote program (airlock-zygote-python, the Node addon) does on its side of the
// socketpair with the fork-server (zygote_protocol.h): check that it was started by one, say it is
// ready, and serve fork requests until one makes a worker.
#ifndef AIRLOCK_FORKSERVER_INTERNAL_ZYGOTE_SIDE_H_
#define AIRLOCK_FORKSERVER_INTERNAL_ZYGOTE_SIDE_H_

#include <functional>
#include <optional>

#include "forkserver/internal/zygote_protocol.h"

namespace airlock::forkserver::internal {

// Whether kZygoteFd is a socket: the fork-server started this program.
bool HasForkServerSocket();

// Sends kReady; false when the fork-server's socket is closed.
bool SendReady();

// What the runtime does around each fork, in the zygote.
struct ForkHooks {
  std::function<void()> before;  // just before the worker is cloned
  std::function<void()> after;   // right after, whether or not the clone worked
  // After the helper threads were found parked, just before the clone (the tests wake one here).
  std::function<void()> before_clone;
};

// Serves kFork requests: forks each worker (engine::ForkWorker with `threads`, see there), closes
// the request's descriptors and replies with the worker's pid and pidfd, or why it failed; a
// malformed request is answered EINVAL. Returns the request in a worker, once it is contained
// (the hooks' `after` does not run there), or nothing in the zygote when the socket closed.
std::optional<ForkRequest> ServeForks(int threads, const ForkHooks& hooks);

}  // namespace airlock::forkserver::internal

#endif  // AIRLOCK_FORKSERVER_INTERNAL_ZYGOTE_SIDE_H_
