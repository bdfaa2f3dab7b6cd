// The egress policy of one sandbox: its spec's network section compiled together with the
// operator's policy, and the decisions the proxy asks of it.
//
// A connection is decided in two steps:
//   1. CheckRequest, before any DNS lookup: is this host:port (and, for plain HTTP in
//      restricted-http, this method and path) allowed by the profile? A host that is not allowed
//      is never resolved, so a lookup cannot carry data out.
//   2. CheckAddress, on EVERY address the name resolved to (and on IP literals): the always-denied
//      ranges, the spec's denyCidrs, and what the operator opened. The proxy connects only to
//      addresses that pass, so a name that resolves (or rebinds) to a private or metadata address
//      never reaches it.
// Profiles are described in docs/network.md. Immutable after Compile; thread-safe.
#ifndef AIRLOCK_NETPROXY_POLICY_H_
#define AIRLOCK_NETPROXY_POLICY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "netproxy/address.h"
#include "netproxy/host_pattern.h"
#include "nlohmann/json.hpp"
#include "spec/sandbox_spec.h"

namespace airlock::netproxy {

// What the operator of a node (its configuration file, never a sandbox's spec and never a prompt)
// may open: private destinations such as an internal registry. Opening weakens every sandbox that
// uses the policy, so it is a type of its own rather than flags on the spec. The metadata ranges
// (169.254.0.0/16, fd00:ec2::254) can never be opened: Compile rejects an entry that overlaps
// them, and the address check refuses them before it looks at this policy at all.
struct OperatorPolicy {
  // Host patterns (HostPattern syntax) whose names may resolve to private-use addresses
  // (DeniedRange::private_use); not to loopback, the node's own addresses or other special ranges.
  std::vector<std::string> open_private_hosts;
  // Private ranges that any host the profile allows may reach ("10.20.0.0/16", "100.64.0.5").
  std::vector<std::string> open_private_cidrs;
  // Ranges no sandbox of the node may reach, whatever its spec and the entries above: the node's
  // own public or NATed addresses (which no interface of the node shows), a cluster's service
  // range. They win over every open entry.
  std::vector<std::string> deny_cidrs;
};

// An operator policy written as JSON: {"openPrivateHosts": [...], "openPrivateCidrs": [...],
// "denyCidrs": [...]} (all optional). Unknown fields and wrong types are InvalidArgument naming the
// field; the values themselves are checked by Policy::Compile.
absl::StatusOr<OperatorPolicy> OperatorPolicyFromJson(const nlohmann::json& j);
nlohmann::json ToJson(const OperatorPolicy& op);

// The operator policy file at `path` (the JSON above), with its entries checked as
// Policy::Compile checks them, so that a bad file fails where it is loaded rather than at every
// sandbox's start; an empty path is the empty policy. Errors name the file.
absl::StatusOr<OperatorPolicy> LoadOperatorPolicyFile(const std::string& path);

// One range of the always-denied set.
struct DeniedRange {
  Cidr cidr;
  std::string_view text;  // "169.254.0.0/16"
  std::string_view what;  // "metadata", "private", "loopback", ...
  bool metadata = false;  // never opened by an OperatorPolicy
  // Private-use space (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7), where internal
  // registries live: an open_private_hosts name may reach it. Every other range (loopback,
  // this-network, multicast, link-local, ...) and the node's own addresses only an
  // open_private_cidrs entry opens.
  bool private_use = false;
  // An open_private_cidrs entry overlapping it is refused when the policy is compiled (the
  // link-local metadata ranges); a metadata address inside private-use space only stays
  // unreachable (the address check refuses metadata before it looks at what is open).
  bool refuse_open_overlap = false;
};

// The ranges no sandbox may reach, in every profile (docs/network.md lists them).
const std::vector<DeniedRange>& AlwaysDeniedRanges();
// The range marked metadata that holds `address`, also as the IPv4 address embedded in an IPv6
// one; nullptr for any other address.
const DeniedRange* MetadataRangeOf(const IpAddress& address);

// The hosts of repo-egress when the spec's allowHosts is empty; "@git-providers" in allowHosts
// stands for this list.
const std::vector<std::string>& DefaultGitProviderHosts();
inline constexpr std::string_view kGitProvidersToken = spec::kGitProvidersToken;

enum class RequestKind {
  kConnect,  // CONNECT host:port (a TLS tunnel the proxy cannot look into)
  kHttp,     // a plain-HTTP request in absolute form
};

struct EgressRequest {
  RequestKind kind = RequestKind::kConnect;
  HostName host;
  uint16_t port = 0;
  std::string_view method;  // kHttp only
  std::string_view target;  // kHttp only: origin-form "/path?query"
  // kHttp only: a header of the request that asks the server to act as if it had another method
  // or path (X-HTTP-Method-Override, X-Original-URL, ...; OverrideHeaderOf), empty when none.
  std::string_view override_header;
};

// The first header in `names` that web frameworks read as the request's real method or path
// (Rack, Express, Symfony, Laravel: X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override;
// IIS URL Rewrite, Symfony, Zend: X-Original-URL, X-Rewrite-URL), compared without case, or
// empty. A restricted-http rule that limits methods or paths refuses a request that has one.
std::string_view OverrideHeaderOf(const std::vector<std::string_view>& names);

// Allowed, or the rule that blocked (stable strings, listed in docs/network.md):
//   "profile:none", "not-allowlisted", "restricted-http:method", "restricted-http:path",
//   "restricted-http:method-override", "restricted-http:connect",
//   "always-denied:<cidr> (<what>)", "deny-cidr:<cidr>", "operator-deny-cidr:<cidr>".
struct Decision {
  bool allowed = false;
  std::string rule;

