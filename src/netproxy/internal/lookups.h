// Name lookups for the egress proxy, off its I/O threads. Private to netproxy.
//
// getaddrinfo blocks for as long as the DNS server takes to answer, and a sandbox can choose
// names whose server never answers. Each lookup therefore runs on a thread of a pool that grows
// to `threads`; one sandbox has at most `per_sandbox` lookups running at once, and waiting
// lookups are taken sandbox by sandbox in turn. A sandbox that looks up slow names delays its
// own lookups, not another sandbox's.
#ifndef AIRLOCK_NETPROXY_INTERNAL_LOOKUPS_H_
#define AIRLOCK_NETPROXY_INTERNAL_LOOKUPS_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "netproxy/address.h"
#include "netproxy/egress_proxy.h"

namespace airlock::netproxy::internal {

// getaddrinfo(name, port, AF_UNSPEC, SOCK_STREAM).
int SystemLookup(const std::string& name, uint16_t port, std::vector<IpAddress>* out);

class Lookups {
 public:
  // One lookup. `done` says whether the result is in; the caller may abandon it (a timeout), and
  // a lookup abandoned before it started is never run.
  struct Call {
    std::mutex mu;
    bool done = false;                 // guarded by mu
    int error = 0;                     // guarded by mu: 0 or EAI_*
    std::vector<IpAddress> addresses;  // guarded by mu
    std::atomic<bool> abandoned{false};
  };

  Lookups(size_t per_sandbox, size_t threads, LookupFunction lookup);
  // Stop() and return at once: lookups in progress end on their threads when getaddrinfo does.
  ~Lookups();

  // From now on no `on_done` runs, and every one not run yet is destroyed (none runs or is
  // destroyed after this returns): call it before whatever the callbacks hold goes away.
  void Stop();
  Lookups(const Lookups&) = delete;
  Lookups& operator=(const Lookups&) = delete;

  // Queues a lookup for `sandbox` (any stable key); `on_done` runs on a lookup thread when its
  // result is in (also for an abandoned call, which then has none).
  std::shared_ptr<Call> Start(const void* sandbox, std::string name, uint16_t port,
                              std::function<void()> on_done);

 private:
  struct Job {
    std::shared_ptr<Call> call;
    std::string name;
    uint16_t port = 0;
  };
  struct Queue {
    std::deque<Job> waiting;
    size_t running = 0;
  };
  // Shared with the threads, which may outlive this object.
  struct State {
    const size_t per_sandbox;
    const size_t max_threads;
    const LookupFunction lookup;
    std::mutex mu;
    std::condition_variable cv;
    bool stopping = false;  // guarded by mu and by done_mu
    std::mutex done_mu;     // held while an on_done runs or is destroyed
    std::map<const Call*, std::function<void()>> callbacks;  // guarded by done_mu
    size_t threads = 0;                                      // guarded by mu
    size_t busy = 0;                                         // guarded by mu
    size_t waiting = 0;                                      // guarded by mu: jobs not taken yet
    std::map<const void*, Queue> queues;                     // guarded by mu
    std::deque<const void*> turn;  // guarded by mu: sandboxes with waiting jobs
  };
  static void Work(const std::shared_ptr<State>& state);
  // The next job whose sandbox is under its limit, in turn order; false when there is none.
  static bool TakeNext(State& s, const void** sandbox, Job* job);

  std::shared_ptr<State> state_;
};

}  // namespace airlock::netproxy::internal

#endif  // AIRLOCK_NETPROXY_INTERNAL_LOOKUPS_H_
