// The egress proxy: the only way out of a sandbox's network namespace.
//
// One EgressProxy serves many sandboxes. Each sandbox gets its own listener (a unix socket that
// the engine binds into the sandbox, where airlock-forwarder exposes it on 127.0.0.1) and its own
// Policy. The proxy speaks HTTP CONNECT (tunnels) and absolute-form plain HTTP (forwarded request
// by request, bodies streamed through fixed buffers), resolves names itself, checks the policy on
// the request and then on every resolved address, connects only to addresses that pass, and
// reports each refusal as a BlockedNetworkEgress event. It never adds credentials and strips
// Proxy-Authorization and hop-by-hop headers.
//
// Threads: Start() runs Options::threads I/O threads; every method is thread-safe; events are
// delivered on the I/O threads. The destructor stops listeners, closes every connection and joins
// the threads.
#ifndef AIRLOCK_NETPROXY_EGRESS_PROXY_H_
#define AIRLOCK_NETPROXY_EGRESS_PROXY_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/ids.h"
#include "netproxy/address.h"
#include "netproxy/events.h"
#include "netproxy/policy.h"

namespace airlock::netproxy {

// Where names come from. kHostsOnly never sends a DNS query: a name missing from Options::hosts
// fails to resolve (tests use it so that nothing can leave the host).
enum class NameResolution { kSystem, kHostsOnly };

// Who asks for a policy update. kMayLoosen is the caller's authority to widen a running
// sandbox's network; without it an update must provably only tighten (Policy::IsNoLooserThan).
enum class PolicyAuthority { kTightenOnly, kMayLoosen };

// Resolves `name` for TCP `port` into `out`; returns 0 or a getaddrinfo error (EAI_*).
using LookupFunction =
    std::function<int(const std::string& name, uint16_t port, std::vector<IpAddress>* out)>;

struct SandboxStats {
  uint64_t active_connections = 0;
  uint64_t accepted = 0;
  uint64_t refused_over_limit = 0;
  uint64_t blocked = 0;
  uint64_t bytes_up = 0;
  uint64_t bytes_down = 0;
};

class EgressProxy {
 public:
  struct Options {
    int threads = 1;
    std::chrono::milliseconds connect_timeout{10'000};  // resolve + connect, all addresses
    std::chrono::milliseconds header_timeout{15'000};   // a whole request head from the client
    std::chrono::milliseconds idle_timeout{300'000};    // no byte in either direction
    size_t max_connections_per_sandbox = 2048;
    // All sandboxes together; 0: what the descriptor limit allows, at six descriptors a
    // connection (two sockets, two pipes) with 512 kept back for the rest of the process.
    size_t max_connections = 0;
    // Per direction per connection: the pipe a tunnel splices through (kernel memory), or the
    // user-space buffer of a plain-HTTP body or of a tunnel without pipes.
    size_t buffer_bytes = 256 << 10;
    size_t max_header_bytes = 32 << 10;  // request and response heads
    // Static name -> addresses map consulted before DNS ("registry.test" -> {"192.0.2.10"}).
    std::map<std::string, std::vector<std::string>> hosts;
    NameResolution resolution = NameResolution::kSystem;
    // kSystem lookups run on their own threads, at most this many at once for one sandbox
    // (more wait their turn) and this many threads in all: a sandbox that looks up names whose
    // DNS server never answers delays only its own lookups.
    size_t max_lookups_per_sandbox = 4;
    size_t lookup_threads = 32;
    LookupFunction lookup;   // empty: getaddrinfo; tests put a slow resolver here
    EventCallback on_event;  // may be empty

    // Tests: when `static_hosts` is not empty, names resolve from it alone (kHostsOnly).
    void ResolveOnlyFrom(const std::map<std::string, std::vector<std::string>>& static_hosts) {
      if (static_hosts.empty()) return;
      hosts = static_hosts;
      resolution = NameResolution::kHostsOnly;
    }
  };

  // Starts the I/O threads. Fails on bad options (an unparsable hosts entry, threads < 1).
  static absl::StatusOr<std::unique_ptr<EgressProxy>> Start(Options options);
  ~EgressProxy();
  EgressProxy(const EgressProxy&) = delete;
  EgressProxy& operator=(const EgressProxy&) = delete;

  // Serves `sandbox` on a new unix socket at `socket_path` (a stale socket there is replaced;
  // mode 0666 so that the sandbox's user can connect: keep it in a directory only root can
  // enter on the host). AlreadyExists when the sandbox is served already.
  absl::Status AddSandbox(const SandboxId& sandbox, Policy policy, const std::string& socket_path);

  // Like AddSandbox on a TCP listener ("127.0.0.1:0"); returns the bound port. The sandbox is
  // then served on every listener it was added with. Any local user can connect to a TCP port:
  // with `proxy_authorization` (a Proxy-Authorization header value, "Basic ..."), a request
  // without exactly that header gets 407 and goes nowhere. It is fixed when the sandbox is first
  // added (FailedPrecondition for another value later).
  absl::StatusOr<uint16_t> AddSandboxTcp(const SandboxId& sandbox, Policy policy,
                                         const std::string& address,
                                         std::string proxy_authorization = {});

  // Replaces the policy of a running sandbox. Every open connection is checked again: a tunnel or
  // a plain-HTTP exchange under way that the new policy refuses is closed; every new connection
  // and every new plain-HTTP request uses the new policy. Emits PolicyChanged and returns it (the
  // audit record). PermissionDenied when the update loosens and `authority` is kTightenOnly.
  absl::StatusOr<PolicyChanged> UpdatePolicy(
      const SandboxId& sandbox, Policy policy,
      PolicyAuthority authority = PolicyAuthority::kTightenOnly);

  // Stops serving `sandbox`: closes its listeners (removing its socket file) and connections.
  absl::Status RemoveSandbox(const SandboxId& sandbox);

  absl::StatusOr<SandboxStats> Stats(const SandboxId& sandbox) const;

  class Impl;

 private:
  explicit EgressProxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace airlock::netproxy

#endif  // AIRLOCK_NETPROXY_EGRESS_PROXY_H_
