#include "netproxy/internal/session.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/detached.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/redirect_error.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/string.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/rfc7230.hpp"
#include "boost/beast/http/serializer.hpp"
#include "boost/beast/http/write.hpp"
#include "common/logging.h"
#include "common/status.h"
#include "fmt/format.h"

namespace airlock::netproxy::internal {
namespace {

using boost::system::error_code;

const Logger& Log() {
  static const Logger& log = GetLogger("netproxy");
  return log;
}

auto Ec(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

std::string_view View(beast::string_view s) { return {s.data(), s.size()}; }

constexpr uint64_t kNoBodyLimit = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kUntilEof = std::numeric_limits<uint64_t>::max();
constexpr size_t kMaxEventHost = 255;

// A host as an event names it: at most kMaxEventHost bytes, and "..." where it was cut, which is
// how the result's redaction knows that a secret may have been cut there.
std::string EventHost(std::string_view host) {
  if (host.size() <= kMaxEventHost) return std::string(host);
  return std::string(host.substr(0, kMaxEventHost)) + "...";
}

asio::ip::address ToAsio(const IpAddress& a) {
  if (a.is_v4()) return asio::ip::address_v4(a.v4());
  asio::ip::address_v6::bytes_type b;
  std::copy(a.bytes().begin(), a.bytes().end(), b.begin());
  return asio::ip::address_v6(b);
}

// Hop-by-hop headers (RFC 9110 7.6.1) and proxy credentials never cross the proxy. Tokens named
// in Connection are removed too, except the framing fields: the parser has already framed the
// message by them and the serializer frames it again by them.
template <typename Fields>
void StripHopByHop(Fields& fields) {
  std::vector<std::string> named;
  for (beast::string_view token : http::token_list(fields[http::field::connection])) {
    std::string t(token.data(), token.size());
    for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (t != "content-length" && t != "transfer-encoding" && t != "host") named.push_back(t);
  }
  for (const std::string& name : named) fields.erase(beast::string_view(name));
  for (http::field f :
       {http::field::connection, http::field::keep_alive, http::field::proxy_connection,
        http::field::proxy_authorization, http::field::proxy_authenticate, http::field::te,
        http::field::trailer, http::field::upgrade}) {
    fields.erase(f);
  }
}

struct AbsoluteUrl {
  std::string_view authority;
  std::string_view target;  // origin form, "/" at least
};

// "http://host[:port]/path?query" -> authority and origin-form target.
std::optional<AbsoluteUrl> ParseAbsoluteHttpUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.size() < kScheme.size()) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(url[i])) != kScheme[i]) return std::nullopt;
  }
  url.remove_prefix(kScheme.size());
  size_t end = url.find_first_of("/?#");
  AbsoluteUrl out{url.substr(0, end), end == std::string_view::npos ? "/" : url.substr(end)};
  if (out.target.front() == '#') out.target = "/";
  if (out.target.front() == '?') return std::nullopt;  // "http://h?q" has no path to rewrite
  if (size_t hash = out.target.find('#'); hash != std::string_view::npos) {
    out.target = out.target.substr(0, hash);
  }
  return out;
}

// The user name of Basic proxy credentials, which the engine puts in each command's proxy URL
// ("http://cmd-3:@127.0.0.1:3128"): which command made the request. At most 32 of [A-Za-z0-9-];
// anything else names nobody.
std::string ClientName(const http::request<http::empty_body>& req) {
  auto it = req.find(http::field::proxy_authorization);
  if (it == req.end()) return {};
  std::string_view value = View(it->value());
  constexpr std::string_view kBasic = "Basic ";
  if (value.size() <= kBasic.size() || value.size() > 128 ||
      !beast::iequals(beast::string_view(value.data(), kBasic.size()),
                      beast::string_view(kBasic.data(), kBasic.size()))) {
    return {};
  }
  std::string_view encoded = value.substr(kBasic.size());
  std::string decoded;
  if (!absl::Base64Unescape(absl::string_view(encoded.data(), encoded.size()), &decoded)) {
    return {};
  }
  std::string name = decoded.substr(0, decoded.find(':'));
  bool plain = std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
  });
  return plain && !name.empty() && name.size() <= 32 ? name : std::string();
}

// A plain request the proxy does not serve: where it was going, as far as it says, and why.
struct UnservedRequest {
  std::string host;
  uint16_t port = 0;
  std::string rule;
};

// "https://host[:port]/..." (any scheme but http) names its host in the URL; an origin-form
// target ("/path", as to a server rather than a proxy) names it in Host, if anywhere.
UnservedRequest DescribeUnserved(std::string_view target,
                                 const http::request<http::empty_body>& req) {
  UnservedRequest out;
  std::string_view authority;
  if (size_t colon = target.find("://"); colon != std::string_view::npos && colon > 0 &&
                                         colon <= 16 && target.find_first_of("/?#") > colon) {
    std::string scheme = absl::AsciiStrToLower(std::string(target.substr(0, colon)));
    // An http:// URL lands here only when its form is off ("http://h?q", no path to rewrite).
    out.rule = scheme == "http" ? std::string(kRuleNotAProxyRequest)
                                : std::string(kRuleUnsupportedScheme) + scheme;
    authority = target.substr(colon + 3);
    authority = authority.substr(0, authority.find_first_of("/?#"));
    if (scheme == "http") out.port = 80;
    if (scheme == "https" || scheme == "wss") out.port = 443;
  } else {
    out.rule = kRuleNotAProxyRequest;
    if (auto h = req.find(http::field::host); h != req.end()) authority = View(h->value());
  }
  if (absl::StatusOr<HostPort> hp = SplitHostPort(authority); hp.ok()) {
    if (absl::StatusOr<HostName> name = NormalizeHost(hp->host); name.ok()) {
      out.host = name->name;
      if (hp->port) out.port = *hp->port;
      return out;
    }
  }
  out.host = EventHost(authority);
  return out;
}

