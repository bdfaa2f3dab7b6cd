// Network fixtures for egress tests: network namespaces with veth links, blocking socket helpers
// and a command runner. Test-only; the namespace parts need root.
#ifndef AIRLOCK_NETPROXY_TESTING_TEST_NET_H_
#define AIRLOCK_NETPROXY_TESTING_TEST_NET_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace airlock::netproxy::testing {

// The test topology. Create() moves the calling thread into a fresh network namespace (the
// "proxy side": threads and processes it starts from now on live there), and adds two named
// namespaces:
//   public  : the stand-in internet, linked to the proxy side by a veth pair, with the hosts
//             192.0.2.10, 198.51.100.10, 203.0.113.10 (documentation ranges) and 100.64.7.10
//             (a private address that only an operator policy opens);
//   sandbox, sandbox2 : loopback only, like the namespaces of two sandboxes.
// The destructor deletes both named namespaces and returns the thread to its first namespace;
// the proxy-side namespace (and the veth pair in it) goes away with its last user.
class TestNetwork {
 public:
  static constexpr const char* kHostA = "192.0.2.10";
  static constexpr const char* kHostB = "198.51.100.10";
  static constexpr const char* kHostC = "203.0.113.10";
  static constexpr const char* kPrivateHost = "100.64.7.10";

  // FailedPrecondition when not root or when namespaces cannot be made (callers GTEST_SKIP).
  static absl::StatusOr<std::unique_ptr<TestNetwork>> Create();
  ~TestNetwork();

  const std::string& public_ns() const { return public_ns_; }
  const std::string& sandbox_ns() const { return sandbox_ns_; }
  const std::string& sandbox2_ns() const { return sandbox2_ns_; }

  // Removes named namespaces left by an earlier test run that died before its destructor.
  static void RemoveStale();

 private:
  TestNetwork() = default;
  UniqueFd original_ns_;
  std::string public_ns_;
  std::string sandbox_ns_;
  std::string sandbox2_ns_;
};

// Runs `fn` on a thread that has entered the named network namespace (sockets it creates stay
// there).
absl::Status InNetns(const std::string& netns, const std::function<void()>& fn);

struct CommandOutput {
  int exit_code = -1;  // -1: killed (timeout)
  std::string output;  // stdout and stderr
};
// Runs argv (PATH lookup) with `env` added ("K=V"), collecting its output, killed after
// `timeout`.
absl::StatusOr<CommandOutput> RunCommand(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& env = {},
                                         std::chrono::seconds timeout = std::chrono::seconds(60));

// airlock-forwarder (at `binary`) started as the engine would start it in a sandbox: in `netns`
// through `ip netns exec` (empty: here), waiting for its --ready-fd line. The destructor sends
// SIGTERM and reaps it.
class ForwarderProcess {
 public:
  ForwarderProcess(const std::string& binary, const std::string& netns, const std::string& listen,
                   const std::string& socket_path);
  ~ForwarderProcess();
  ForwarderProcess(const ForwarderProcess&) = delete;
  ForwarderProcess& operator=(const ForwarderProcess&) = delete;

  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }
  // Sends SIGTERM and returns the wait status.
  int Stop();

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
uint16_t FreeLoopbackPort();

// Blocking client helpers with a 10 s receive timeout.
absl::StatusOr<UniqueFd> ConnectTcp(const std::string& address, uint16_t port);
absl::StatusOr<UniqueFd> ConnectUnix(const std::string& path);
absl::Status SendAll(int fd, std::string_view data);
// Reads until `stop` appears in what was read (or EOF/timeout when stop is empty).
std::string ReadUntil(int fd, std::string_view stop = {}, size_t max = 1 << 20);

// `n` bytes of a pseudo-random pattern (the same for the same seed): a reordered, lost or
// repeated stretch shows in a comparison, which a run of one byte would hide.
std::string PatternBytes(size_t n, uint32_t seed);

// Sends `data` on `fd` from a second thread and then half-closes it (SHUT_WR), while this thread
// reads until EOF, so that a peer that echoes cannot deadlock on full buffers. Returns what was
// read, or the send or receive error (a receive timeout included).
absl::StatusOr<std::string> SendHalfCloseAndReadAll(int fd, std::string_view data);

}  // namespace airlock::netproxy::testing

#endif  // AIRLOCK_NETPROXY_TESTING_TEST_NET_H_
