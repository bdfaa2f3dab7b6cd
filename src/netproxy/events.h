// What the egress proxy reports: blocked attempts, finished connections and policy changes.
//
// The proxy hands every event to one EventCallback (see EgressProxy::Options). The engine keeps
// the blocked events of a sandbox with its run, turns them into the CommandResult's violations
// (ToViolation) and gives them to DetectNetworkRequired (network_required.h).
#ifndef AIRLOCK_NETPROXY_EVENTS_H_
#define AIRLOCK_NETPROXY_EVENTS_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "command/command.h"
#include "common/ids.h"
#include "nlohmann/json.hpp"

namespace airlock::netproxy {

// Rules of requests the proxy refuses as requests, before any policy: a bad host, a URL it
// does not proxy ("unsupported-scheme:https" for an https:// URL sent as a plain request), a
// plain request that is not in proxy form, a body framing it does not relay, a tunnel whose
// TLS ClientHello cannot be read (netproxy/tls_hello.h), and a direct connect (below). No network
// policy would let them through, so they never make a command NETWORK_REQUIRED.
inline constexpr std::string_view kRuleInvalidHost = "invalid-host";
inline constexpr std::string_view kRuleUnsupportedScheme = "unsupported-scheme:";
inline constexpr std::string_view kRuleNotAProxyRequest = "not-a-proxy-request";
inline constexpr std::string_view kRuleUnsupportedFraming = "unsupported-framing";
inline constexpr std::string_view kRuleTlsUnreadable = "tls-unreadable-client-hello";
// A ClientHello with an encrypted_client_hello extension, under a policy other than open.
inline constexpr std::string_view kRuleTlsEncryptedHello = "tls-encrypted-client-hello";
// A tunnel whose TLS ClientHello names a server the policy refuses: "tls-server-name:" and the
// policy's rule for that name (the event's host is the name).
inline constexpr std::string_view kRuleTlsServerName = "tls-server-name:";
// A socket connected or sent to an address outside the sandbox by a program that ignored the
// proxy (reported by the engine's connect observer, supervisor/connect_observer.h; the kernel
// refused it: the sandbox has no route out). Its method is the system call ("connect",
// "sendto"), its host the address ("192.0.2.1", "[2001:db8::1]").
inline constexpr std::string_view kRuleDirectConnect = "direct-connect";
bool IsRequestRefusal(std::string_view rule);

// One refused attempt. Blocked before resolving: resolved_address is empty. A name that resolved
// to several refused addresses gives one event per address.
struct BlockedNetworkEgress {
  SandboxId sandbox;
  std::string host;              // normalized host as requested (raw, cut to 255 bytes, if bad)
  std::string resolved_address;  // "169.254.169.254", or empty
  uint16_t port = 0;
  std::string rule;    // the rule that blocked (Decision::rule, or a request refusal above)
  std::string method;  // "CONNECT", "GET", ...
  std::chrono::system_clock::time_point time;
  // Which command of the sandbox made the request, when its client said so: the user name of
  // its Proxy-Authorization: Basic credentials ("cmd-3", from the command's proxy URL
  // "http://cmd-3:@127.0.0.1:3128"). Empty when the client sent none (git, Python's urllib). For
  // attribution only: a command can name another command of its own sandbox, never reach another
  // sandbox.
  std::string client;
};

// A refusal of a cloud metadata address: by the proxy (an always-denied range marked metadata),
// or a direct attempt on one (its address in such a range).
bool IsMetadataRefusal(const BlockedNetworkEgress& e);

// A proxied connection (one CONNECT tunnel, or the plain-HTTP requests of one client connection
// to one upstream) that has ended.
struct ConnectionClosed {
  SandboxId sandbox;
  std::string host;
  std::string address;  // the address connected to; empty when no connection was made
  uint16_t port = 0;
  std::string method;
  uint64_t bytes_up = 0;    // sandbox -> upstream (bodies and tunnel payload)
  uint64_t bytes_down = 0;  // upstream -> sandbox
  uint64_t requests = 0;    // plain-HTTP requests relayed
  int64_t duration_ms = 0;
  std::string end;  // "closed", "idle-timeout", "header-timeout", "connect-failed", ...
};

// An audit record: the policy of a running sandbox was replaced.
struct PolicyChanged {
  SandboxId sandbox;
  nlohmann::json old_policy;
  nlohmann::json new_policy;
  bool loosened = false;  // false when the new policy provably allows no more than the old
  std::chrono::system_clock::time_point time;
};

using EgressEvent = std::variant<BlockedNetworkEgress, ConnectionClosed, PolicyChanged>;

// Called on a proxy thread for every event; must be thread-safe and return quickly.
using EventCallback = std::function<void(const EgressEvent&)>;

// kind "BlockedNetworkEgress", detail "egress to <host>:<port> blocked by <rule>", data with
// sandbox, host, resolved_address, port, rule, method, time (RFC 3339).
Violation ToViolation(const BlockedNetworkEgress& event);

// A command's refusals as its result's violations: one per distinct attempt (rule, method, host,
// address, port) in the order they came, except that metadata refusals come first and then the
// other refusals by address (the always-denied ranges, the deny CIDRs), at most `max` in all. When
// attempts were left out, here or by the log's flood limits (`suppressed`,
// BlockedEventLog::Suppressed), or the sandbox's log dropped events while the command ran
// (`dropped`, the difference of BlockedEventLog::Dropped: its oldest, of any command), a last
// violation of kind "BlockedNetworkEgressOmitted" says so (data: omitted, dropped_from_log).
std::vector<Violation> BlockedViolations(const std::vector<BlockedNetworkEgress>& blocked,
                                         uint64_t suppressed, uint64_t dropped, size_t max);

// {"type": "BlockedNetworkEgress" | "ConnectionClosed" | "PolicyChanged", ...fields}.
nlohmann::json ToJson(const EgressEvent& event);

// Keeps the blocked events of each sandbox for the engine, at most `max_per_sandbox` each and as
// many metadata refusals apart (the oldest are dropped and counted). Thread-safe. Typical use:
//   BlockedEventLog log;  options.on_event = log.Callback();
//   uint64_t mark = log.Mark(id);  ...run the command...  auto blocked = log.Since(id, mark);
//
// A loop of refused attempts must not push other refusals out of the bounded log: an event equal
// to one its sandbox recorded less than a second before (same client, rule, method, host, address
// and port) is not recorded again, and each client name of a sandbox records kBurstPerClient
// events at most, then kRefillPerSecond a second (past kMaxClients names, new names share one
// budget). Metadata refusals have budgets and a log of their own, so that no flood of other
// refusals hides one. What the limits leave out is counted per client (Suppressed). The client
// name is the sandbox's to choose, so a sandbox that floods under many names can still push
// other refusals out of its log; those are counted (Dropped) and the result says so.
class BlockedEventLog {
 public:
  static constexpr double kBurstPerClient = 256;
  static constexpr double kRefillPerSecond = 4;
  static constexpr size_t kMaxClients = 4096;

