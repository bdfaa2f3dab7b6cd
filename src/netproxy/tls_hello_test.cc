#include "netproxy/tls_hello.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "netproxy/testing/client_hello.h"

namespace airlock::netproxy {
namespace {

using Kind = ClientHelloScan::Kind;
using testing::Extension;
using testing::HelloMessage;
using testing::Int;
using testing::Records;
using testing::ServerName;
using testing::Vec;

ClientHelloScan Scan(const std::string& data) { return ScanClientHello(data); }

TEST(TlsHelloTest, ReadsTheHostNameOfAClientHello) {
  std::string hello =
      Records(HelloMessage({Extension(10, "groups"), ServerName({{0, "Registry.Test."}})}));
  ClientHelloScan scan = Scan(hello);
  EXPECT_EQ(scan.kind, Kind::kName) << scan.why;
  EXPECT_EQ(scan.name, "registry.test");
  // Any prefix asks for more, up to the end of the record under way, never decides early.
  for (size_t n = 1; n < hello.size(); ++n) {
    ClientHelloScan prefix = Scan(hello.substr(0, n));
    EXPECT_EQ(prefix.kind, Kind::kNeedMore) << n;
    EXPECT_GT(prefix.need, n);
    EXPECT_LE(prefix.need, hello.size());
  }
  EXPECT_FALSE(scan.encrypted_hello);
  // Bytes after the ClientHello's records (a client's next record) change nothing.
  EXPECT_EQ(Scan(hello + Int(20, 1) + Int(0x0303, 2) + Vec("\x01", 2)).name, "registry.test");
}

// Attack: the ClientHello cut into many small records, so that a reader of the first record
// alone would find no name (and let the tunnel through). Expected: the records are joined.
TEST(TlsHelloTest, JoinsAClientHelloCutIntoRecords) {
  std::string message = HelloMessage({ServerName({{0, "evil.test"}})});
  for (size_t record : {2, 3, 7, 40}) {
    ClientHelloScan scan = Scan(Records(message, record));
    EXPECT_EQ(scan.kind, Kind::kName) << record << " " << scan.why;
    EXPECT_EQ(scan.name, "evil.test") << record;
  }
  // More records than any client uses (which would make every arriving record a rescan of a
  // long buffer): refused.
  ASSERT_GT(message.size(), kMaxClientHelloRecords);
  EXPECT_EQ(Scan(Records(message, 1)).kind, Kind::kMalformed);
}

// Encrypted Client Hello (and its GREASE form, which looks the same): the outer name is not
// necessarily the one the server serves.
TEST(TlsHelloTest, SaysWhenTheClientHelloIsEncrypted) {
  for (uint16_t type : {0xfe0d, 0xffce}) {
    ClientHelloScan scan =
        Scan(Records(HelloMessage({ServerName({{0, "public.test"}}), Extension(type, "opaque")})));
    EXPECT_EQ(scan.kind, Kind::kName) << scan.why;
    EXPECT_TRUE(scan.encrypted_hello) << type;
  }
  EXPECT_TRUE(Scan(Records(HelloMessage({Extension(0xfe0d, "opaque")}))).encrypted_hello);
}

TEST(TlsHelloTest, AClientHelloWithoutAHostNameNamesNothing) {
  EXPECT_EQ(Scan(Records(HelloMessage({Extension(10, "groups")}))).kind, Kind::kNoName);
  EXPECT_EQ(Scan(Records(HelloMessage({}, /*with_extensions=*/false))).kind, Kind::kNoName);
  // A name of another type than host_name is not a host name.
  EXPECT_EQ(Scan(Records(HelloMessage({ServerName({{7, "x"}})}))).kind, Kind::kNoName);
}

TEST(TlsHelloTest, OtherProtocolsAreNotTls) {
  EXPECT_EQ(Scan("GET / HTTP/1.1\r\n").kind, Kind::kNotTls);
  EXPECT_EQ(Scan("SSH-2.0-OpenSSH_9.2\r\n").kind, Kind::kNotTls);
  EXPECT_EQ(Scan("").kind, Kind::kNeedMore);
  EXPECT_EQ(Scan("\x16").kind, Kind::kNeedMore);
  EXPECT_EQ(Scan(std::string("\x17\x01rest", 6)).kind, Kind::kNotTls);
}

// Attack: a warning alert (or another record) before the ClientHello, which Go's TLS server
// skips before reading the ClientHello, so that a reader that took the stream for another
// protocol would let the name through. Expected: unreadable.
TEST(TlsHelloTest, ARecordBeforeTheClientHelloIsMalformed) {
  std::string hello = Records(HelloMessage({ServerName({{0, "evil.test"}})}));
  std::string alert = Int(21, 1) + Int(0x0301, 2) + Vec("\x01\x5a", 2);
  EXPECT_EQ(Scan(alert + hello).kind, Kind::kMalformed);
  EXPECT_EQ(Scan(alert.substr(0, 1)).kind, Kind::kMalformed);
  for (int type : {20, 23}) {
    std::string record = Int(type, 1) + Int(0x0303, 2) + Vec("\x01", 2);
    EXPECT_EQ(Scan(record + hello).kind, Kind::kMalformed) << type;
    EXPECT_EQ(Scan(record.substr(0, 1)).kind, Kind::kNeedMore) << type;
  }
}

// Attack: a handshake record with a version byte other than TLS's, which some servers (Go's)
// accept on a first record, so that a reader that took it for another protocol would let the
// name through unchecked. Expected: unreadable.
TEST(TlsHelloTest, AHandshakeRecordOfAnotherVersionIsMalformed) {
  std::string hello = Records(HelloMessage({ServerName({{0, "evil.test"}})}));
  for (char major : {'\x00', '\x01', '\x02', '\x04', '\x7f'}) {
    std::string changed = hello;
    changed[1] = major;
    EXPECT_EQ(Scan(changed).kind, Kind::kMalformed) << static_cast<int>(major);
    EXPECT_EQ(Scan(changed.substr(0, 2)).kind, Kind::kNeedMore);
  }
}

// Attack: ClientHellos shaped to show this check one name and the server another, or to make
// the reader go wrong. Expected: each is unreadable (the proxy closes the tunnel).
TEST(TlsHelloTest, AmbiguousOrBrokenClientHellosAreMalformed) {
  auto kind_of = [](const std::string& data) { return Scan(data).kind; };
  // Two names, or two server_name extensions.
  EXPECT_EQ(kind_of(Records(HelloMessage({ServerName({{0, "ok.test"}, {0, "evil.test"}})}))),
            Kind::kMalformed);
  EXPECT_EQ(kind_of(Records(
                HelloMessage({ServerName({{0, "ok.test"}}), ServerName({{0, "evil.test"}})}))),
            Kind::kMalformed);
  // A name with bytes no host name has, or an empty one.
  EXPECT_EQ(kind_of(Records(HelloMessage({ServerName({{0, std::string("ok.test\0x", 9)}})}))),
            Kind::kMalformed);
  EXPECT_EQ(kind_of(Records(HelloMessage({ServerName({{0, "."}})}))), Kind::kMalformed);
  // A name with an empty label: two trailing dots, a leading dot, or two dots inside.
  for (const char* name : {"ok.test..", ".ok.test", "ok..test", ".."}) {
    EXPECT_EQ(kind_of(Records(HelloMessage({ServerName({{0, name}})}))), Kind::kMalformed) << name;
  }
  // One trailing dot is the fully qualified form of the same name.
  ClientHelloScan fqdn = Scan(Records(HelloMessage({ServerName({{0, "OK.test."}})})));
  EXPECT_EQ(fqdn.kind, Kind::kName);
  EXPECT_EQ(fqdn.name, "ok.test");
  // An alert record in the middle of the ClientHello's records.
  std::string message = HelloMessage({ServerName({{0, "evil.test"}})});
  std::string split = Records(message.substr(0, 10)) + Int(21, 1) + Int(0x0303, 2) +
                      Vec("\x02\x28", 2) + Records(message.substr(10));
  EXPECT_EQ(kind_of(split), Kind::kMalformed);
  // A first handshake message that is not a ClientHello, or one declared over 64 KiB.
  std::string server_hello = message;
  server_hello[0] = 2;
  EXPECT_EQ(kind_of(Records(server_hello)), Kind::kMalformed);
  EXPECT_EQ(kind_of(Int(22, 1) + Int(0x0301, 2) + Vec(Int(1, 1) + Int(1 << 20, 3), 2)),
            Kind::kMalformed);
  // Records of length 0 or over 16 KiB.
  EXPECT_EQ(kind_of(Int(22, 1) + Int(0x0301, 2) + Int(0, 2)), Kind::kMalformed);
  EXPECT_EQ(kind_of(Int(22, 1) + Int(0x0301, 2) + Int(16385, 2)), Kind::kMalformed);
  // Extensions whose lengths do not add up, and a message with bytes after the ClientHello.
  std::string cut = HelloMessage({ServerName({{0, "evil.test"}})});
  cut[cut.size() - 10] = 0x40;  // the low byte of the name's length, now past the end
  EXPECT_EQ(kind_of(Records(cut)), Kind::kMalformed);
  std::string message_and_more = message + Int(20, 1);
  EXPECT_EQ(kind_of(Records(message_and_more)), Kind::kMalformed);
}

// A real ClientHello, from Python's ssl module (OpenSSL, TLS 1.3 with its key shares).
TEST(TlsHelloTest, ReadsARealClientHello) {
  FILE* p = ::popen(
      "python3 -c \"import ssl, sys\n"
      "ctx = ssl.create_default_context(); i = ssl.MemoryBIO(); o = ssl.MemoryBIO()\n"
      "s = ctx.wrap_bio(i, o, server_hostname='Real.Example.org')\n"
      "try:\n  s.do_handshake()\nexcept ssl.SSLWantReadError:\n  pass\n"
      "sys.stdout.buffer.write(o.read())\"",
      "r");
  ASSERT_NE(p, nullptr);
  std::string hello;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) hello.append(buf, n);
  ASSERT_EQ(::pclose(p), 0);
  ASSERT_GT(hello.size(), 100u);
  ClientHelloScan scan = Scan(hello);
  EXPECT_EQ(scan.kind, Kind::kName) << scan.why;
  EXPECT_EQ(scan.name, "real.example.org");
}

}  // namespace
}  // namespace airlock::netproxy
