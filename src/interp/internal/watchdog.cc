#include "interp/internal/watchdog.h"

#include "interp/internal/guest.h"

namespace airlock::interp::internal {

Watchdog& Watchdog::Get() {
  // Never destroyed: its detached thread may outlive static destruction.
  static Watchdog* watchdog = new Watchdog();
  return *watchdog;
}

uint64_t Watchdog::Arm(Guest* guest, std::chrono::steady_clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!started_) {
    started_ = true;
    std::thread([this] { Loop(); }).detach();
  }
  uint64_t token = next_token_++;
  entries_.emplace(token, Entry{guest, deadline});
  cv_.notify_one();
  return token;
}

void Watchdog::Disarm(uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(token);
}

uint64_t Watchdog::revocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return revocations_;
}

void Watchdog::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto now = std::chrono::steady_clock::now();
    auto next = std::chrono::steady_clock::time_point::max();
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.deadline <= now) {
        // Under the lock: Disarm cannot return while the memory is being revoked.
        it->second.guest->Revoke();
        ++revocations_;
        it = entries_.erase(it);
      } else {
        next = std::min(next, it->second.deadline);
        ++it;
      }
    }
    if (next == std::chrono::steady_clock::time_point::max()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, next);
    }
  }
}

}  // namespace airlock::interp::internal
