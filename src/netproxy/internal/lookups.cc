#include "netproxy/internal/lookups.h"

#include <netdb.h>
#include <sys/socket.h>

#include <system_error>
#include <thread>

namespace airlock::netproxy::internal {

int SystemLookup(const std::string& name, uint16_t port, std::vector<IpAddress>* out) {
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* list = nullptr;
  int rc = ::getaddrinfo(name.c_str(), std::to_string(port).c_str(), &hints, &list);
  if (rc != 0) return rc;
  for (const struct addrinfo* a = list; a != nullptr; a = a->ai_next) {
    if (std::optional<IpAddress> ip = IpAddress::FromSockaddr(a->ai_addr)) out->push_back(*ip);
  }
  ::freeaddrinfo(list);
  return 0;
}

Lookups::Lookups(size_t per_sandbox, size_t threads, LookupFunction lookup)
    : state_(new State{per_sandbox < 1 ? 1 : per_sandbox, threads < 1 ? 1 : threads,
                       lookup ? std::move(lookup) : SystemLookup}) {}

Lookups::~Lookups() { Stop(); }

void Lookups::Stop() {
  std::scoped_lock lock(state_->mu, state_->done_mu);
  state_->stopping = true;
  state_->callbacks.clear();
  state_->cv.notify_all();
}

std::shared_ptr<Lookups::Call> Lookups::Start(const void* sandbox, std::string name, uint16_t port,
                                              std::function<void()> on_done) {
  auto call = std::make_shared<Call>();
  State& s = *state_;
  std::scoped_lock lock(s.mu, s.done_mu);
  if (s.stopping) return call;  // never done
  s.callbacks.emplace(call.get(), std::move(on_done));
  Queue& q = s.queues[sandbox];
  if (q.waiting.empty()) s.turn.push_back(sandbox);
  q.waiting.push_back(Job{call, std::move(name), port});
  ++s.waiting;
  // A thread for every job not taken yet, up to the limit (a job held back by its sandbox's
  // limit may leave one idle until the next). Without a new thread (EAGAIN: a pids limit) the
  // job waits for a running one.
  if (s.threads - s.busy < s.waiting && s.threads < s.max_threads) {
    try {
      std::thread([state = state_] { Work(state); }).detach();
      ++s.threads;
    } catch (const std::system_error&) {
    }
  }
  s.cv.notify_all();
  return call;
}

bool Lookups::TakeNext(State& s, const void** sandbox, Job* job) {
  for (auto it = s.turn.begin(); it != s.turn.end(); ++it) {
    Queue& q = s.queues[*it];
    if (q.running >= s.per_sandbox) continue;
    *sandbox = *it;
    *job = std::move(q.waiting.front());
    q.waiting.pop_front();
    --s.waiting;
    ++q.running;
    s.turn.erase(it);
    if (!q.waiting.empty()) s.turn.push_back(*sandbox);  // its next lookup waits its turn
    return true;
  }
  return false;
}

void Lookups::Work(const std::shared_ptr<State>& state) {
  State& s = *state;
  std::unique_lock lock(s.mu);
  while (true) {
    const void* sandbox = nullptr;
    Job job;
    s.cv.wait(lock, [&] { return s.stopping || TakeNext(s, &sandbox, &job); });
    if (!job.call) break;  // stopping, nothing taken
    ++s.busy;
    lock.unlock();
    if (!job.call->abandoned.load()) {
      std::vector<IpAddress> addresses;
      int error = s.lookup(job.name, job.port, &addresses);
      std::lock_guard call_lock(job.call->mu);
      job.call->error = error;
      job.call->addresses = std::move(addresses);
      job.call->done = true;
    }
    {
      // The callback holds the caller's objects: it runs and is destroyed under done_mu, so
      // that Stop() can tell when none is in use.
      std::lock_guard done_lock(s.done_mu);
      auto it = s.callbacks.find(job.call.get());
      if (it != s.callbacks.end()) {
        if (it->second) it->second();
        s.callbacks.erase(it);
      }
    }
    job = Job();
    lock.lock();
    --s.busy;
    Queue& q = s.queues[sandbox];
    if (--q.running == 0 && q.waiting.empty()) s.queues.erase(sandbox);
    s.cv.notify_all();  // a slot of that sandbox is free
  }
  --s.threads;
}

}  // namespace airlock::netproxy::internal
