// The backstop behind the interrupt handler: one process-wide thread that revokes the linear
// memory of a guest still inside one top-level call past its deadline (guest code stuck where the
// engine does not poll the interrupt handler). The guest then traps at its next memory access and
// is discarded; the host and other guests carry on. Thread-safe.
#ifndef AIRLOCK_INTERP_INTERNAL_WATCHDOG_H_
#define AIRLOCK_INTERP_INTERNAL_WATCHDOG_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>

namespace airlock::interp::internal {

class Guest;

class Watchdog {
 public:
  static Watchdog& Get();

  // Watches `guest` until Disarm(token). After Disarm returns the watchdog never touches it.
  uint64_t Arm(Guest* guest, std::chrono::steady_clock::time_point deadline);
  void Disarm(uint64_t token);

  // Guests revoked so far (for tests and metrics).
  uint64_t revocations() const;

 private:
  Watchdog() = default;
  void Loop();

  struct Entry {
    Guest* guest;
    std::chrono::steady_clock::time_point deadline;
  };
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Entry> entries_;
  uint64_t next_token_ = 1;
  uint64_t revocations_ = 0;
  bool started_ = false;
};

}  // namespace airlock::interp::internal

#endif  // AIRLOCK_INTERP_INTERNAL_WATCHDOG_H_
