#include "netproxy/tls_hello.h"

#include <cstdint>
#include <optional>

namespace airlock::netproxy {
namespace {

constexpr uint8_t kChangeCipherSpecRecord = 20;
constexpr uint8_t kAlertRecord = 21;
constexpr uint8_t kHandshakeRecord = 22;
constexpr uint8_t kApplicationDataRecord = 23;
constexpr uint8_t kClientHello = 1;
constexpr uint16_t kServerNameExtension = 0;
constexpr uint16_t kEncryptedClientHello = 0xfe0d;       // RFC 9849 (ECH)
constexpr uint16_t kEncryptedClientHelloDraft = 0xffce;  // its drafts' encrypted_server_name
constexpr uint8_t kHostNameType = 0;
constexpr size_t kRecordHeader = 5;
constexpr size_t kMaxRecordPayload = 16384;  // plaintext records (RFC 8446 5.1)

// Reads big-endian fields off the front of a byte range; any read past the end fails the reader
// for good, so a parse checks ok() once at the points where it decides.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool ok() const { return ok_; }
  bool empty() const { return data_.empty(); }
  uint32_t Int(size_t bytes) {
    if (!Need(bytes)) return 0;
    uint32_t v = 0;
    for (size_t i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(data_[i]);
    data_.remove_prefix(bytes);
    return v;
  }
  std::string_view Bytes(size_t n) {
    if (!Need(n)) return {};
    std::string_view out = data_.substr(0, n);
    data_.remove_prefix(n);
    return out;
  }
  // A vector whose length is a `length_bytes` prefix.
  std::string_view Vector(size_t length_bytes) { return Bytes(Int(length_bytes)); }

 private:
  bool Need(size_t n) {
    if (ok_ && data_.size() >= n) return true;
    ok_ = false;
    data_ = {};
    return false;
  }
  std::string_view data_;
  bool ok_ = true;
};

ClientHelloScan Malformed(std::string why) {
  ClientHelloScan scan;
  scan.kind = ClientHelloScan::Kind::kMalformed;
  scan.why = std::move(why);
  return scan;
}

ClientHelloScan NeedMore(size_t need) {
  ClientHelloScan scan;
  scan.need = need;
  return scan;
}

ClientHelloScan Decided(ClientHelloScan::Kind kind, std::string name, bool ech) {
  ClientHelloScan scan;
  scan.kind = kind;
  scan.name = std::move(name);
  scan.encrypted_hello = ech;
  return scan;
}

// A host name as a server_name entry may carry it: letters, digits, '-', '_' and dots, at most
// 255 bytes, no empty label. Lowercased, one trailing dot dropped; nullopt for anything else.
std::optional<std::string> HostNameOf(std::string_view raw) {
  if (raw.empty() || raw.size() > 255) return std::nullopt;
  std::string name;
  for (char c : raw) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return std::nullopt;
    name.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
  }
  if (name.back() == '.') name.pop_back();
  if (name.empty() || name.front() == '.' || name.back() == '.' ||
      name.find("..") != std::string::npos) {
    return std::nullopt;
  }
  return name;
}

// The body of a ClientHello handshake message.
ClientHelloScan ParseClientHello(std::string_view body) {
  Reader r(body);
  r.Int(2);     // legacy_version
  r.Bytes(32);  // random
  std::string_view session = r.Vector(1);
  std::string_view suites = r.Vector(2);
  std::string_view compression = r.Vector(1);
  if (!r.ok() || session.size() > 32 || suites.empty() || suites.size() % 2 != 0 ||
      compression.empty()) {
    return Malformed("a ClientHello cut short before its extensions");
  }
  if (r.empty()) return Decided(ClientHelloScan::Kind::kNoName, {}, false);  // no extensions
  std::string_view extensions = r.Vector(2);
  if (!r.ok() || !r.empty()) return Malformed("extensions that do not fill the ClientHello");
  Reader ext(extensions);
  std::optional<std::string> name;
  bool seen_server_name = false;
  bool ech = false;
  while (!ext.empty()) {
    uint32_t type = ext.Int(2);
    std::string_view data = ext.Vector(2);
    if (!ext.ok()) return Malformed("an extension cut short");
    if (type == kEncryptedClientHello || type == kEncryptedClientHelloDraft) ech = true;
    if (type != kServerNameExtension) continue;
    // Two server_name extensions, or two host names in one, could name an allowed host for
    // this check and another for the server: refused (RFC 8446 4.2, RFC 6066 3).
    if (seen_server_name) return Malformed("two server_name extensions");
    seen_server_name = true;
    Reader list_reader(data);
    std::string_view list = list_reader.Vector(2);
    if (!list_reader.ok() || !list_reader.empty() || list.empty()) {
      return Malformed("a server_name extension that does not hold its list");
    }
    Reader entries(list);
    while (!entries.empty()) {
      uint32_t name_type = entries.Int(1);
      std::string_view raw = entries.Vector(2);
      if (!entries.ok()) return Malformed("a server name cut short");
      if (name_type != kHostNameType) continue;
      if (name) return Malformed("two host names in server_name");
      name = HostNameOf(raw);
      if (!name) return Malformed("a server name that is not a host name");
    }
  }
  if (!name) return Decided(ClientHelloScan::Kind::kNoName, {}, ech);
  return Decided(ClientHelloScan::Kind::kName, *std::move(name), ech);
}

}  // namespace