// Sets a flag back to false when its scope ends (a co_return included).
struct ResetOnExit {
  bool& flag;
  ~ResetOnExit() { flag = false; }
};

const char* ReasonPhrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 407:
      return "Proxy Authentication Required";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Error";
  }
}

}  // namespace

Session::Session(std::shared_ptr<SandboxState> sandbox, ClientSocket client)
    : sandbox_(std::move(sandbox)),
      config_(*sandbox_->config),
      strand_(client.get_executor()),
      client_(std::move(client)),
      watchdog_(strand_),
      pump_done_(strand_),
      // Room for the largest ClientHello the TLS check reads, whatever the options.
      client_buffer_(
          std::max({config_.options.max_header_bytes, config_.options.buffer_bytes,
                    kMaxClientHelloBytes + (kMaxClientHelloRecords + 1) * 5 + (16 << 10)})),
      upstream_buffer_(std::max(config_.options.max_header_bytes, config_.options.buffer_bytes)) {
  sandbox_->active.fetch_add(1, std::memory_order_relaxed);
  config_.active_total->fetch_add(1, std::memory_order_relaxed);
}

Session::~Session() {
  sandbox_->active.fetch_sub(1, std::memory_order_relaxed);
  config_.active_total->fetch_sub(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(sandbox_->mu);
    sandbox_->sessions.erase(this);
  }
  if (config_.options.on_event) {
    config_.options.on_event(ConnectionClosed{
        sandbox_->id, host_, address_, port_, method_.empty() ? "-" : method_, bytes_up_,
        bytes_down_, requests_,
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count(),
        end_});
  }
}

void Session::Start(const std::shared_ptr<Session>& session) {
  {
    std::lock_guard lock(session->sandbox_->mu);
    session->sandbox_->sessions.emplace(session.get(), session);
  }
  auto on_done = [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      Log().Error("connection failed", {{"error", ex.what()}});
    }
  };
  session->Touch(session->config_.options.header_timeout, "header-timeout");
  // The coroutines own the session: each gets its own reference as a parameter (copied into
  // its frame before the caller's reference goes away).
  asio::co_spawn(session->strand_, session->Run(session), on_done);
  asio::co_spawn(session->strand_, session->Watchdog(session), on_done);
}

void Session::Close(std::string_view reason) {
  if (!finished_ && end_ == "closed") end_ = std::string(reason);
  finished_ = true;
  error_code ec;
  client_.close(ec);
  if (upstream_) upstream_->close(ec);
  if (lookup_wake_) lookup_wake_->cancel();
  watchdog_.cancel();
  pump_done_.cancel();
}

Decision Session::Decide(const Policy& policy) const {
  EgressRequest request{tunnel_ ? RequestKind::kConnect : RequestKind::kHttp,
                        *upstream_host_,
                        port_,
                        method_,
                        target_,
                        override_header_};
  Decision d = policy.CheckRequest(request);
  if (!d.allowed) return d;
  // What open let through without a name to hold it to (CheckTlsServerName).
  if (tunnel_ && policy.profile() != spec::NetworkProfile::kOpen) {
    if (encrypted_hello_) return Decision::Block(std::string(kRuleTlsEncryptedHello));
    if (hello_unreadable_) return Decision::Block(std::string(kRuleTlsUnreadable));
  }
  if (tunnel_ && tls_name_) {
    d = DecideTlsName(policy, *tls_name_);
    if (!d.allowed) return d;
  }
  return policy.CheckAddress(*upstream_host_, port_, *upstream_ip_,
                             config_.local_addresses->Contains(*upstream_ip_));
}

Decision Session::DecideTlsName(const Policy& policy, const HostName& name) const {
  Decision d = policy.CheckRequest({RequestKind::kConnect, name, port_, "CONNECT", {}});
  if (!d.allowed) d.rule = std::string(kRuleTlsServerName) + d.rule;
  return d;
}

const std::string& Session::RefusedHost(const Decision& d) const {
  return tls_name_ && d.rule.starts_with(kRuleTlsServerName) ? tls_name_->name : host_;
}

