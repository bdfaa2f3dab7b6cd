// Test peers for the egress proxy: an HTTP origin server and a TCP echo server, each on its own
// I/O thread, optionally listening inside a named network namespace. Test-only.
#ifndef AIRLOCK_NETPROXY_TESTING_TEST_SERVERS_H_
#define AIRLOCK_NETPROXY_TESTING_TEST_SERVERS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace airlock::netproxy::testing {

class TestServer {
 public:
  enum class Kind {
    // HTTP/1.1 with keep-alive:
    //   GET /hello        "hello from <name>\n"
    //   GET /bytes/<n>    n bytes, streamed
    //   GET /headers      the request head as received
    //   POST /echo        the request body, with its Content-Length
    //   POST|PUT <any>    "got <n> bytes\n" after reading the body
    //   GET <path>        the file static_root + path (its "index" for a directory), else 404
    kHttp,
    kEcho,  // raw TCP: echoes every byte
  };
  struct Options {
    Kind kind = Kind::kHttp;
    std::string address = "127.0.0.1";
    uint16_t port = 0;
    std::string netns;  // named namespace (/run/netns/NAME) to listen in; empty: the caller's
    std::string name = "test";
    std::string static_root;
  };

  static absl::StatusOr<std::unique_ptr<TestServer>> Start(Options options);
  ~TestServer();

  uint16_t port() const;
  // "GET /hello" lines of the requests served so far; the head of the last one.
  std::vector<std::string> requests() const;
  std::string last_head() const;
  uint64_t connections() const;

  class Impl;

 private:
  explicit TestServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace airlock::netproxy::testing

#endif  // AIRLOCK_NETPROXY_TESTING_TEST_SERVERS_H_
