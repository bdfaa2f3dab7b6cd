// One client connection to the egress proxy: reads proxy requests, applies the sandbox's policy,
// and relays CONNECT tunnels or plain-HTTP exchanges. Private to netproxy.
//
// Every member runs on the session's strand. The session owns its sockets and buffers; it is kept
// alive by its own coroutines and reports a ConnectionClosed event when destroyed.
#ifndef AIRLOCK_NETPROXY_INTERNAL_SESSION_H_
#define AIRLOCK_NETPROXY_INTERNAL_SESSION_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>  // boost/asio/awaitable.hpp uses std::exchange without it

#include "boost/asio/awaitable.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/buffer_body.hpp"
#include "boost/beast/http/empty_body.hpp"
#include "boost/beast/http/parser.hpp"
#include "common/unique_fd.h"
#include "netproxy/internal/proxy_state.h"
#include "netproxy/tls_hello.h"

namespace airlock::netproxy::internal {

namespace beast = boost::beast;
namespace http = beast::http;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<SandboxState> sandbox, ClientSocket client);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Registers with the sandbox and starts serving on the session's strand.
  static void Start(const std::shared_ptr<Session>& session);

  // Closes both sides; `reason` becomes the ConnectionClosed end. Must run on the strand.
  void Close(std::string_view reason);

  // After a policy update: a tunnel, or a plain-HTTP exchange under way, whose destination the
  // sandbox's policy (as it is now) no longer allows is closed ("policy-changed") with a
  // BlockedNetworkEgress event. A connection still resolving or connecting checks the policy
  // again once connected. Must run on the strand.
  void Recheck();

  const Strand& strand() const { return strand_; }

 private:
  using Clock = std::chrono::steady_clock;

  asio::awaitable<void> Run(std::shared_ptr<Session> self);
  asio::awaitable<void> Watchdog(std::shared_ptr<Session> self);
  // Whether the request carries the sandbox's Proxy-Authorization, when it has one.
  bool Authorized(const http::request<http::empty_body>& req) const;
  asio::awaitable<void> HandleConnect(http::request_parser<http::empty_body>& parser);
  // Returns true when the client connection may carry another request.
  asio::awaitable<bool> HandleHttp(http::request_parser<http::empty_body>& parser);
  // Resolves, checks every address and connects upstream_. On failure it has answered the
  // client and returns false.
  asio::awaitable<bool> OpenUpstream(const Policy& policy, const HostName& host, uint16_t port);
  // The decision of `policy` on the connection this session has open (its request, and the
  // address it connected to).
  Decision Decide(const Policy& policy) const;
  // After OpenUpstream under `checked`: false (answered 403) when the policy changed meanwhile
  // and the new one refuses the connection.
  asio::awaitable<bool> StillAllowed(const std::shared_ptr<const Policy>& checked);
  // After a CONNECT's 200: reads the client's first bytes until its ClientHello's server name
  // is known (tls_hello.h) and checks that name against the policy, as the CONNECT host was. A
  // tunnel that is not TLS, or names no host, goes on. False (the session ends, with a
  // BlockedNetworkEgress) for a refused name, an unreadable ClientHello, or an encrypted one
  // under a policy that does not allow any host.
  asio::awaitable<bool> CheckTlsServerName();
  // CheckTlsServerName's verdict on a decided scan: the host and rule of a refusal, or none.
  // Keeps what the ClientHello said (tls_name_, encrypted_hello_, hello_unreadable_) for Decide.
  struct TlsRefusal {
    std::string host;
    std::string rule;
  };
  std::optional<TlsRefusal> JudgeClientHello(const ClientHelloScan& scan);
  // The policy's decision on the TLS server name of this tunnel, if it gave one.
  Decision DecideTlsName(const Policy& policy, const HostName& name) const;
  // The host a refusal by Decide names: the TLS server name when that is what was refused.
  const std::string& RefusedHost(const Decision& d) const;
  // Writes what the client sent before the tunnel's splicing began (its CONNECT's trailing
  // bytes, the ClientHello the check read) to the upstream, then frees the buffer.
  asio::awaitable<bool> ForwardBufferedClientBytes();
  asio::awaitable<void> Tunnel();
  // One direction of a tunnel until EOF (half-closing the other side) or an error (closing both).
  asio::awaitable<void> Pump(bool upstream_to_client);
  // Creates the two pipes, once per session; false when that failed (bytes are then copied
  // through user-space buffers).
  bool EnsurePipes();
  // Splices one direction until `limit` bytes have moved (success) or, with the maximum
  // uint64_t, until EOF (asio::error::eof). EOF before `limit` is asio::error::eof too.
  asio::awaitable<boost::system::error_code> SpliceLoop(bool upstream_to_client, uint64_t limit);
  asio::awaitable<boost::system::error_code> CopyLoop(bool upstream_to_client);
  asio::awaitable<boost::system::error_code> WaitOn(bool upstream,
                                                    asio::socket_base::wait_type what);
  template <bool kIsRequest, typename In, typename Out>
  asio::awaitable<boost::system::error_code> Relay(In& in, beast::flat_buffer& in_buffer,
                                                   http::parser<kIsRequest, http::buffer_body>& p,
                                                   Out& out, bool upstream_to_client);
  template <bool kIsRequest, typename In, typename Out>
  asio::awaitable<boost::system::error_code> RelayFixed(
      In& in, beast::flat_buffer& in_buffer, http::parser<kIsRequest, http::buffer_body>& p,
      Out& out, bool upstream_to_client);
  // Relay or RelayFixed, by the message's framing; `bodyless` for responses that have none
  // whatever their headers say (HEAD, 1xx, 204, 304).
  template <bool kIsRequest, typename In, typename Out>
  asio::awaitable<boost::system::error_code> RelayMessage(
      In& in, beast::flat_buffer& in_buffer, http::parser<kIsRequest, http::buffer_body>& p,
      Out& out, bool upstream_to_client, bool bodyless);
  asio::awaitable<void> Respond(int status, std::string_view reason, std::string_view text,
                                std::string_view rule = {});
  void Blocked(std::string_view host, std::string_view address, uint16_t port,
               std::string_view rule);
  void Touch(std::chrono::milliseconds timeout, const char* end_if_expired);
  void Count(bool upstream_to_client, size_t n);

  std::shared_ptr<SandboxState> sandbox_;
  const ProxyConfig& config_;
  Strand strand_;
  ClientSocket client_;
  std::optional<UpstreamSocket> upstream_;
  std::shared_ptr<asio::steady_timer> lookup_wake_;  // while a name lookup runs
  asio::steady_timer watchdog_;
  asio::steady_timer pump_done_;
  beast::flat_buffer client_buffer_;
  beast::flat_buffer upstream_buffer_;
  struct Pipe {
    UniqueFd r;
    UniqueFd w;
    size_t capacity = 0;
  };
  // Tunnels and Content-Length bodies splice through a pipe per direction; the buffers serve
  // chunked and EOF-framed bodies and, when pipes cannot be had, everything.
  Pipe up_pipe_;    // sandbox -> upstream
  Pipe down_pipe_;  // upstream -> sandbox
  bool pipes_tried_ = false;
  bool use_splice_ = false;
  std::unique_ptr<char[]> up_buffer_;    // sandbox -> upstream
  std::unique_ptr<char[]> down_buffer_;  // upstream -> sandbox

  Clock::time_point start_ = Clock::now();
  Clock::time_point deadline_;
  const char* expiry_end_ = "header-timeout";
  bool finished_ = false;
  bool down_pump_done_ = false;
  bool connecting_ = false;  // resolving or connecting: a timeout answers 504, keeps the client
  bool connect_timed_out_ = false;
  bool responded_ = false;

  std::string host_;
  std::string address_;
  std::string upstream_key_;
  std::shared_ptr<const Policy> upstream_policy_;  // the policy upstream_ was checked under
  // What the open connection was decided on: the request's host (and the path of a plain-HTTP
  // request) and the address upstream_ connected to. Recheck acts only while a tunnel or an
  // exchange uses them.
  std::optional<HostName> upstream_host_;
  std::optional<IpAddress> upstream_ip_;
  std::optional<HostName> tls_name_;  // the tunnel's TLS server name, when not the CONNECT host
  bool encrypted_hello_ = false;      // its ClientHello was encrypted (ECH), allowed under open
  bool hello_unreadable_ = false;     // it began as TLS but was unreadable, allowed under open
  bool upstream_spoke_ = false;       // the upstream sent bytes before the ClientHello was read
  // While CheckTlsServerName waits for the ClientHello: the latest the deadline may be.
  std::optional<Clock::time_point> hello_deadline_;
  std::string target_;
  bool tunnel_ = false;
  bool in_exchange_ = false;
  uint16_t port_ = 0;
  std::string method_;
  std::string override_header_;  // the request's method or path override header (policy.h)
  std::string client_name_;  // the command its last request named (BlockedNetworkEgress::client)
  uint64_t bytes_up_ = 0;
  uint64_t bytes_down_ = 0;
  uint64_t requests_ = 0;
  std::string end_ = "closed";
};

}  // namespace airlock::netproxy::internal

#endif  // AIRLOCK_NETPROXY_INTERNAL_SESSION_H_
