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

// The largest ClientHello read (its handshake message, without record headers). Real ones are
// 0.5-2 KiB (post-quantum key shares included).
inline constexpr size_t kMaxClientHelloBytes = 64 << 10;

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
};

// Scans the bytes a client has sent so far (from the first byte of the tunnel).
ClientHelloScan ScanClientHello(std::string_view data);

}  // namespace airlock::netproxy

#endif  // AIRLOCK_NETPROXY_TLS_HELLO_H_
