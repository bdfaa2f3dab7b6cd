// State shared between the EgressProxy and its connections. Private to netproxy.
#ifndef AIRLOCK_NETPROXY_INTERNAL_PROXY_STATE_H_
#define AIRLOCK_NETPROXY_INTERNAL_PROXY_STATE_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "boost/asio/generic/stream_protocol.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/strand.hpp"
#include "common/ids.h"
#include "netproxy/egress_proxy.h"
#include "netproxy/internal/lookups.h"
#include "netproxy/policy.h"

namespace airlock::netproxy::internal {

namespace asio = boost::asio;

using Strand = asio::strand<asio::io_context::executor_type>;
using ClientSocket = asio::basic_stream_socket<asio::generic::stream_protocol, Strand>;
using UpstreamSocket = asio::basic_stream_socket<asio::ip::tcp, Strand>;
using Acceptor = asio::basic_socket_acceptor<asio::generic::stream_protocol, Strand>;

class Session;

// The proxy-wide configuration every connection reads (immutable while the proxy runs).
struct ProxyConfig {
  EgressProxy::Options options;
  std::map<std::string, std::vector<IpAddress>> hosts;  // normalized names
  // The node's own addresses (internally synchronized; a pointer so that the config can move).
  std::shared_ptr<LocalAddresses> local_addresses = std::make_shared<LocalAddresses>();
  std::shared_ptr<Lookups> lookups;  // made by EgressProxy::Start from the options
  size_t max_connections = 0;        // all sandboxes together (resolved from the options)
  std::shared_ptr<std::atomic<uint64_t>> active_total = std::make_shared<std::atomic<uint64_t>>(0);
};

// One served sandbox. Counters are updated by its connections on any I/O thread.
struct SandboxState {
  SandboxId id;
  const ProxyConfig* config = nullptr;
  // The Proxy-Authorization header value every request must carry; empty: none. Set before the
  // sandbox is served, never changed after.
  std::string proxy_authorization;

  std::shared_ptr<const Policy> policy() const {
    std::lock_guard lock(mu);
    return policy_;
  }

  mutable std::mutex mu;
  std::shared_ptr<const Policy> policy_;                                // guarded by mu
  std::vector<std::shared_ptr<Acceptor>> acceptors;                     // guarded by mu
  std::vector<std::string> socket_paths;                                // guarded by mu
  std::unordered_map<const Session*, std::weak_ptr<Session>> sessions;  // guarded by mu

  std::atomic<uint64_t> active{0};
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> refused_over_limit{0};
  std::atomic<uint64_t> blocked{0};
  std::atomic<uint64_t> bytes_up{0};
  std::atomic<uint64_t> bytes_down{0};
};

}  // namespace airlock::netproxy::internal

#endif  // AIRLOCK_NETPROXY_INTERNAL_PROXY_STATE_H_