  static Decision Allow() { return {true, {}}; }
  static Decision Block(std::string rule) { return {false, std::move(rule)}; }
};

class Policy {
 public:
  // Fails (InvalidArgument, naming the entry) on a malformed host pattern, HTTP rule or CIDR, on
  // http_rules outside restricted-http, and on an operator entry that overlaps a metadata range.
  static absl::StatusOr<Policy> Compile(const spec::Network& network,
                                        const OperatorPolicy& op = {});

  Decision CheckRequest(const EgressRequest& request) const;
  // `node_local`: `address` is one of the node's own (LocalAddresses), where host services
  // listen; refused as "always-denied:node-local" unless the operator policy opens it.
  Decision CheckAddress(const HostName& host, uint16_t port, const IpAddress& address,
                        bool node_local = false) const;

  // True when every connection this policy allows is also allowed by `old`: such an update only
  // tightens and needs no authority to loosen. Conservative: false when it cannot tell.
  bool IsNoLooserThan(const Policy& old) const;

  spec::NetworkProfile profile() const { return profile_; }

  // A description for audit events: profile, patterns, rules, deny and operator entries.
  nlohmann::json ToJson() const;

 private:
  struct Rule {
    HostPattern host;
    std::vector<std::string> methods;        // upper case; empty: any
    std::vector<std::string> path_prefixes;  // empty: any
  };

  bool RuleCoveredBy(const Rule& rule) const;

  spec::NetworkProfile profile_ = spec::NetworkProfile::kNone;
  std::vector<HostPattern> allow_;  // dependency-egress, repo-egress, restricted-http (any use)
  std::vector<Rule> rules_;         // restricted-http rules
  std::vector<Cidr> deny_;
  std::vector<Cidr> operator_deny_;
  std::vector<HostPattern> open_private_hosts_;
  std::vector<Cidr> open_private_cidrs_;
};

// "none", "dependency-egress", ... (the spec's names).
std::string_view ProfileName(spec::NetworkProfile profile);

}  // namespace airlock::netproxy

#endif  // AIRLOCK_NETPROXY_POLICY_H_
