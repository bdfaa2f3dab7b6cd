#include "netproxy/address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "common/status.h"
#include "fmt/format.h"

namespace airlock::netproxy {
namespace {

constexpr std::array<uint8_t, 12> kV4MappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

// inet_pton(AF_INET) already rejects "0x7f.1", "127.1" and "2130706433"; leading zeros ("010")
// are rejected here because other parsers read them as octal.
bool StrictDottedQuad(std::string_view text) {
  int digits = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '.') {
      digits = 0;
      continue;
    }
    if (digits == 1 && text[i - 1] == '0') return false;
    ++digits;
  }
  return true;
}

}  // namespace

IpAddress IpAddress::V4(uint32_t host_order) {
  IpAddress a;
  std::copy(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), a.bytes_.begin());
  a.bytes_[12] = static_cast<uint8_t>(host_order >> 24);
  a.bytes_[13] = static_cast<uint8_t>(host_order >> 16);
  a.bytes_[14] = static_cast<uint8_t>(host_order >> 8);
  a.bytes_[15] = static_cast<uint8_t>(host_order);
  return a;
}

IpAddress IpAddress::V6(const std::array<uint8_t, 16>& bytes) {
  IpAddress a;
  a.bytes_ = bytes;
  return a;
}

std::optional<IpAddress> IpAddress::Parse(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
    if (text.find(':') == std::string_view::npos) return std::nullopt;
  }
  if (text.empty() || text.size() > 45) return std::nullopt;
  char buf[46];
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  if (text.find(':') == std::string_view::npos) {
    in_addr v4;
    if (inet_pton(AF_INET, buf, &v4) != 1 || !StrictDottedQuad(text)) return std::nullopt;
    return V4(ntohl(v4.s_addr));
  }
  std::array<uint8_t, 16> bytes;
  if (inet_pton(AF_INET6, buf, bytes.data()) != 1) return std::nullopt;
  return V6(bytes);
}

bool IpAddress::is_v4() const {
  return std::equal(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), bytes_.begin());
}

uint32_t IpAddress::v4() const {
  return (uint32_t{bytes_[12]} << 24) | (uint32_t{bytes_[13]} << 16) | (uint32_t{bytes_[14]} << 8) |
         uint32_t{bytes_[15]};
}

std::optional<IpAddress> IpAddress::EmbeddedV4() const {
  static constexpr std::array<uint8_t, 12> kNat64 = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::equal(kNat64.begin(), kNat64.end(), bytes_.begin())) return V4(v4());
  if (bytes_[0] == 0x20 && bytes_[1] == 0x02) {
    return V4((uint32_t{bytes_[2]} << 24) | (uint32_t{bytes_[3]} << 16) |
              (uint32_t{bytes_[4]} << 8) | uint32_t{bytes_[5]});
  }
  return std::nullopt;
}

std::string IpAddress::ToString() const {
  char buf[INET6_ADDRSTRLEN];
  if (is_v4()) {
    in_addr v4addr{htonl(v4())};
    inet_ntop(AF_INET, &v4addr, buf, sizeof(buf));
  } else {
    inet_ntop(AF_INET6, bytes_.data(), buf, sizeof(buf));
  }
  return buf;
}

Cidr::Cidr(IpAddress base, int prefix_bits) : prefix_bits_(std::clamp(prefix_bits, 0, 128)) {
  std::array<uint8_t, 16> bytes = base.bytes();
  for (int i = 0; i < 16; ++i) {
    int keep = std::clamp(prefix_bits_ - i * 8, 0, 8);
    bytes[i] &= static_cast<uint8_t>(0xff00 >> keep);
  }
  base_ = IpAddress::V6(bytes);
}

absl::StatusOr<Cidr> Cidr::Parse(std::string_view text) {
  std::string_view addr_text = text;
  std::optional<int> bits;
  if (size_t slash = text.find('/'); slash != std::string_view::npos) {
    addr_text = text.substr(0, slash);
    std::string_view bits_text = text.substr(slash + 1);
    if (bits_text.empty() || bits_text.size() > 3 ||
        !std::all_of(bits_text.begin(), bits_text.end(),
                     [](char c) { return c >= '0' && c <= '9'; })) {
      return InvalidArgument(fmt::format("CIDR \"{}\": bad prefix length", text));
    }
    bits = std::stoi(std::string(bits_text));
  }
  std::optional<IpAddress> addr = IpAddress::Parse(addr_text);
  if (!addr) return InvalidArgument(fmt::format("CIDR \"{}\": not an IP address", text));
  // An IPv4 CIDR is written with IPv4 prefix lengths even though it is stored mapped.
  bool v4_text = addr_text.find(':') == std::string_view::npos;
  int max_bits = v4_text ? 32 : 128;
  int b = bits.value_or(max_bits);
  if (b > max_bits)
    return InvalidArgument(fmt::format("CIDR \"{}\": prefix longer than {}", text, max_bits));
  return Cidr(*addr, v4_text ? 96 + b : b);
}

bool Cidr::Contains(const IpAddress& address) const {
  return Cidr(address, prefix_bits_).base_ == base_;
}

bool Cidr::Overlaps(const Cidr& other) const {
  int shorter = std::min(prefix_bits_, other.prefix_bits_);
  return Cidr(base_, shorter).base_ == Cidr(other.base_, shorter).base_;
}

std::string Cidr::ToString() const {
  if (base_.is_v4() && prefix_bits_ >= 96) {
    return fmt::format("{}/{}", base_.ToString(), prefix_bits_ - 96);
  }
  return fmt::format("{}/{}", base_.ToString(), prefix_bits_);
}

std::optional<IpAddress> IpAddress::FromSockaddr(const struct sockaddr* sa) {
  if (sa == nullptr) return std::nullopt;
  if (sa->sa_family == AF_INET) {
    return V4(ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr));
  }
  if (sa->sa_family != AF_INET6) return std::nullopt;
  std::array<uint8_t, 16> bytes;
  std::memcpy(bytes.data(), reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr.s6_addr,
              bytes.size());
  return V6(bytes);
}

bool LocalAddresses::Contains(const IpAddress& address) {
  std::lock_guard lock(mu_);
  auto now = std::chrono::steady_clock::now();
  if (!read_at_ || now - *read_at_ > max_age_) {
    struct ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) return true;
    addresses_.clear();
    for (const struct ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (std::optional<IpAddress> a = IpAddress::FromSockaddr(i->ifa_addr)) {
        addresses_.push_back(*a);
      }
    }
    ::freeifaddrs(list);
    read_at_ = now;
  }
  std::optional<IpAddress> embedded = address.EmbeddedV4();
  return std::any_of(addresses_.begin(), addresses_.end(), [&](const IpAddress& a) {
    return a == address || (embedded && a == *embedded);
  });
}

}  // namespace airlock::netproxy
