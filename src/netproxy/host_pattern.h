// Host names as the egress policy sees them, and the allowlist patterns that match them.
//
// Patterns ("allowHosts" entries and restricted-http rule hosts):
//   "registry.npmjs.org"       exactly that host
//   "*.pythonhosted.org"       any host strictly below the suffix (not the suffix itself)
//   "192.0.2.10", "[2001:db8::1]"   that IP literal only (never matched by a name)
//   any of the above + ":443"  only that port; without a port, the web ports 80 and 443
// Matching is case-insensitive and ignores one trailing dot. Internationalized names must be
// written in their ASCII (punycode, "xn--") form, in patterns and in requests alike; a non-ASCII
// byte is an error, never folded. Value types; thread-compatible.
#ifndef AIRLOCK_NETPROXY_HOST_PATTERN_H_
#define AIRLOCK_NETPROXY_HOST_PATTERN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "netproxy/address.h"

namespace airlock::netproxy {

// A requested host after normalization: lower case, no trailing dot, and the parsed address when
// it is an IP literal.
struct HostName {
  std::string name;             // "example.com", "192.0.2.1", "2001:db8::1" (no brackets)
  std::optional<IpAddress> ip;  // set for IP literals
};

// Normalizes the host of a request (from a CONNECT target or an absolute URL, brackets allowed
// around IPv6). Fails for empty or over-long names, bytes outside [A-Za-z0-9.-_], empty labels,
// and numeric forms that resolvers read as IPv4 but that are not a strict dotted quad
// ("0x7f.1", "2130706433", "127.1", "010.0.0.1").
absl::StatusOr<HostName> NormalizeHost(std::string_view host);

// Splits "host:port" / "[v6]:port" / "host" (port nullopt). Fails on a bad port.
struct HostPort {
  std::string_view host;
  std::optional<uint16_t> port;
};
absl::StatusOr<HostPort> SplitHostPort(std::string_view text);

class HostPattern {
 public:
  static absl::StatusOr<HostPattern> Parse(std::string_view text);

  // True when `host` on `port` is covered by this pattern. Without a port the pattern covers
  // the web ports: 80 and 443 for plain HTTP, 443 only for a `tunnel` (CONNECT), since a tunnel
  // to port 80 would carry plain HTTP past the proxy's parsing (its Host header unchecked).
  bool Matches(const HostName& host, uint16_t port, bool tunnel = false) const;

  // True when every host and port this pattern matches is also matched by `other`.
  bool IsCoveredBy(const HostPattern& other) const;

  // The canonical text ("*.example.com:443").
  std::string ToString() const;

 private:
  enum class Kind { kExact, kSuffix, kIp };
  Kind kind_ = Kind::kExact;
  std::string host_;  // normalized; for kSuffix without the "*." ("example.com")
  std::optional<IpAddress> ip_;
  std::optional<uint16_t> port_;

  bool PortMatches(uint16_t port, bool tunnel) const;
  bool NameMatches(const HostName& host) const;
};

}  // namespace airlock::netproxy

#endif  // AIRLOCK_NETPROXY_HOST_PATTERN_H_