asio::awaitable<bool> Session::CheckTlsServerName() {
  Touch(config_.options.header_timeout, "header-timeout");
  hello_deadline_ = deadline_;
  struct EndHelloDeadline {
    std::optional<Clock::time_point>& deadline;
    ~EndHelloDeadline() { deadline.reset(); }
  } end_deadline{hello_deadline_};
  auto scan_buffer = [this] {
    asio::const_buffer data = client_buffer_.data();
    return ScanClientHello(std::string_view(static_cast<const char*>(data.data()), data.size()));
  };
  // A TLS server never speaks first: once the upstream has, this is another protocol (Count
  // lifted the deadline then), and the client's bytes go on unread.
  if (upstream_spoke_) co_return true;
  error_code ec;
  ClientHelloScan scan = scan_buffer();
  while (scan.kind == ClientHelloScan::Kind::kNeedMore) {
    // At least to the end of the record under way, and what else has arrived (in one read, not
    // a byte at a time); the buffer stays within the ClientHello's bounds, and a scan follows
    // only whole records. A tunnel whose first bytes are not TLS is decided on them.
    while (client_buffer_.size() < scan.need) {
      error_code ignored;
      size_t room = client_buffer_.max_size() - client_buffer_.size();
      size_t want =
          std::max(scan.need - client_buffer_.size(), std::min(client_.available(ignored), room));
      size_t n = co_await client_.async_read_some(client_buffer_.prepare(want), Ec(ec));
      if (ec == asio::error::eof) co_return true;  // the tunnel's EOF (Pump passes it on)
      if (ec) co_return false;                     // or the header timeout closed it
      client_buffer_.commit(n);
      if (upstream_spoke_) co_return true;
    }
    scan = scan_buffer();
  }
  std::optional<TlsRefusal> refusal = JudgeClientHello(scan);
  if (!refusal) co_return true;
  Blocked(refusal->host, address_, port_, refusal->rule);
  Close("blocked");
  co_return false;
}

std::optional<Session::TlsRefusal> Session::JudgeClientHello(const ClientHelloScan& scan) {
  // Under a policy that allows any host the ClientHello refuses nothing (a stream that is not
  // TLS is none of open's business); what it says is kept for a later tightening (Decide).
  const std::shared_ptr<const Policy> policy = sandbox_->policy();
  const bool open = policy->profile() == spec::NetworkProfile::kOpen;
  auto unreadable = [&](const std::string& host,
                        std::string_view why) -> std::optional<TlsRefusal> {
    hello_unreadable_ = true;
    if (open) return std::nullopt;
    Log().Info("unreadable ClientHello",
               {{"sandbox", sandbox_->id.value()}, {"host", host}, {"why", why}});
    return TlsRefusal{host, std::string(kRuleTlsUnreadable)};
  };
  switch (scan.kind) {
    case ClientHelloScan::Kind::kNeedMore:
    case ClientHelloScan::Kind::kNotTls:
      return std::nullopt;
    case ClientHelloScan::Kind::kMalformed:
      return unreadable(host_, scan.why);
    case ClientHelloScan::Kind::kName:
    case ClientHelloScan::Kind::kNoName:
      break;
  }
  // The name inside an encrypted ClientHello is the server's to read, not ours: only a policy
  // that allows any host lets one through (and a tightening closes it: Decide).
  encrypted_hello_ = scan.encrypted_hello;
  if (encrypted_hello_ && !open) {
    return TlsRefusal{scan.name.empty() ? host_ : scan.name, std::string(kRuleTlsEncryptedHello)};
  }
  if (scan.kind == ClientHelloScan::Kind::kNoName || scan.name == host_) return std::nullopt;
  absl::StatusOr<HostName> name = NormalizeHost(scan.name);
  if (!name.ok()) return unreadable(scan.name, Message(name.status()));
  Decision d = DecideTlsName(*policy, *name);
  if (!d.allowed) return TlsRefusal{scan.name, std::move(d.rule)};
  tls_name_ = *std::move(name);
  return std::nullopt;
}

void Session::Recheck() {
  // Still resolving or connecting: StillAllowed checks once connected.
  if (finished_ || connecting_ || !(tunnel_ || in_exchange_) || !upstream_host_ || !upstream_ip_) {
    return;
  }
  Decision d = Decide(*sandbox_->policy());
  if (d.allowed) return;
  Blocked(RefusedHost(d), address_, port_, d.rule);
  Close("policy-changed");
}

asio::awaitable<bool> Session::StillAllowed(const std::shared_ptr<const Policy>& checked) {
  std::shared_ptr<const Policy> now = sandbox_->policy();
  if (now == checked) co_return true;
  Decision d = Decide(*now);
  if (d.allowed) co_return true;
  Blocked(RefusedHost(d), address_, port_, d.rule);
  std::string text = fmt::format("egress to {}:{} blocked by {}", host_, port_, d.rule);
  co_await Respond(403, "blocked", text, d.rule);
  co_return false;
}

void Session::Touch(std::chrono::milliseconds timeout, const char* end_if_expired) {
  deadline_ = Clock::now() + timeout;
  expiry_end_ = end_if_expired;
  // While a tunnel's ClientHello is awaited, the upstream's traffic does not extend its time.
  if (hello_deadline_ && deadline_ > *hello_deadline_) {
    deadline_ = *hello_deadline_;
    expiry_end_ = "header-timeout";
  }
  // The watchdog sleeps until the deadline it saw last; wake it when the new one is earlier.
  if (deadline_ < watchdog_.expiry()) watchdog_.cancel();
}

void Session::Count(bool upstream_to_client, size_t n) {
  if (upstream_to_client) {
    if (!upstream_spoke_ && tunnel_) {
      upstream_spoke_ = true;
      hello_deadline_.reset();  // not TLS (CheckTlsServerName): the tunnel's own timeouts
    }
    bytes_down_ += n;
    sandbox_->bytes_down.fetch_add(n, std::memory_order_relaxed);
  } else {
    bytes_up_ += n;
    sandbox_->bytes_up.fetch_add(n, std::memory_order_relaxed);
  }
}

