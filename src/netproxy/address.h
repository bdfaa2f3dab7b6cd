// IP addresses and CIDR ranges for the egress policy, independent of any socket library.
//
// Every address is kept as 16 bytes: an IPv4 address a.b.c.d is stored in its IPv4-mapped IPv6
// form ::ffff:a.b.c.d, and an IPv4 CIDR a.b.c.d/n as ::ffff:a.b.c.d/(96+n). One comparison then
// covers both families, and an IPv4-mapped IPv6 address can never slip past an IPv4 rule.
// Value types; thread-compatible.
#ifndef AIRLOCK_NETPROXY_ADDRESS_H_
#define AIRLOCK_NETPROXY_ADDRESS_H_

#include <sys/socket.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace airlock::netproxy {

class IpAddress {
 public:
  IpAddress() = default;
  static IpAddress V4(uint32_t host_order);
  static IpAddress V6(const std::array<uint8_t, 16>& bytes);

  // The address of an AF_INET or AF_INET6 socket address; nullopt for any other family.
  static std::optional<IpAddress> FromSockaddr(const struct sockaddr* sa);

  // Strict text forms only: dotted-quad IPv4 ("192.0.2.1", no octal, hex or short forms) or
  // RFC 4291 IPv6 (optionally in brackets). Everything else is nullopt.
  static std::optional<IpAddress> Parse(std::string_view text);

  // True for IPv4 addresses, including those written as ::ffff:a.b.c.d.
  bool is_v4() const;
  // The IPv4 address (host order) when is_v4().
  uint32_t v4() const;
  const std::array<uint8_t, 16>& bytes() const { return bytes_; }

  // The IPv4 address embedded by a translation prefix that a router could unwrap: NAT64
  // (64:ff9b::/96) and 6to4 (2002::/16). nullopt for anything else (IPv4-mapped addresses are
  // already IPv4 here).
  std::optional<IpAddress> EmbeddedV4() const;

  // "192.0.2.1" or "2001:db8::1".
  std::string ToString() const;

  friend bool operator==(const IpAddress&, const IpAddress&) = default;

 private:
  std::array<uint8_t, 16> bytes_{};
};

class Cidr {
 public:
  Cidr() = default;
  Cidr(IpAddress base, int prefix_bits);  // prefix_bits in the 128-bit space; host bits cleared

  // "10.0.0.0/8", "fc00::/7", or a bare address (a /32 or /128). Errors name the input.
  static absl::StatusOr<Cidr> Parse(std::string_view text);

  bool Contains(const IpAddress& address) const;
  // True when the two ranges share at least one address.
  bool Overlaps(const Cidr& other) const;

  // "10.0.0.0/8" or "fc00::/7", as written by Parse's caller would expect.
  std::string ToString() const;

  friend bool operator==(const Cidr&, const Cidr&) = default;

 private:
  IpAddress base_;
  int prefix_bits_ = 0;  // 0..128
};

// The addresses of the interfaces of the calling thread's network namespace (getifaddrs), read
// again when the last reading is older than `max_age`. A sandbox must not reach services of the
// node it runs on through the node's own public address. Thread-safe.
class LocalAddresses {
 public:
  explicit LocalAddresses(std::chrono::milliseconds max_age = std::chrono::seconds(1))
      : max_age_(max_age) {}

  // True when `address` (or the IPv4 address it embeds) is one of them; also true when the
  // interfaces cannot be read (fail closed: the connection is refused, the next call reads again).
  bool Contains(const IpAddress& address);

 private:
  const std::chrono::milliseconds max_age_;
  std::mutex mu_;
  std::optional<std::chrono::steady_clock::time_point> read_at_;  // guarded by mu_
  std::vector<IpAddress> addresses_;                              // guarded by mu_
};

}  // namespace airlock::netproxy

#endif  // AIRLOCK_NETPROXY_ADDRESS_H_
