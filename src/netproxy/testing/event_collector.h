// Collects the events of an EgressProxy for assertions. Test-only; thread-safe.
#ifndef AIRLOCK_NETPROXY_TESTING_EVENT_COLLECTOR_H_
#define AIRLOCK_NETPROXY_TESTING_EVENT_COLLECTOR_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "netproxy/events.h"

namespace airlock::netproxy::testing {

class EventCollector {
 public:
  EventCallback Callback() {
    return [this](const EgressEvent& e) {
      std::lock_guard lock(mu_);
      events_.push_back(e);
      cv_.notify_all();
    };
  }

  template <typename T>
  std::vector<T> All() const {
    std::lock_guard lock(mu_);
    std::vector<T> out;
    for (const EgressEvent& e : events_) {
      if (const T* t = std::get_if<T>(&e)) out.push_back(*t);
    }
    return out;
  }

  std::vector<BlockedNetworkEgress> Blocked() const { return All<BlockedNetworkEgress>(); }

  // Waits until at least `n` events of type T were seen (up to 10 s); returns them.
  template <typename T>
  std::vector<T> WaitFor(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] {
      size_t count = 0;
      for (const EgressEvent& e : events_) count += std::holds_alternative<T>(e) ? 1 : 0;
      return count >= n;
    });
    lock.unlock();
    return All<T>();
  }

  void Clear() {
    std::lock_guard lock(mu_);
    events_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<EgressEvent> events_;
};

}  // namespace airlock::netproxy::testing

#endif  // AIRLOCK_NETPROXY_TESTING_EVENT_COLLECTOR_H_
