// The command cgroups of one sandbox, made and removed off the commands' critical path.
//
// Every command runs in a cgroup of its own (its usage is read there, and killing its tree kills
// only it). Making one is a mkdir and limit writes in every hierarchy (six on a cgroup v1 host),
// removing it an rmdir in each: a large share of a warm exec's cost when done while the caller
// waits. CommandCgroups keeps one fresh cgroup ready ahead of time (with its entry descriptors
// open) and removes finished ones after their command's result has gone back, both on its own
// thread.
//
// A cgroup is never reused: a command always gets one no process has been in, so its peaks and
// counters (memory and pids peaks, OOM kills, refused forks) are its own without any reset.
//
// Thread safety: Take and Remove may be called from any thread; Stop must not race with them.
#ifndef AIRLOCK_ENGINE_INTERNAL_COMMAND_CGROUPS_H_
#define AIRLOCK_ENGINE_INTERNAL_COMMAND_CGROUPS_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cgroup.h"

namespace airlock::engine::internal {

class CommandCgroups {
 public:
  // Makes the cgroup of command `number` with its limits; a failure leaves nothing behind.
  using Maker = std::function<absl::StatusOr<std::unique_ptr<Cgroup>>(int number)>;
  // Removes a finished command's cgroup (killing what is left in it first).
  using Remover = std::function<absl::Status()>;

  struct Numbered {
    int number = 0;
    std::unique_ptr<Cgroup> cgroup;
    Cgroup::Entry entry;  // cgroup->OpenEntry(), opened with it
  };

  // `next_number` hands out command numbers (shared with the caller's other uses). The thread
  // starts at once and makes the first spare; with `one_ahead_only`, that one is the only spare
  // it makes (later Takes make their own).
  CommandCgroups(Maker make, std::function<int()> next_number, bool one_ahead_only = false);
  ~CommandCgroups();  // Stop(), logging a failure
  CommandCgroups(const CommandCgroups&) = delete;
  CommandCgroups& operator=(const CommandCgroups&) = delete;

  // A fresh cgroup: the spare if it is ready (the thread then makes the next one), otherwise one
  // made now on the caller's thread, whose error is returned.
  absl::StatusOr<Numbered> Take();

  // Queues a finished command's cgroup for removal. A failure on the thread is logged as a
  // warning (what is left goes with the sandbox's cgroup).
  void Remove(Remover remove);

  // Ends the thread, then runs the removals still queued and removes the spare on the caller's
  // thread. Returns the first of their failures. Idempotent; Take and Remove must not be called
  // afterwards.
  absl::Status Stop();

 private:
  void Run();
  // A cgroup made by make_ with its entry opened; nothing left behind on failure.
  absl::StatusOr<Numbered> Make(int number);

  Maker make_;
  std::function<int()> next_number_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Numbered> spare_;  // under mu_
  bool want_spare_ = true;         // under mu_: false after a failed attempt until the next Take
  const bool one_ahead_only_;
  std::deque<Remover> removals_;  // under mu_
  bool stopping_ = false;         // under mu_
  std::thread thread_;
};

}  // namespace airlock::engine::internal

#endif  // AIRLOCK_ENGINE_INTERNAL_COMMAND_CGROUPS_H_
