// airlock-forwarder: runs inside a sandbox, accepts TCP connections on a loopback address and
// splices each one to the egress proxy's unix socket (bound into the sandbox by the engine).
//
// Deliberately free of the rest of airlock (no abseil, fmt or Boost) so that it links statically
// and runs in a minimal root. Bytes move with splice(2) through a pipe per direction: no copy to
// user space and no allocation per byte; one allocation per connection.
#ifndef AIRLOCK_NETPROXY_FORWARDER_FORWARDER_H_
#define AIRLOCK_NETPROXY_FORWARDER_FORWARDER_H_

#include <netinet/in.h>

#include <cstddef>
#include <string>

namespace airlock::forwarder {

struct Config {
  sockaddr_storage listen{};  // a loopback IPv4 or IPv6 address and port
  socklen_t listen_len = 0;
  std::string socket_path;  // the proxy's unix socket
  size_t max_connections = 1024;
};

// Parses "127.0.0.1:3128" or "[::1]:3128"; only loopback addresses are accepted. Returns false
// and sets *error on failure.
bool ParseListenAddress(const std::string& text, Config* config, std::string* error);

// Creates the listening socket (before Run, so that a caller can report readiness).
// Returns the fd or -1 with *error set.
int Listen(const Config& config, std::string* error);

// Serves until `stop_fd` becomes readable (or hangs up). Returns 0, or 1 after a fatal error
// (message in *error). Never returns on its own otherwise.
int Run(const Config& config, int listen_fd, int stop_fd, std::string* error);

}  // namespace airlock::forwarder

#endif  // AIRLOCK_NETPROXY_FORWARDER_FORWARDER_H_