asio::awaitable<void> Session::Watchdog([[maybe_unused]] std::shared_ptr<Session> self) {
  error_code ec;
  while (!finished_) {
    watchdog_.expires_at(deadline_);
    co_await watchdog_.async_wait(Ec(ec));
    if (finished_) break;
    if (Clock::now() < deadline_) continue;
    if (connecting_) {
      // Give up on the upstream but keep the client to tell it why (504).
      connect_timed_out_ = true;
      if (lookup_wake_) lookup_wake_->cancel();
      if (upstream_) upstream_->close(ec);
      Touch(config_.options.header_timeout, "response-timeout");
      continue;
    }
    Close(expiry_end_);
    break;
  }
}

void Session::Blocked(std::string_view host, std::string_view address, uint16_t port,
                      std::string_view rule) {
  sandbox_->blocked.fetch_add(1, std::memory_order_relaxed);
  Log().Info("egress blocked", {{"sandbox", sandbox_->id.value()},
                                {"host", host},
                                {"address", address},
                                {"port", static_cast<int>(port)},
                                {"rule", rule}});
  if (!config_.options.on_event) return;
  config_.options.on_event(BlockedNetworkEgress{sandbox_->id, EventHost(host), std::string(address),
                                                port, std::string(rule), method_,
                                                std::chrono::system_clock::now(), client_name_});
}

asio::awaitable<void> Session::Respond(int status, std::string_view reason, std::string_view text,
                                       std::string_view rule) {
  if (responded_) co_return;
  responded_ = true;
  if (end_ == "closed") end_ = std::string(reason);
  std::string body = fmt::format("airlock egress proxy: {}\n", text);
  std::string head = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n",
      status, ReasonPhrase(status), body.size());
  if (!rule.empty()) head += fmt::format("X-Airlock-Egress-Blocked: {}\r\n", rule);
  if (status == 407) head += "Proxy-Authenticate: Basic realm=\"airlock\"\r\n";
  std::string message = head + "\r\n" + body;
  error_code ec;
  co_await asio::async_write(client_, asio::buffer(message), Ec(ec));
}

asio::awaitable<void> Session::Run([[maybe_unused]] std::shared_ptr<Session> self) {
  error_code ec;
  while (!finished_) {
    http::request_parser<http::empty_body> parser;
    parser.header_limit(static_cast<uint32_t>(config_.options.max_header_bytes));
    parser.body_limit(kNoBodyLimit);
    co_await http::async_read_header(client_, client_buffer_, parser, Ec(ec));
    if (ec) {
      bool quiet_end = ec == http::error::end_of_stream || ec == asio::error::eof ||
                       ec == asio::error::operation_aborted || finished_;
      if (!quiet_end) {
        if (method_.empty()) method_ = "?";
        std::string text = fmt::format("bad request: {}", ec.message());
        co_await Respond(400, "bad-request", text);
      }
      break;
    }
    if (!Authorized(parser.get())) {
      // Someone without the listener's credentials (another local user on a TCP port): not the
      // sandbox's egress, so no BlockedNetworkEgress event.
      method_ = std::string(View(parser.get().method_string()));
      co_await Respond(407, "proxy-auth", "this listener needs its Proxy-Authorization");
      break;
    }
    // A listener without credentials (the sandbox's own socket) reads them as the client's name.
    if (sandbox_->proxy_authorization.empty()) client_name_ = ClientName(parser.get());
    if (parser.get().method() == http::verb::connect) {
      co_await HandleConnect(parser);
      break;
    }
    if (!co_await HandleHttp(parser)) break;
    responded_ = false;
    Touch(config_.options.header_timeout, "header-timeout");
  }
  Close(end_);
}

bool Session::Authorized(const http::request<http::empty_body>& req) const {
  const std::string& want = sandbox_->proxy_authorization;
  if (want.empty()) return true;
  auto it = req.find(http::field::proxy_authorization);
  if (it == req.end() || it->value().size() != want.size()) return false;
  unsigned char diff = 0;  // the whole value, whatever differs first
  for (size_t i = 0; i < want.size(); ++i) {
    diff |= static_cast<unsigned char>(it->value()[i] ^ want[i]);
  }
  return diff == 0;
}

asio::awaitable<void> Session::HandleConnect(http::request_parser<http::empty_body>& parser) {
  method_ = "CONNECT";
  std::string_view target = View(parser.get().target());
  host_ = EventHost(target);
  absl::StatusOr<HostPort> hp = SplitHostPort(target);
  if (!hp.ok() || !hp->port) {
    Blocked(target, "", 0, kRuleInvalidHost);
    co_await Respond(400, "bad-request", "CONNECT needs host:port");
    co_return;
  }
  port_ = *hp->port;
  absl::StatusOr<HostName> host = NormalizeHost(hp->host);
  if (!host.ok()) {
    Blocked(hp->host, "", port_, kRuleInvalidHost);
    std::string text(Message(host.status()));
    co_await Respond(400, "bad-request", text);
    co_return;
  }
  host_ = host->name;
  std::shared_ptr<const Policy> policy = sandbox_->policy();
  Decision d = policy->CheckRequest({RequestKind::kConnect, *host, port_, "CONNECT", {}});
  if (!d.allowed) {
    Blocked(host_, "", port_, d.rule);
    std::string text = fmt::format("egress to {}:{} blocked by {}", host_, port_, d.rule);
    co_await Respond(403, "blocked", text, d.rule);
    co_return;
  }
  tunnel_ = true;  // the decision below is CONNECT's
  // An upstream of an earlier plain-HTTP request on this connection is not this tunnel's.
  upstream_host_.reset();
  upstream_ip_.reset();
  if (!co_await OpenUpstream(*policy, *host, port_)) co_return;
  // From here on a policy update closes the tunnel if the new policy refuses it (Recheck).
  if (!co_await StillAllowed(policy)) co_return;
  static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection established\r\n\r\n";
  error_code ec;
  co_await asio::async_write(client_, asio::buffer(kEstablished), Ec(ec));
  if (ec) co_return;
  responded_ = true;
  upstream_buffer_.shrink_to_fit();
  co_await Tunnel();
}