ClientHelloScan ScanClientHello(std::string_view data) {
  if (data.empty()) return NeedMore(1);
  // Any stream that starts with the handshake or the alert record type is read as TLS: some
  // servers (Go's) accept any record version on a first record, and warning alerts before the
  // ClientHello, so neither a version byte nor an alert is a way around the check. The other
  // TLS record types, with TLS's version byte, would only hide a ClientHello behind them.
  const auto first = static_cast<uint8_t>(data[0]);
  if (first == kAlertRecord) return Malformed("a record before the ClientHello");
  if (first == kChangeCipherSpecRecord || first == kApplicationDataRecord) {
    if (data.size() < 2) return NeedMore(2);
    if (static_cast<uint8_t>(data[1]) == 3) return Malformed("a record before the ClientHello");
    return {ClientHelloScan::Kind::kNotTls};
  }
  if (first != kHandshakeRecord) return {ClientHelloScan::Kind::kNotTls};
  // The handshake message, joined from consecutive handshake records.
  std::string message;
  size_t pos = 0;
  for (size_t records = 0;; ++records) {
    if (records == kMaxClientHelloRecords) return Malformed("a ClientHello in too many records");
    if (data.size() - pos < kRecordHeader) return NeedMore(pos + kRecordHeader);
    Reader header(data.substr(pos, kRecordHeader));
    uint32_t type = header.Int(1);
    uint32_t major = header.Int(1);
    header.Int(1);  // minor version: any
    uint32_t length = header.Int(2);
    if (type != kHandshakeRecord) {
      return Malformed("another record before the end of the ClientHello");
    }
    if (major != 3) return Malformed("a record version that is not TLS's");
    if (length == 0 || length > kMaxRecordPayload) return Malformed("a record of a bad length");
    if (data.size() - pos - kRecordHeader < length) return NeedMore(pos + kRecordHeader + length);
    message.append(data.substr(pos + kRecordHeader, length));
    pos += kRecordHeader + length;
    if (message.size() < 4) continue;
    Reader head(message);
    if (head.Int(1) != kClientHello) {
      return Malformed("a first handshake message that is not a ClientHello");
    }
    uint32_t body_length = head.Int(3);
    if (body_length > kMaxClientHelloBytes) return Malformed("a ClientHello over 64 KiB");
    if (message.size() - 4 < body_length) continue;
    // Bytes after the ClientHello in the same record would be a second handshake message,
    // which a client may not send before the server answers.
    if (message.size() - 4 > body_length) return Malformed("bytes after the ClientHello");
    return ParseClientHello(std::string_view(message).substr(4, body_length));
  }
}

}  // namespace airlock::netproxy
