// The TLS server name a client asks for in the first bytes it sends through a CONNECT tunnel: the
// host_name of the server_name extension (RFC 6066 section 3) of its ClientHello (RFC 8446
// section 4.1.2), read from the record layer without decrypting anything (the ClientHello is
// plaintext). The egress proxy checks that name against the sandbox's policy, as it checked the
// CONNECT host, so that a tunnel to an allowed front end cannot ask it for another site.
//
// A ClientHello may be cut into several handshake records (a client may do so on purpose to hide
// the name from a reader of the first record): records are joined up to kMaxClientHelloBytes.
#ifndef AIRLOCK_NETPROXY_TLS_HELLO_H_
#define AIRLOCK_NETPROXY_TLS_HELLO_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace airlock::netproxy {

// The largest ClientHello read (its handshake message, without record headers), and the most
// records it may come in. Real ones are 0.5-2 KiB (post-quantum key shares included) in one or
// two records; the record limit bounds the work of rescanning as records arrive.
inline constexpr size_t kMaxClientHelloBytes = 64 << 10;
inline constexpr size_t kMaxClientHelloRecords = 64;

struct ClientHelloScan {
  enum class Kind {
    kNeedMore,   // a TLS handshake so far; more bytes are needed to decide
    kNotTls,     // the stream does not start with a TLS handshake record
    kName,       // a ClientHello naming `name`
    kNoName,     // a ClientHello without a host name (an IP literal, or none given)
    kMalformed,  // starts as TLS but is not a well-formed ClientHello (`why`), or is too long
  };
  Kind kind = Kind::kNeedMore;
  std::string name;  // kName: the host name as sent, lowercased, without a trailing dot
  std::string why;   // kMalformed
  // kNeedMore: scan again once this many bytes have arrived (the end of the record under way),
  // at most kMaxClientHelloBytes plus the record headers.
  size_t need = 0;
  // kName, kNoName: the ClientHello carries an encrypted_client_hello extension (ECH, or a
  // GREASE one, which cannot be told apart): the server may serve the name inside it, which
  // no reader of the ClientHello can see.
  bool encrypted_hello = false;
};

// Scans the bytes a client has sent so far (from the first byte of the tunnel). Reads no byte
// past `need` of its own kNeedMore answer before deciding.
ClientHelloScan ScanClientHello(std::string_view data);

}  // namespace airlock::netproxy

#endif  // AIRLOCK_NETPROXY_TLS_HELLO_H_
