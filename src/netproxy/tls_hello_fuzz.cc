// libFuzzer target for the ClientHello reader (tls_hello.h), which reads bytes a sandbox sends.
// Any input must scan without a crash or an overread; a name it reads must be a lowercased host
// name; and once it has decided, bytes appended after the input cannot change the decision (it
// reads left to right and stops at the end of the ClientHello).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "netproxy/tls_hello.h"

namespace {

using airlock::netproxy::ClientHelloScan;
using airlock::netproxy::ScanClientHello;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "tls_hello_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  ClientHelloScan scan = ScanClientHello(input);
  if (scan.kind == ClientHelloScan::Kind::kName) {
    if (scan.name.empty() || scan.name.size() > 255 || scan.name.back() == '.') {
      Fail("a name that is empty, too long or ends in a dot");
    }
    for (char c : scan.name) {
      bool ok =
          (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
      if (!ok) Fail("a name with a byte no lowercased host name has");
    }
  }
  if (scan.kind != ClientHelloScan::Kind::kNeedMore) {
    ClientHelloScan more = ScanClientHello(input + std::string("\x16\x03\x01\x00\x01\x01", 6));
    if (more.kind != scan.kind || more.name != scan.name) Fail("appended bytes changed a decision");
  }
  return 0;
}
