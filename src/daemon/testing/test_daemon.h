// A real airlockd for tests: started as a child process on a loopback port the kernel picks,
// with a fresh data directory in /tmp, API keys from `airlockd admin create-key`, and a small
// HTTP helper on top of http::Client.
//
//   ASSIGN_OR_RETURN(auto d, TestDaemon::Start());
//   ASSIGN_OR_RETURN(std::string key, d->CreateKey("alice"));
//   Api api(d.get(), key);
//   ApiResponse r = api.Post("/v1/sandboxes", R"({"spec": {}})");
//   d->Kill();     // kill -9
//   d->Restart();  // the same data directory, a new port
//
// The destructor leaves nothing behind: it (re)starts the daemon if needed, destroys every
// sandbox of the keys it made, stops the daemon, kills any process still naming the data
// directory, and removes the directory. Not thread-safe except Api, which may be used from
// several threads (one Api object per thread).
#ifndef AIRLOCK_DAEMON_TESTING_TEST_DAEMON_H_
#define AIRLOCK_DAEMON_TESTING_TEST_DAEMON_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "boost/beast/http/verb.hpp"
#include "nlohmann/json.hpp"

namespace airlock::daemon::testing {

struct TestDaemonOptions {
  std::vector<std::string> extra_args;  // e.g. {"--reap-interval", "1"}
};

class TestDaemon {
 public:
  // Creates the data directory and starts airlockd; fails when it does not print its port
  // within 30 s (the error quotes the end of its log).
  static absl::StatusOr<std::unique_ptr<TestDaemon>> Start(TestDaemonOptions options = {});
  ~TestDaemon();

  // SIGTERM and wait: the daemon stops, its sandboxes keep running in their shims.
  absl::Status Stop();
  // SIGKILL and wait.
  absl::Status Kill();
  // Starts airlockd again on the same data directory (after Stop or Kill).
  absl::Status Restart();
  // A new API key (its token), made with `airlockd admin create-key` on the data directory.
  absl::StatusOr<std::string> CreateKey(std::string_view name);

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  uint16_t port() const { return port_; }
  std::string url() const;
  const std::string& data_dir() const { return data_dir_; }
  std::string node_id() const;  // DIR/node-id
  std::string log() const;      // the daemon's stderr so far

  // Open file descriptors of the daemon process (from /proc/PID/fd), and of them those that are
  // not files: sockets, pipes, eventfds and the like (what a lost connection or stream leaks;
  // the store's connection pool opens database files as load grows, which is not a leak).
  int OpenFds() const;
  int OpenNonFileFds() const;
  // Processes other than the daemon whose command line or environment names the data
  // directory (shims, sandboxes' init), as "pid cmdline" lines.
  std::vector<std::string> ProcessesOfDataDir() const;
  // The pid of `sandbox_id`'s airlock-shim (-1 when none runs), and every descendant of `pid`
  // (the sandbox's init and its commands).
  pid_t ShimPid(std::string_view sandbox_id) const;
  static std::vector<pid_t> Descendants(pid_t pid);
  static bool Alive(pid_t pid);
  // Cgroup directories left for `sandbox_id` under any controller's airlock/<node>/.
  std::vector<std::string> CgroupsOf(std::string_view sandbox_id) const;
  // Mount points that mention the data directory or `sandbox_id` (from /proc/self/mountinfo).
  std::vector<std::string> MountsOf(std::string_view sandbox_id) const;

 private:
  TestDaemon() = default;
  absl::Status Launch();
  void Cleanup();

  TestDaemonOptions options_;
  std::string root_;      // the temp directory
  std::string data_dir_;  // root_/d
  std::string log_path_;  // root_/airlockd.log
  std::vector<std::string> keys_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

// One HTTP answer, with its body parsed when it is JSON.
struct ApiResponse {
  int status = 0;  // 0: transport failure (see `body`)
  std::string content_type;
  std::string body;
  nlohmann::json json;  // discarded value when the body is not JSON

  // The error body's fields ("" when absent).
  std::string code() const;
  std::string message() const;
  std::string Describe() const;  // "422 {...}" for assertion messages
};

// Requests to a TestDaemon with one API key. Each request opens its own connection, so an Api
// keeps working across restarts. When the environment variable AIRLOCK_API_RECORD names a
// file, every answer is appended to it as one JSON line {method, target, status, content_type,
// body (JSON bodies only)}, and every streamed event as {..., event, body}: the OpenAPI
// conformance test (src/daemon/openapi_conformance_test.py) checks them.
class Api {
 public:
  Api(const TestDaemon* daemon, std::string key) : daemon_(daemon), key_(std::move(key)) {}

  using Headers = std::vector<std::pair<std::string, std::string>>;
  ApiResponse Send(boost::beast::http::verb method, std::string_view target, std::string body = {},
                   std::string_view content_type = "application/json", const Headers& headers = {});
  ApiResponse Get(std::string_view target) { return Send(boost::beast::http::verb::get, target); }
  ApiResponse Delete(std::string_view target) {
    return Send(boost::beast::http::verb::delete_, target);
  }
  ApiResponse Post(std::string_view target, const nlohmann::json& body) {
    return Send(boost::beast::http::verb::post, target, body.dump());
  }
  ApiResponse PostRaw(std::string_view target, std::string body) {
    return Send(boost::beast::http::verb::post, target, std::move(body));
  }
  ApiResponse Put(std::string_view target, std::string body) {
    return Send(boost::beast::http::verb::put, target, std::move(body), "application/octet-stream");
  }

  // Reads a server-sent-event stream, handing each event (name, data) to `on_event`; it returns
  // false to hang up. Returns the HTTP answer (its body holds what was read when not 200).
  ApiResponse Stream(boost::beast::http::verb method, std::string_view target, std::string body,
                     const std::function<bool(std::string_view, const nlohmann::json&)>& on_event);

  // Creates a sandbox from `body` and returns its id; "" on failure (with `out` set).
  std::string CreateSandbox(const nlohmann::json& body = {{"spec", nlohmann::json::object()}},
                            ApiResponse* out = nullptr);

  const std::string& key() const { return key_; }

 private:
  void Record(boost::beast::http::verb method, std::string_view target, const ApiResponse& r);

  const TestDaemon* daemon_;
  std::string key_;
};

}  // namespace airlock::daemon::testing

#endif  // AIRLOCK_DAEMON_TESTING_TEST_DAEMON_H_
