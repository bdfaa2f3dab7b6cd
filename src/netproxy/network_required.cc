#include "netproxy/network_required.h"

#include <algorithm>

#include "fmt/format.h"

namespace airlock::netproxy {
namespace {

// The metadata ranges, and what the node's operator closed on purpose (the node's own
// addresses): no sandbox's policy opens them, so they are not a network the command "needs".
bool NeverOpenable(const BlockedNetworkEgress& e) {
  return IsMetadataRefusal(e) || e.rule.starts_with("operator-deny-cidr:");
}

}  // namespace

std::optional<NetworkRequired> DetectNetworkRequired(
    Classification classification, const std::vector<BlockedNetworkEgress>& blocked) {
  if (classification != Classification::kExitNonzero &&
      classification != Classification::kCommandTimeout) {
    return std::nullopt;
  }
  std::optional<NetworkRequired> verdict;
  for (const BlockedNetworkEgress& e : blocked) {
    if (NeverOpenable(e) || IsRequestRefusal(e.rule)) continue;
    if (!verdict) verdict = NetworkRequired{e.host, e.port, e.rule, {}};
    std::string where = fmt::format("{}:{}", e.host, e.port);
    if (std::find(verdict->hosts.begin(), verdict->hosts.end(), where) == verdict->hosts.end()) {
      verdict->hosts.push_back(std::move(where));
    }
  }
  return verdict;
}

void ApplyNetworkRequired(const NetworkRequired& verdict, CommandResult& result) {
  result.classification = Classification::kNetworkRequired;
  result.failure = FailureKind::kNetworkRequired;
  std::string line = fmt::format(
      "network required: {}:{} was refused ({}); the sandbox's network policy must allow it for "
      "this command to succeed",
      verdict.host, verdict.port, verdict.rule);
  if (verdict.hosts.size() > 1) {
    line += fmt::format(" (refused: {})", fmt::join(verdict.hosts, ", "));
  }
  result.key_lines.insert(result.key_lines.begin(), line);
}

}  // namespace airlock::netproxy