asio::awaitable<bool> Session::ForwardBufferedClientBytes() {
  error_code ec;
  if (client_buffer_.size() > 0) {
    size_t n = client_buffer_.size();
    co_await asio::async_write(*upstream_, client_buffer_.data(), Ec(ec));
    if (ec) co_return false;
    Count(false, n);
    client_buffer_.consume(n);
  }
  client_buffer_.shrink_to_fit();
  co_return true;
}

asio::awaitable<bool> Session::OpenUpstream(const Policy& policy, const HostName& host,
                                            uint16_t port) {
  Touch(config_.options.connect_timeout, "connect-timeout");
  connecting_ = true;
  ResetOnExit done{connecting_};
  std::vector<IpAddress> addresses;
  std::string lookup_error;  // getaddrinfo's, when it failed
  error_code ec;
  if (host.ip) {
    addresses.push_back(*host.ip);
  } else if (auto it = config_.hosts.find(host.name); it != config_.hosts.end()) {
    addresses = it->second;
  } else if (config_.options.resolution == NameResolution::kSystem) {
    // On a lookup thread (internal/lookups.h); its end, or the watchdog, wakes us.
    auto wake =
        std::make_shared<asio::steady_timer>(strand_, asio::steady_timer::time_point::max());
    lookup_wake_ = wake;
    std::shared_ptr<Lookups::Call> call = config_.lookups->Start(
        sandbox_.get(), host.name, port,
        [wake, strand = strand_] { asio::post(strand, [wake] { wake->cancel(); }); });
    co_await wake->async_wait(Ec(ec));
    lookup_wake_.reset();
    std::lock_guard lock(call->mu);
    if (!call->done) {
      call->abandoned = true;
    } else if (call->error != 0) {
      lookup_error = ::gai_strerror(call->error);
    } else {
      addresses = call->addresses;
    }
  }
  if (connect_timed_out_) {
    std::string text = fmt::format("resolving {} timed out", host.name);
    co_await Respond(504, "connect-timeout", text);
    co_return false;
  }
  if (addresses.empty()) {
    std::string text =
        fmt::format("cannot resolve {}{}", host.name,
                    lookup_error.empty() ? std::string() : fmt::format(": {}", lookup_error));
    co_await Respond(502, "resolve-failed", text);
    co_return false;
  }
  std::vector<IpAddress> allowed;
  std::string first_rule;
  for (const IpAddress& a : addresses) {
    if (std::find(allowed.begin(), allowed.end(), a) != allowed.end()) continue;
    Decision d = policy.CheckAddress(host, port, a, config_.local_addresses->Contains(a));
    if (d.allowed) {
      allowed.push_back(a);
    } else {
      Blocked(host.name, a.ToString(), port, d.rule);
      if (first_rule.empty()) first_rule = d.rule;
    }
  }
  if (allowed.empty()) {
    std::string text = fmt::format("egress to {}:{} blocked by {}", host.name, port, first_rule);
    co_await Respond(403, "blocked", text, first_rule);
    co_return false;
  }
  for (const IpAddress& a : allowed) {
    if (finished_ || connect_timed_out_) break;
    upstream_.emplace(strand_);
    co_await upstream_->async_connect(asio::ip::tcp::endpoint(ToAsio(a), port), Ec(ec));
    if (!ec) {
      address_ = a.ToString();
      upstream_host_ = host;
      upstream_ip_ = a;
      upstream_key_ = fmt::format("{}:{}", host.name, port);
      upstream_->set_option(asio::ip::tcp::no_delay(true), ec);
      Touch(config_.options.idle_timeout, "idle-timeout");
      co_return true;
    }
    upstream_.reset();
  }
  if (connect_timed_out_) {
    std::string text = fmt::format("connect to {}:{} timed out", host.name, port);
    co_await Respond(504, "connect-timeout", text);
  } else {
    std::string text = fmt::format("connect to {}:{} failed: {}", host.name, port, ec.message());
    co_await Respond(502, "connect-failed", text);
  }
  co_return false;
}

bool Session::EnsurePipes() {
  if (pipes_tried_) return use_splice_;
  pipes_tried_ = true;
  for (Pipe* p : {&up_pipe_, &down_pipe_}) {
    int fds[2];
    if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return false;
    p->r.Reset(fds[0]);
    p->w.Reset(fds[1]);
    // A bigger pipe moves more per splice call; when the kernel refuses (pipe-user-pages
    // limits), the default size is only slower.
    int size = ::fcntl(fds[1], F_SETPIPE_SZ, static_cast<int>(config_.options.buffer_bytes));
    if (size < 0) size = ::fcntl(fds[1], F_GETPIPE_SZ);
    p->capacity = size > 0 ? static_cast<size_t>(size) : 4096;
  }
  use_splice_ = true;
  return true;
}

