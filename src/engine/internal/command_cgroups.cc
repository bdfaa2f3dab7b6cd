#include "engine/internal/command_cgroups.h"

#include "common/logging.h"
#include "common/status.h"

namespace airlock::engine::internal {
namespace {

const Logger& Log() {
  static const Logger& logger = GetLogger("engine");
  return logger;
}

}  // namespace

CommandCgroups::CommandCgroups(Maker make, std::function<int()> next_number, bool one_ahead_only)
    : make_(std::move(make)),
      next_number_(std::move(next_number)),
      one_ahead_only_(one_ahead_only) {
  thread_ = std::thread([this] { Run(); });
}

CommandCgroups::~CommandCgroups() {
  if (absl::Status s = Stop(); !s.ok()) {
    Log().Warn("remove command cgroups", {{"error", Message(s)}});
  }
}

absl::StatusOr<CommandCgroups::Numbered> CommandCgroups::Take() {
  {
    std::lock_guard lock(mu_);
    want_spare_ = !one_ahead_only_;
    if (spare_) {
      Numbered taken = *std::move(spare_);
      spare_.reset();
      cv_.notify_one();
      return taken;
    }
    cv_.notify_one();
  }
  // The thread has not caught up (commands started back to back, or concurrently): this one
  // pays for its own, and an error reaches the caller.
  return Make(next_number_());
}

absl::StatusOr<CommandCgroups::Numbered> CommandCgroups::Make(int number) {
  ASSIGN_OR_RETURN(std::unique_ptr<Cgroup> cgroup, make_(number));
  absl::StatusOr<Cgroup::Entry> entry = cgroup->OpenEntry();
  if (!entry.ok()) {
    (void)cgroup->Destroy();
    return Annotate(entry.status(), "open command cgroup");
  }
  return Numbered{number, std::move(cgroup), *std::move(entry)};
}

void CommandCgroups::Remove(Remover remove) {
  std::lock_guard lock(mu_);
  removals_.push_back(std::move(remove));
  cv_.notify_one();
}

void CommandCgroups::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !removals_.empty() || (want_spare_ && !spare_); });
    if (stopping_) return;
    // Removals first: a finished command's cgroup goes while its result travels back, and the
    // spare is needed only by the next command.
    if (!removals_.empty()) {
      Remover remove = std::move(removals_.front());
      removals_.pop_front();
      lock.unlock();
      if (absl::Status s = remove(); !s.ok()) {
        Log().Warn("remove command cgroup", {{"error", Message(s)}});
      }
      lock.lock();
      continue;
    }
    lock.unlock();
    absl::StatusOr<Numbered> made = Make(next_number_());
    lock.lock();
    if (!made.ok()) {
      // Take makes its own and reports the error; retrying here would only spin.
      want_spare_ = false;
      Log().Warn("make a command cgroup ahead of time", {{"error", Message(made.status())}});
      continue;
    }
    if (stopping_) {
      // Stop removes only the spare it finds once this thread has ended.
      lock.unlock();
      (void)made->cgroup->Destroy();
      lock.lock();
      continue;
    }
    spare_ = *std::move(made);
  }
}

absl::Status CommandCgroups::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  std::deque<Remover> removals;
  std::optional<Numbered> spare;
  {
    std::lock_guard lock(mu_);
    removals.swap(removals_);
    spare.swap(spare_);
  }
  absl::Status status;
  for (Remover& remove : removals) status.Update(Annotate(remove(), "remove command cgroup"));
  if (spare) status.Update(Annotate(spare->cgroup->Destroy(), "remove unused command cgroup"));
  return status;
}

}  // namespace airlock::engine::internal
