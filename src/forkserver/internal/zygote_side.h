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

// Marks every shared mapping of the zygote that may be written MADV_DONTFORK, so no worker gets
// one: such a mapping (a preload's mmap(MAP_SHARED), multiprocessing's shared arrays, a memmap
// in r+ mode) would be memory every worker and the zygote write to. A read-only shared mapping
// of a file opened read-only (no "mw" in its VmFlags: numpy.load(mmap_mode='r'), model weights)
// is kept: nobody can write it. With `share_private`, private mappings are marked MADV_DOFORK
// (undoing a runtime's own DONTFORK, V8's heap, so workers get them copy-on-write); otherwise
// they are left as they are. Runs before each fork: a preload's mappings may change until the
// first. False when /proc/self/maps or smaps cannot be read: the caller must not fork.
bool KeepSharedMappingsFromWorkers(bool share_private);

// Serves kFork requests: forks each worker (engine::ForkWorker with `threads`, see there), closes
// the request's descriptors and replies with the worker's pid and pidfd, or why it failed; a
// malformed request is answered EINVAL. Returns the request in a worker, once it is contained
// (the hooks' `after` does not run there), or nothing in the zygote when the socket closed.
std::optional<ForkRequest> ServeForks(int threads, const ForkHooks& hooks);

}  // namespace airlock::forkserver::internal

#endif  // AIRLOCK_FORKSERVER_INTERNAL_ZYGOTE_SIDE_H_