asio::awaitable<void> Session::Tunnel() {
  // Zero-copy through a pipe per direction; without descriptors for the pipes, copy through
  // user-space buffers instead.
  if (!EnsurePipes()) {
    up_buffer_ = std::make_unique_for_overwrite<char[]>(config_.options.buffer_bytes);
    down_buffer_ = std::make_unique_for_overwrite<char[]>(config_.options.buffer_bytes);
  }
  error_code ec;
  auto self = shared_from_this();
  // The upstream's bytes flow at once (a server that speaks first: SMTP, FTP, ssh, databases);
  // the client's wait for the check of its TLS server name, then for what it sent meanwhile.
  asio::co_spawn(
      strand_,
      [self]() -> asio::awaitable<void> {
        co_await self->Pump(true);
        self->down_pump_done_ = true;
        self->pump_done_.cancel();
      },
      asio::detached);
  if (co_await CheckTlsServerName() && co_await ForwardBufferedClientBytes()) {
    co_await Pump(false);
  } else {
    Close("closed");  // keeps the end the check gave
  }
  if (!down_pump_done_) {
    pump_done_.expires_at(Clock::time_point::max());
    co_await pump_done_.async_wait(Ec(ec));
  }
}

asio::awaitable<error_code> Session::WaitOn(bool upstream, asio::socket_base::wait_type what) {
  error_code ec;
  if (upstream) {
    co_await upstream_->async_wait(what, Ec(ec));
  } else {
    co_await client_.async_wait(what, Ec(ec));
  }
  co_return ec;
}

asio::awaitable<error_code> Session::CopyLoop(bool upstream_to_client) {
  char* buffer = upstream_to_client ? down_buffer_.get() : up_buffer_.get();
  const size_t size = config_.options.buffer_bytes;
  error_code ec;
  while (true) {
    size_t n = 0;
    if (upstream_to_client) {
      n = co_await upstream_->async_read_some(asio::buffer(buffer, size), Ec(ec));
    } else {
      n = co_await client_.async_read_some(asio::buffer(buffer, size), Ec(ec));
    }
    if (ec) co_return ec;
    if (upstream_to_client) {
      co_await asio::async_write(client_, asio::buffer(buffer, n), Ec(ec));
    } else {
      co_await asio::async_write(*upstream_, asio::buffer(buffer, n), Ec(ec));
    }
    if (ec) co_return ec;
    Count(upstream_to_client, n);
    Touch(config_.options.idle_timeout, "idle-timeout");
  }
}

asio::awaitable<error_code> Session::SpliceLoop(bool upstream_to_client, uint64_t limit) {
  const int src = upstream_to_client ? upstream_->native_handle() : client_.native_handle();
  const int dst = upstream_to_client ? client_.native_handle() : upstream_->native_handle();
  const Pipe& pipe = upstream_to_client ? down_pipe_ : up_pipe_;
  // splice(2) on a socket blocks unless the socket itself is non-blocking (the upstream socket
  // of a plain-HTTP session changes with the host).
  error_code ec;
  client_.native_non_blocking(true, ec);
  if (!ec) upstream_->native_non_blocking(true, ec);
  if (ec) co_return ec;
  // At most what an empty pipe holds, so that the read never meets a full pipe and EAGAIN always
  // means "source empty"; and never past a body's last byte: what follows on the connection is
  // the next message, which the parser must see.
  constexpr unsigned kFlags = SPLICE_F_NONBLOCK | SPLICE_F_MOVE;
  auto errno_code = [] { return error_code(errno, boost::system::system_category()); };
  while (limit > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(limit, pipe.capacity));
    ssize_t in = ::splice(src, nullptr, pipe.w.get(), nullptr, chunk, kFlags);
    if (in == 0) co_return asio::error::eof;
    if (in < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) co_return errno_code();
      ec = co_await WaitOn(upstream_to_client, asio::socket_base::wait_read);
      // A wait that completed before another coroutine of the session closed it: src and dst
      // are closed numbers now, perhaps reused by another connection.
      if (!ec && finished_) ec = asio::error::operation_aborted;
      if (ec) co_return ec;
      continue;
    }
    size_t pending = static_cast<size_t>(in);
    if (limit != kUntilEof) limit -= pending;
    while (pending > 0) {
      ssize_t out = ::splice(pipe.r.get(), nullptr, dst, nullptr, pending, kFlags);
      if (out > 0) {
        pending -= static_cast<size_t>(out);
        Count(upstream_to_client, static_cast<size_t>(out));
        continue;
      }
      if (out < 0 && errno == EINTR) continue;
      if (out < 0 && errno != EAGAIN) co_return errno_code();
      ec = co_await WaitOn(!upstream_to_client, asio::socket_base::wait_write);
      if (!ec && finished_) ec = asio::error::operation_aborted;
      if (ec) co_return ec;
    }
    Touch(config_.options.idle_timeout, "idle-timeout");
  }
  co_return error_code();
}

