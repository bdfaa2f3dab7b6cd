// Builders of TLS ClientHello bytes for tests (tls_hello.h): a ClientHello naming a server, cut
// into records as a client (or an attacker) may cut it.
#ifndef AIRLOCK_NETPROXY_TESTING_CLIENT_HELLO_H_
#define AIRLOCK_NETPROXY_TESTING_CLIENT_HELLO_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace airlock::netproxy::testing {

inline std::string Int(size_t value, size_t bytes) {
  std::string out(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) out[bytes - 1 - i] = static_cast<char>(value >> (8 * i));
  return out;
}
inline std::string Vec(const std::string& data, size_t length_bytes) {
  return Int(data.size(), length_bytes) + data;
}

inline std::string Extension(uint16_t type, const std::string& data) {
  return Int(type, 2) + Vec(data, 2);
}

// A server_name extension with (name_type, name) entries.
inline std::string ServerName(const std::vector<std::pair<int, std::string>>& names) {
  std::string list;
  for (const auto& [type, name] : names) list += Int(type, 1) + Vec(name, 2);
  return Extension(0, Vec(list, 2));
}

// A ClientHello handshake message (type and length included) with these extensions.
inline std::string HelloMessage(const std::vector<std::string>& extensions,
                                bool with_extensions = true) {
  std::string body = Int(0x0303, 2) + std::string(32, 'r') + Vec(std::string(32, 's'), 1) +
                     Vec(Int(0x1301, 2) + Int(0x1302, 2), 2) + Vec(std::string(1, '\0'), 1);
  if (with_extensions) {
    std::string all;
    for (const std::string& e : extensions) all += e;
    body += Vec(all, 2);
  }
  return Int(1, 1) + Vec(body, 3);
}

// The message cut into handshake records of at most `record` bytes.
inline std::string Records(const std::string& message, size_t record = 16384) {
  std::string out;
  for (size_t pos = 0; pos < message.size(); pos += record) {
    std::string part = message.substr(pos, record);
    out += Int(22, 1) + Int(0x0301, 2) + Vec(part, 2);
  }
  return out;
}

// A whole ClientHello naming `name`, in records of at most `record` bytes.
inline std::string ClientHelloFor(const std::string& name, size_t record = 16384) {
  return Records(HelloMessage({Extension(10, "groups"), ServerName({{0, name}})}), record);
}

}  // namespace airlock::netproxy::testing

#endif  // AIRLOCK_NETPROXY_TESTING_CLIENT_HELLO_H_
