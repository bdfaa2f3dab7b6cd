// NETWORK_REQUIRED: a command that failed after the proxy refused a host it asked for.
//
// Pure functions for the engine: it passes the classification it computed for a command and the
// BlockedNetworkEgress events recorded while the command ran; the verdict names the host that was
// needed so that a human or a policy can decide. Nothing here opens the network.
#ifndef AIRLOCK_NETPROXY_NETWORK_REQUIRED_H_
#define AIRLOCK_NETPROXY_NETWORK_REQUIRED_H_

#include <optional>
#include <string>
#include <vector>

#include "command/command.h"
#include "netproxy/events.h"

namespace airlock::netproxy {

struct NetworkRequired {
  std::string host;  // the first refused host that a policy could open
  uint16_t port = 0;
  std::string rule;                // the rule that refused it
  std::vector<std::string> hosts;  // every distinct refused "host:port", in order of first refusal
};

// Returns a verdict when the command failed (EXIT_NONZERO or COMMAND_TIMEOUT) and at least one
// refused attempt could be opened by a policy change. Refusals that no sandbox policy can open
// (the metadata ranges, the operator's deny list) never make a command NETWORK_REQUIRED: they
// stay plain violations. Any other
// classification (OK, OOM, ...) is returned as nullopt: the network was not why it ended.
std::optional<NetworkRequired> DetectNetworkRequired(
    Classification classification, const std::vector<BlockedNetworkEgress>& blocked);

// Applies a verdict to `result`: classification NETWORK_REQUIRED, failure kNetworkRequired, and a
// report line "network required: <host>:<port> was refused (<rule>); ..." put first in key_lines.
void ApplyNetworkRequired(const NetworkRequired& verdict, CommandResult& result);

}  // namespace airlock::netproxy

#endif  // AIRLOCK_NETPROXY_NETWORK_REQUIRED_H_