  explicit BlockedEventLog(size_t max_per_sandbox = 1000) : max_(max_per_sandbox) {}

  void Record(const EgressEvent& event);
  // A callback that records into this log (which must outlive the proxy using it).
  EventCallback Callback();

  // A position in the sandbox's stream of blocked events; Since(id, mark) returns those after it.
  uint64_t Mark(const SandboxId& sandbox) const;
  std::vector<BlockedNetworkEgress> Since(const SandboxId& sandbox, uint64_t mark) const;
  uint64_t Dropped(const SandboxId& sandbox) const;
  // How many of the client's events the flood limits left out so far.
  uint64_t Suppressed(const SandboxId& sandbox, const std::string& client) const;
  void Forget(const SandboxId& sandbox);

 private:
  struct Budget {
    double tokens = kBurstPerClient;
    std::chrono::system_clock::time_point last;
    bool Take(std::chrono::system_clock::time_point now);  // false: none left
  };
  struct PerClient {
    Budget general, metadata;
    uint64_t suppressed = 0;
  };
  using Entry = std::pair<uint64_t, BlockedNetworkEgress>;  // sequence number, event
  struct PerSandbox {
    std::deque<Entry> events;    // all but metadata refusals
    std::deque<Entry> metadata;  // metadata refusals
    uint64_t next_seq = 0;       // sequence number of the next event
    uint64_t dropped = 0;
    std::map<std::string, std::chrono::system_clock::time_point> recent;  // event key -> recorded
    std::map<std::string, PerClient> clients;
    PerClient overflow;  // every name past kMaxClients
  };
  const size_t max_;
  mutable std::mutex mu_;
  std::map<SandboxId, PerSandbox> sandboxes_;
};

}  // namespace airlock::netproxy

#endif  // AIRLOCK_NETPROXY_EVENTS_H_