asio::awaitable<void> Session::Pump(bool upstream_to_client) {
  error_code ec;
  if (use_splice_) {
    ec = co_await SpliceLoop(upstream_to_client, kUntilEof);
  } else {
    ec = co_await CopyLoop(upstream_to_client);
  }
  error_code ignored;
  if (ec == asio::error::eof && !finished_) {
    // Half-close: pass the end of this direction on and let the other one finish.
    if (upstream_to_client) {
      client_.shutdown(asio::socket_base::shutdown_send, ignored);
    } else {
      upstream_->shutdown(asio::socket_base::shutdown_send, ignored);
    }
  } else {
    if (ec != asio::error::operation_aborted && ec != asio::error::bad_descriptor &&
        end_ == "closed") {
      end_ = fmt::format("error: {}", ec.message());
    }
    Close(end_);
  }
}

template <bool kIsRequest, typename In, typename Out>
asio::awaitable<error_code> Session::Relay(In& in, beast::flat_buffer& in_buffer,
                                           http::parser<kIsRequest, http::buffer_body>& p, Out& out,
                                           bool upstream_to_client) {
  std::unique_ptr<char[]>& storage = upstream_to_client ? down_buffer_ : up_buffer_;
  if (!storage) storage = std::make_unique_for_overwrite<char[]>(config_.options.buffer_bytes);
  char* buffer = storage.get();
  const size_t size = config_.options.buffer_bytes;
  http::serializer<kIsRequest, http::buffer_body> sr{p.get()};
  error_code ec;
  co_await http::async_write_header(out, sr, Ec(ec));
  if (ec) co_return ec;
  while (!p.is_done() || !sr.is_done()) {
    size_t n = 0;
    if (!p.is_done()) {
      p.get().body().data = buffer;
      p.get().body().size = size;
      co_await http::async_read(in, in_buffer, p, Ec(ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return ec;
      n = size - p.get().body().size;
      p.get().body().size = n;
      p.get().body().data = buffer;
      p.get().body().more = !p.is_done();
    } else {
      p.get().body().data = nullptr;
      p.get().body().size = 0;
      p.get().body().more = false;
    }
    co_await http::async_write(out, sr, Ec(ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return ec;
    Count(upstream_to_client, n);
    Touch(config_.options.idle_timeout, "idle-timeout");
  }
  co_return ec;
}

template <bool kIsRequest, typename In, typename Out>
asio::awaitable<error_code> Session::RelayFixed(In& in, beast::flat_buffer& in_buffer,
                                                http::parser<kIsRequest, http::buffer_body>& p,
                                                Out& out, bool upstream_to_client) {
  uint64_t left = *p.content_length();
  http::serializer<kIsRequest, http::buffer_body> sr{p.get()};
  error_code ec;
  co_await http::async_write_header(out, sr, Ec(ec));
  if (ec) co_return ec;
  // Body bytes that arrived with the head.
  size_t buffered = static_cast<size_t>(std::min<uint64_t>(left, in_buffer.size()));
  if (buffered > 0) {
    co_await asio::async_write(out, asio::buffer(in_buffer.data(), buffered), Ec(ec));
    if (ec) co_return ec;
    in_buffer.consume(buffered);
    left -= buffered;
    Count(upstream_to_client, buffered);
  }
  // The rest of the body goes socket -> pipe -> socket when pipes can be had.
  if (left > 0 && EnsurePipes()) co_return co_await SpliceLoop(upstream_to_client, left);
  std::unique_ptr<char[]>& storage = upstream_to_client ? down_buffer_ : up_buffer_;
  if (!storage && left > 0) {
    storage = std::make_unique_for_overwrite<char[]>(config_.options.buffer_bytes);
  }
  while (left > 0) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(left, config_.options.buffer_bytes));
    size_t n = co_await in.async_read_some(asio::buffer(storage.get(), want), Ec(ec));
    if (ec) co_return ec;
    co_await asio::async_write(out, asio::buffer(storage.get(), n), Ec(ec));
    if (ec) co_return ec;
    left -= n;
    Count(upstream_to_client, n);
    Touch(config_.options.idle_timeout, "idle-timeout");
  }
  co_return ec;
}

template <bool kIsRequest, typename In, typename Out>
asio::awaitable<error_code> Session::RelayMessage(In& in, beast::flat_buffer& in_buffer,
                                                  http::parser<kIsRequest, http::buffer_body>& p,
                                                  Out& out, bool upstream_to_client,
                                                  bool bodyless) {
  // A body framed by Content-Length is copied as bytes (no parsing on the hot path); chunked
  // and EOF-framed bodies go through the parser, which re-frames them exactly.
  error_code ec;
  if (!bodyless && !p.chunked() && p.content_length().has_value()) {
    ec = co_await RelayFixed(in, in_buffer, p, out, upstream_to_client);
  } else {
    ec = co_await Relay(in, in_buffer, p, out, upstream_to_client);
  }
  co_return ec;
}

asio::awaitable<bool> Session::HandleHttp(http::request_parser<http::empty_body>& parser) {
  http::request<http::empty_body>& req = parser.get();
  method_ = std::string(View(req.method_string()));
  std::optional<AbsoluteUrl> url = ParseAbsoluteHttpUrl(View(req.target()));
  if (!url) {
    // Still an attempt to reach somewhere: an https:// (or other scheme's) URL sent as a plain
    // request, or an origin-form request naming its host in Host. It is refused as a request
    // the proxy does not serve, and recorded.
    UnservedRequest unserved = DescribeUnserved(View(req.target()), req);
    host_ = unserved.host;
    port_ = unserved.port;
    Blocked(unserved.host, "", unserved.port, unserved.rule);
    co_await Respond(400, "bad-request",
                     "only CONNECT host:port and absolute http:// URLs are proxied (https:// "
                     "goes through CONNECT: set HTTPS_PROXY)",
                     unserved.rule);
    co_return false;
  }
  absl::StatusOr<HostPort> hp = SplitHostPort(url->authority);
  absl::StatusOr<HostName> host =
      hp.ok() ? NormalizeHost(hp->host) : absl::StatusOr<HostName>(hp.status());
  if (!host.ok() || url->authority.find('@') != std::string_view::npos) {
    Blocked(url->authority, "", 0, kRuleInvalidHost);
    std::string text = fmt::format("bad host in {}", View(req.target()));
    co_await Respond(400, "bad-request", text);
    co_return false;
  }
  uint16_t port = hp->port.value_or(80);
  std::vector<std::string_view> names;
  for (const auto& field : req) names.push_back(View(field.name_string()));
  override_header_ = std::string(OverrideHeaderOf(names));
  std::shared_ptr<const Policy> policy = sandbox_->policy();
  Decision d = policy->CheckRequest(
      {RequestKind::kHttp, *host, port, method_, url->target, override_header_});
  if (!d.allowed) {
    host_ = host->name;
    port_ = port;
    Blocked(host->name, "", port, d.rule);
    std::string text = fmt::format("{} http://{}:{}{} blocked by {}", method_, host->name, port,
                                   url->target, d.rule);
    if (d.rule == "restricted-http:method-override") {
      text += fmt::format(" (its {} header asks for another method or path)", override_header_);
    }
    co_await Respond(403, "blocked", text, d.rule);
    co_return false;
  }
  // One framing, the same for the upstream as for us: a Transfer-Encoding other than exactly
  // "chunked" (which the proxy re-frames) is refused, and a Content-Length goes on as one value.
  if (auto te = req.find(http::field::transfer_encoding); te != req.end()) {
    // HTTP/1.0 has no chunked framing (RFC 9112 6.1: treat it as faulty).
    if (!beast::iequals(te->value(), "chunked") || req.version() < 11) {
      host_ = host->name;
      port_ = port;
      Blocked(host->name, "", port, kRuleUnsupportedFraming);
      co_await Respond(400, "bad-request",
                       "only Transfer-Encoding: chunked, in HTTP/1.1, is proxied",
                       kRuleUnsupportedFraming);
      co_return false;
    }
  } else if (auto length = parser.content_length()) {
    req.content_length(*length);
  }
  target_ = std::string(url->target);
  std::string key = fmt::format("{}:{}", host->name, port);
  // A kept-alive upstream was checked under the policy it was opened with; after an update the
  // next request connects again, so the new address rules apply to it.
  if (!upstream_ || !upstream_->is_open() || upstream_key_ != key || upstream_policy_ != policy) {
    if (upstream_) upstream_.reset();
    upstream_buffer_.clear();
    host_ = host->name;
    port_ = port;
    if (!co_await OpenUpstream(*policy, *host, port)) co_return false;
    upstream_policy_ = policy;
    if (!co_await StillAllowed(policy)) co_return false;
  }
  // Until the response has been relayed, a policy update that refuses this request closes the
  // connection (Recheck).
  in_exchange_ = true;
  ResetOnExit end_exchange{in_exchange_};
  bool client_keep_alive = req.keep_alive();
  std::string authority(url->authority);
  req.target(beast::string_view(url->target.data(), url->target.size()));
  StripHopByHop(req);
  req.set(http::field::host, authority);
  http::request_parser<http::buffer_body> request(std::move(parser));
  error_code ec = co_await RelayMessage(client_, client_buffer_, request, *upstream_, false, false);
  if (ec) {
    std::string text = fmt::format("sending request: {}", ec.message());
    co_await Respond(502, "upstream-failed", text);
    co_return false;
  }
  ++requests_;
  bool head = request.get().method() == http::verb::head;
  while (true) {
    http::response_parser<http::buffer_body> response;
    response.header_limit(static_cast<uint32_t>(config_.options.max_header_bytes));
    response.body_limit(kNoBodyLimit);
    if (head) response.skip(true);
    co_await http::async_read_header(*upstream_, upstream_buffer_, response, Ec(ec));
    if (ec) {
      std::string text = fmt::format("reading response: {}", ec.message());
      co_await Respond(502, "upstream-failed", text);
      co_return false;
    }
    responded_ = true;
    int status = response.get().result_int();
    bool upstream_keep_alive = response.keep_alive();
    StripHopByHop(response.get());
    if (status == 101) co_return false;  // Upgrade was stripped; a server that switches anyway
    bool interim = status >= 100 && status < 200;
    response.get().keep_alive(client_keep_alive);
    bool need_eof = !interim && response.get().need_eof();
    bool bodyless = head || interim || status == 204 || status == 304;
    ec = co_await RelayMessage(*upstream_, upstream_buffer_, response, client_, true, bodyless);
    if (ec) co_return false;
    if (interim) continue;
    if (!upstream_keep_alive) {
      upstream_->close(ec);
      upstream_.reset();
    }
    co_return client_keep_alive && !need_eof;
  }
}

}  // namespace airlock::netproxy::internal
