#include "netproxy/host_pattern.h"

#include <algorithm>
#include <charconv>

#include "common/status.h"
#include "fmt/format.h"

namespace airlock::netproxy {
namespace {

constexpr size_t kMaxHostLength = 253;
constexpr size_t kMaxLabelLength = 63;

bool IsHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// WHATWG URL "ends in a number": such a name is an IPv4 address for browsers and for
// getaddrinfo/inet_aton, whatever its form.
bool EndsInNumber(std::string_view name) {
  size_t dot = name.rfind('.');
  std::string_view last = dot == std::string_view::npos ? name : name.substr(dot + 1);
  if (IsDigits(last)) return true;
  return last.size() >= 2 && last[0] == '0' && last[1] == 'x' &&
         std::all_of(last.begin() + 2, last.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool IsWebPort(uint16_t port) { return port == 80 || port == 443; }

}  // namespace

absl::StatusOr<HostName> NormalizeHost(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    std::optional<IpAddress> ip = IpAddress::Parse(host);
    if (!ip) return InvalidArgument(fmt::format("host \"{}\": bad IPv6 literal", host));
    return HostName{ip->ToString(), ip};
  }
  if (std::optional<IpAddress> ip = IpAddress::Parse(host)) return HostName{ip->ToString(), ip};
  std::string name(host);
  for (char& c : name) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      return InvalidArgument(
          fmt::format("host \"{}\": non-ASCII; use the punycode (xn--) form", host));
    }
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (!IsHostChar(c)) {
      return InvalidArgument(fmt::format("host \"{}\": character not allowed in a host", host));
    }
  }
  if (!name.empty() && name.back() == '.') name.pop_back();
  if (name.empty() || name.size() > kMaxHostLength) {
    return InvalidArgument(fmt::format("host \"{}\": empty or too long", host));
  }
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    size_t end = dot == std::string::npos ? name.size() : dot;
    if (end == start || end - start > kMaxLabelLength) {
      return InvalidArgument(fmt::format("host \"{}\": empty or too long label", host));
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (EndsInNumber(name)) {
    return InvalidArgument(
        fmt::format("host \"{}\": numeric host that is not a dotted-quad IPv4 address", host));
  }
  return HostName{std::move(name), std::nullopt};
}

absl::StatusOr<HostPort> SplitHostPort(std::string_view text) {
  std::string_view host = text;
  std::string_view port_text;
  bool has_port = false;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return InvalidArgument(fmt::format("\"{}\": unterminated [", text));
    }
    host = text.substr(0, close + 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return InvalidArgument(fmt::format("\"{}\": junk after ]", text));
      port_text = rest.substr(1);
      has_port = true;
    }
  } else if (size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    if (text.find(':') != colon) {
      return InvalidArgument(fmt::format("\"{}\": IPv6 literals need [brackets]", text));
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    has_port = true;
  }
  if (!has_port) return HostPort{host, std::nullopt};
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
  if (port_text.empty() || port_text.size() > 5 || ec != std::errc() ||
      ptr != port_text.data() + port_text.size() || value == 0 || value > 65535) {
    return InvalidArgument(fmt::format("\"{}\": bad port", text));
  }
  return HostPort{host, static_cast<uint16_t>(value)};
}

absl::StatusOr<HostPattern> HostPattern::Parse(std::string_view text) {
  if (text.find("://") != std::string_view::npos || text.find('/') != std::string_view::npos) {
    return InvalidArgument(fmt::format("host pattern \"{}\": a host, not a URL", text));
  }
  ASSIGN_OR_RETURN(HostPort hp, SplitHostPort(text), "host pattern");
  HostPattern p;
  p.port_ = hp.port;
  std::string_view host = hp.host;
  bool wildcard = host.size() > 2 && host.substr(0, 2) == "*.";
  if (wildcard) host.remove_prefix(2);
  if (host.find('*') != std::string_view::npos) {
    return InvalidArgument(
        fmt::format("host pattern \"{}\": '*' only as a leading \"*.\" label", text));
  }
  ASSIGN_OR_RETURN(HostName name, NormalizeHost(host), "host pattern");
  if (name.ip) {
    if (wildcard) {
      return InvalidArgument(fmt::format("host pattern \"{}\": no wildcard on an IP", text));
    }
    p.kind_ = Kind::kIp;
    p.ip_ = name.ip;
  } else {
    p.kind_ = wildcard ? Kind::kSuffix : Kind::kExact;
  }
  p.host_ = std::move(name.name);
  return p;
}

bool HostPattern::PortMatches(uint16_t port, bool tunnel) const {
  if (port_) return *port_ == port;
  return tunnel ? port == 443 : IsWebPort(port);
}

bool HostPattern::NameMatches(const HostName& host) const {
  switch (kind_) {
    case Kind::kIp:
      return host.ip && *host.ip == *ip_;
    case Kind::kExact:
      return !host.ip && host.name == host_;
    case Kind::kSuffix:
      return !host.ip && host.name.size() > host_.size() + 1 && host.name.ends_with(host_) &&
             host.name[host.name.size() - host_.size() - 1] == '.';
  }
  return false;
}

bool HostPattern::Matches(const HostName& host, uint16_t port, bool tunnel) const {
  return PortMatches(port, tunnel) && NameMatches(host);
}

bool HostPattern::IsCoveredBy(const HostPattern& other) const {
  // A portless `other` covers 80 and 443 for plain HTTP but 443 only for tunnels, so of the named
  // ports it covers 443 alone (":80" would add CONNECT to port 80).
  bool ports_covered = other.port_ ? port_ == other.port_ : (!port_ || *port_ == 443);
  if (!ports_covered) return false;
  if (kind_ != Kind::kSuffix) return other.NameMatches(HostName{host_, ip_});
  // Every name below *.host_ is below *.other.host_ when host_ is other.host_ or below it.
  return other.kind_ == Kind::kSuffix &&
         (host_ == other.host_ || other.NameMatches(HostName{host_, std::nullopt}));
}

std::string HostPattern::ToString() const {
  std::string host = kind_ == Kind::kSuffix                  ? "*." + host_
                     : (kind_ == Kind::kIp && !ip_->is_v4()) ? "[" + host_ + "]"
                                                             : host_;
  return port_ ? fmt::format("{}:{}", host, *port_) : host;
}

}  // namespace airlock::netproxy
