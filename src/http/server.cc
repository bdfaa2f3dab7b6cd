#include "http/server.h"

#include <array>
#include <atomic>
#include <cctype>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "boost/asio/detached.hpp"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/redirect_error.hpp"
#include "boost/asio/strand.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/http/buffer_body.hpp"
#include "boost/beast/http/chunk_encode.hpp"
#include "boost/beast/http/empty_body.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/serializer.hpp"
#include "boost/beast/http/string_body.hpp"
#include "boost/beast/http/write.hpp"
#include "common/ids.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/text.h"
#include "fmt/format.h"
#include "http/errors.h"

namespace airlock::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::system::error_code;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

const Logger& Log() {
  static const Logger& log = GetLogger("http");
  return log;
}

std::vector<std::string> SplitPath(std::string_view path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    out.emplace_back(path.substr(i, j - i));
    i = j;
  }
  return out;
}

bool SaneRequestId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<std::string> PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int hi = HexDigitValue(s[i + 1]), lo = HexDigitValue(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      char decoded = static_cast<char>(hi * 16 + lo);
      if (decoded == '\0') return std::nullopt;
      out.push_back(decoded);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

namespace {

// `s` with every byte `keep` refuses as %XX.
template <typename Keep>
std::string EscapeBytes(std::string_view s, Keep keep) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (keep(c)) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// A header value as sent: control characters (CR and LF above all, which would end the header
// and let the value write headers or a body of its own) become %XX. Handlers encode what they
// put in headers; this is the last line of defence against one that did not.
std::string HeaderValue(std::string_view v) {
  return EscapeBytes(v, [](unsigned char c) { return c >= 0x20 && c != 0x7f; });
}

}  // namespace

std::string PercentEncode(std::string_view s, std::string_view keep) {
  return EscapeBytes(s, [keep](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
           keep.find(static_cast<char>(c)) != std::string_view::npos;
  });
}

std::optional<std::string> Request::Query(std::string_view name) const {
  for (const auto& [k, v] : query) {
    if (k == name) return v;
  }
  return std::nullopt;
}

std::string Request::Header(std::string_view name) const {
  auto it = headers.find(beast::string_view(name.data(), name.size()));
  return it == headers.end() ? std::string() : std::string(it->value());
}

void Router::Add(Verb method, std::string pattern, Handler handler, RouteOptions options) {
  std::vector<std::string> segments = SplitPath(pattern);
  routes_.push_back({method, std::move(pattern), std::move(segments), std::move(handler), options});
}

absl::StatusOr<Router::Match> Router::Find(Verb method, std::string_view path) const {
  std::vector<std::string> segments = SplitPath(path);
  bool path_known = false;
  for (const Route& route : routes_) {
    if (route.segments.size() != segments.size()) continue;
    Match m;
    bool ok = true;
    for (size_t i = 0; i < segments.size() && ok; ++i) {
      const std::string& p = route.segments[i];
      if (p.size() > 2 && p.front() == '{' && p.back() == '}') {
        if (segments[i].empty()) ok = false;
        m.params[p.substr(1, p.size() - 2)] = segments[i];
      } else {
        ok = p == segments[i];
      }
    }
    if (!ok) continue;
    path_known = true;
    if (route.method != method) continue;
    m.handler = &route.handler;
    m.options = &route.options;
    m.pattern = route.pattern;
    return m;
  }
  if (path_known) {
    return WithReason(absl::NotFoundError(fmt::format("{} is not allowed on {}",
                                                      std::string(bhttp::to_string(method)), path)),
                      Reason::kMethodNotAllowed);
  }
  return NotFound(fmt::format("no such endpoint: {}", path));
}

// One client connection: reads requests one after another and hands each to its route.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Server::Impl* server, tcp::socket socket)
      : server_(server), stream_(std::move(socket)) {}

  asio::awaitable<void> Run();

  asio::any_io_executor executor() { return stream_.get_executor(); }

  asio::awaitable<bool> WriteResponse(bhttp::response<bhttp::string_body>& res);
  asio::awaitable<bool> WriteStreamHead(bhttp::response<bhttp::empty_body>& res);
  asio::awaitable<bool> WriteChunk(std::string_view data);
  asio::awaitable<bool> WriteLastChunk();
  asio::awaitable<absl::StatusOr<std::string>> ReadBodyChunk();

  bool keep_alive() const { return keep_alive_ && !close_after_; }
  // Since when it has been waiting for a request head (its first or the next); nullopt while
  // it serves one. What a full server closes to make room, the longest waiting first.
  std::optional<Clock::time_point> waiting_since() const {
    int64_t t = waiting_since_.load();
    if (t < 0) return std::nullopt;
    return Clock::time_point(Clock::duration(t));
  }
  unsigned version() const { return version_; }
  void CloseAfterResponse() { close_after_ = true; }
  void Close() {
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

 private:
  asio::awaitable<void> SendContinueOnce();
  asio::awaitable<void> LingeringClose();
  absl::Status CheckDeclaredLength(size_t limit) const;
  asio::awaitable<absl::Status> ReadWholeBody(Request& req, size_t limit);
  bool BuildRequest(const bhttp::request<bhttp::empty_body>& head, Request* req);

  Server::Impl* server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::empty_body>> head_parser_;
  std::optional<bhttp::request_parser<bhttp::buffer_body>> body_parser_;
  std::atomic<int64_t> waiting_since_{-1};  // Clock ticks; -1 while serving a request
  bool keep_alive_ = true;
  bool close_after_ = false;
  bool expects_continue_ = false;
  bool body_pending_ = false;  // the request has a body nobody read yet
  unsigned version_ = 11;
};

class Server::Impl {
 public:
  Impl(ServerOptions options, Router router)
      : options_(std::move(options)),
        router_(std::move(router)),
        work_(asio::make_work_guard(ioc_)),
        acceptor_(asio::make_strand(ioc_)) {}

  ~Impl() { Stop(); }

  void Stop() {
    std::call_once(stopped_, [this] { StopOnce(); });
  }

  void StopOnce() {
    asio::post(acceptor_.get_executor(), [this] {
      error_code ec;
      acceptor_.close(ec);
    });
    {
      std::lock_guard lock(mu_);
      for (auto& weak : connections_) {
        if (auto c = weak.lock()) asio::post(c->executor(), [c] { c->Close(); });
      }
    }
    work_.reset();
    ioc_.stop();
    for (std::thread& t : threads_) t.join();
  }

  absl::Status Listen() {
    size_t colon = options_.listen.rfind(':');
    if (colon == std::string::npos) {
      return InvalidArgument(fmt::format("listen address {}: expected HOST:PORT", options_.listen));
    }
    error_code ec;
    std::string host = options_.listen.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    auto address = asio::ip::make_address(host, ec);
    if (ec) return InvalidArgument(fmt::format("listen address {}: bad host", options_.listen));
    int port = 0;
    try {
      port = std::stoi(options_.listen.substr(colon + 1));
    } catch (...) {
      port = -1;
    }
    if (port < 0 || port > 65535) {
      return InvalidArgument(fmt::format("listen address {}: bad port", options_.listen));
    }
    tcp::endpoint ep(address, static_cast<uint16_t>(port));
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return ErrnoStatus(ec.value(), fmt::format("listen on {}", options_.listen));
    port_ = acceptor_.local_endpoint().port();
    asio::co_spawn(acceptor_.get_executor(), AcceptLoop(), asio::detached);
    for (int i = 0; i < std::max(1, options_.threads); ++i) {
      threads_.emplace_back([this] { ioc_.run(); });
    }
    return absl::OkStatus();
  }

  asio::awaitable<void> AcceptLoop() {
    for (;;) {
      error_code ec;
      tcp::socket socket(asio::make_strand(ioc_));
      co_await acceptor_.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      if (ec) {
        // EMFILE and the like: wait a little rather than spin.
        asio::steady_timer t(acceptor_.get_executor(), std::chrono::milliseconds(50));
        co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      // Full: the connection that has waited longest for a request head makes room, so that
      // idle or silent connections cannot lock new clients out; with none waiting, the new one
      // is refused.
      if (open_.load() >= options_.max_connections && !CloseLongestWaiting()) {
        socket.close(ec);
        continue;
      }
      socket.set_option(tcp::no_delay(true), ec);
      auto conn = std::make_shared<Connection>(this, std::move(socket));
      {
        std::lock_guard lock(mu_);
        std::erase_if(connections_, [](const auto& w) { return w.expired(); });
        connections_.push_back(conn);
      }
      ++open_;
      asio::co_spawn(
          conn->executor(),
          [this, conn]() -> asio::awaitable<void> {
            try {
              co_await conn->Run();
            } catch (const std::exception& e) {
              Log().Error("connection failed", {{"error", e.what()}});
            }
            --open_;
          },
          asio::detached);
    }
  }

  // Closes the connection waiting longest for a request head; false when none is waiting.
  bool CloseLongestWaiting() {
    std::shared_ptr<Connection> oldest;
    std::optional<Clock::time_point> since;
    std::lock_guard lock(mu_);
    for (const auto& weak : connections_) {
      std::shared_ptr<Connection> c = weak.lock();
      if (c == nullptr) continue;
      std::optional<Clock::time_point> t = c->waiting_since();
      if (t && (!since || *t < *since)) {
        since = t;
        oldest = std::move(c);
      }
    }
    if (oldest == nullptr) return false;
    asio::post(oldest->executor(), [oldest] { oldest->Close(); });
    return true;
  }

  const ServerOptions& options() const { return options_; }
  const Router& router() const { return router_; }
  uint16_t port() const { return port_; }
  size_t open() const { return open_.load(); }

 private:
  ServerOptions options_;
  Router router_;
  asio::io_context ioc_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::once_flag stopped_;
  std::vector<std::weak_ptr<Connection>> connections_;
  std::atomic<size_t> open_{0};
  uint16_t port_ = 0;
};

bool Connection::BuildRequest(const bhttp::request<bhttp::empty_body>& head, Request* req) {
  req->method = head.method();
  req->target = std::string(head.target());
  std::string_view target = req->target;
  size_t q = target.find('?');
  std::optional<std::string> path = PercentDecode(target.substr(0, q), false);
  if (!path || path->empty() || path->front() != '/') return false;
  req->path = *path;
  if (q != std::string_view::npos) {
    std::string_view rest = target.substr(q + 1);
    while (!rest.empty()) {
      size_t amp = rest.find('&');
      std::string_view pair = rest.substr(0, amp);
      size_t eq = pair.find('=');
      auto key = PercentDecode(pair.substr(0, eq), true);
      auto value = PercentDecode(eq == std::string_view::npos ? "" : pair.substr(eq + 1), true);
      if (!key || !value) return false;
      if (!key->empty()) req->query.emplace_back(*key, *value);
      if (amp == std::string_view::npos) break;
      rest = rest.substr(amp + 1);
    }
  }
  req->headers = head.base();
  std::string id(head["X-Request-Id"]);
  req->request_id = SaneRequestId(id) ? id : "req-" + RandomHex(8);
  return true;
}

asio::awaitable<void> Connection::Run() {
  const ServerOptions& opt = server_->options();
  // The read buffer holds a request head, or a little more than one read's worth of body; its
  // bound also caps what the parser must hold at once for a chunk's header line (extensions)
  // or trailers, which Beast's own limits do not count.
  buffer_.max_size(opt.max_header_bytes + (64 << 10));
  bool first = true;
  for (;;) {
    head_parser_.emplace();
    head_parser_->header_limit(static_cast<std::uint32_t>(opt.max_header_bytes));
    // The route's own limit applies once the route is known (ReadWholeBody, ReadBodyChunk).
    head_parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    body_parser_.reset();
    close_after_ = false;
    expects_continue_ = false;
    stream_.expires_after(first ? opt.header_timeout : opt.idle_timeout);
    first = false;
    error_code ec;
    waiting_since_.store(Clock::now().time_since_epoch().count());
    co_await bhttp::async_read_header(stream_, buffer_, *head_parser_,
                                      asio::redirect_error(asio::use_awaitable, ec));
    waiting_since_.store(-1);
    if (ec == bhttp::error::header_limit) {
      bhttp::response<bhttp::string_body> res{bhttp::status::request_header_fields_too_large, 11};
      res.set(bhttp::field::connection, "close");
      res.body() = "request head too large\n";
      res.prepare_payload();
      close_after_ = true;
      co_await WriteResponse(res);
      break;
    }
    if (ec) break;  // end of stream, timeout, garbage: nothing sensible to answer
    stream_.expires_after(opt.header_timeout);
    auto start = Clock::now();
    const auto& head = head_parser_->get();
    keep_alive_ = head.keep_alive();
    version_ = head.version();
    expects_continue_ = beast::iequals(head[bhttp::field::expect], "100-continue");
    body_pending_ = head_parser_->chunked() || head_parser_->content_length().value_or(0) > 0;

    Request req;
    std::string_view route;
    if (!BuildRequest(head, &req)) {
      Exchange ex(this, std::move(req));
      close_after_ = true;
      co_await ex.RespondError(
          WithReason(InvalidArgument("malformed request target"), Reason::kMalformedBody));
      break;
    }
    Exchange ex(this, std::move(req));
    absl::StatusOr<Router::Match> match =
        server_->router().Find(ex.request().method, ex.request().path);
    if (!match.ok()) {
      co_await ex.RespondError(match.status());
    } else {
      ex.request().params = std::move(match->params);
      route = match->pattern;
      absl::Status auth;
      if (match->options->authenticated && opt.authenticate) {
        if (opt.authenticate_on) {
          auth = co_await RunBlocking(*opt.authenticate_on, [&] { return opt.authenticate(ex); });
        } else {
          auth = opt.authenticate(ex);
        }
      }
      if (!auth.ok()) {
        co_await ex.RespondError(auth);
      } else if (!match->options->stream_body) {
        absl::Status read = co_await ReadWholeBody(ex.request(), match->options->max_body_bytes);
        if (!read.ok()) {
          co_await ex.RespondError(read);
        }
      } else if (absl::Status declared = CheckDeclaredLength(match->options->max_body_bytes);
                 !declared.ok()) {
        co_await ex.RespondError(declared);
      } else {
        body_parser_.emplace(std::move(*head_parser_));
        body_parser_->body_limit(match->options->max_body_bytes);
      }
      if (!ex.answered()) {
        std::string thrown;
        try {
          co_await (*match->handler)(ex);
        } catch (const std::exception& e) {
          thrown = e.what();
          Log().Error("handler threw",
                      {{"request_id", ex.request().request_id}, {"error", thrown}});
        }
        if (!ex.answered() && !thrown.empty()) co_await ex.RespondError(Internal(thrown));
        if (!ex.answered()) {
          co_await ex.RespondError(Internal("the handler returned without an answer"));
        }
      }
    }
    if (body_pending_) close_after_ = true;  // an unread body: the connection is unusable
    if (opt.on_complete) {
      opt.on_complete(ex, route,
                      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start));
    }
    if (!keep_alive()) break;
  }
  if (body_pending_) co_await LingeringClose();
  Close();
}

asio::awaitable<void> Connection::LingeringClose() {
  // Closing with unread input makes the kernel send RST, which can destroy our answer (a 413)
  // before the client reads it. Stop sending, then read and drop what the client still sends,
  // for a bounded time and amount, as web servers do.
  error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  std::array<char, 16384> sink;
  size_t drained = 0;
  stream_.expires_after(std::chrono::seconds(2));
  while (!ec && drained < (16u << 20)) {
    drained += co_await stream_.async_read_some(asio::buffer(sink),
                                                asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<void> Connection::SendContinueOnce() {
  if (!expects_continue_) co_return;
  expects_continue_ = false;
  bhttp::response<bhttp::empty_body> res{bhttp::status::continue_, version_};
  error_code ec;
  stream_.expires_after(server_->options().write_timeout);
  co_await bhttp::async_write(stream_, res, asio::redirect_error(asio::use_awaitable, ec));
}

asio::awaitable<absl::Status> Connection::ReadWholeBody(Request& req, size_t limit) {
  if (!body_pending_) co_return absl::OkStatus();
  if (absl::Status declared = CheckDeclaredLength(limit); !declared.ok()) co_return declared;
  co_await SendContinueOnce();
  bhttp::request_parser<bhttp::string_body> parser(std::move(*head_parser_));
  parser.body_limit(limit);
  stream_.expires_after(server_->options().body_timeout);
  error_code ec;
  co_await bhttp::async_read(stream_, buffer_, parser,
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec == bhttp::error::body_limit) {
    co_return WithReason(ResourceExhausted(fmt::format(
                             "request body is over this endpoint's limit of {} bytes", limit)),
                         Reason::kPayloadTooLarge);
  }
  if (ec) {
    close_after_ = true;
    co_return WithReason(InvalidArgument(fmt::format("reading the body: {}", ec.message())),
                         Reason::kMalformedBody);
  }
  body_pending_ = false;
  req.body = parser.release().body();
  co_return absl::OkStatus();
}

absl::Status Connection::CheckDeclaredLength(size_t limit) const {
  if (head_parser_->content_length() && *head_parser_->content_length() > limit) {
    return WithReason(ResourceExhausted(fmt::format(
                          "request body of {} bytes is over this endpoint's limit of {}",
                          *head_parser_->content_length(), limit)),
                      Reason::kPayloadTooLarge);
  }
  return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<std::string>> Connection::ReadBodyChunk() {
  if (!body_parser_ || !body_pending_ || body_parser_->is_done()) {
    body_pending_ = false;
    co_return std::string();
  }
  co_await SendContinueOnce();
  std::string chunk(64 << 10, '\0');
  for (;;) {
    body_parser_->get().body().data = chunk.data();
    body_parser_->get().body().size = chunk.size();
    stream_.expires_after(server_->options().body_timeout);
    error_code ec;
    co_await bhttp::async_read(stream_, buffer_, *body_parser_,
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec == bhttp::error::body_limit) {
      co_return WithReason(ResourceExhausted("request body is over this endpoint's limit"),
                           Reason::kPayloadTooLarge);
    }
    if (ec) {
      close_after_ = true;
      co_return WithReason(InvalidArgument(fmt::format("reading the body: {}", ec.message())),
                           Reason::kMalformedBody);
    }
    size_t n = chunk.size() - body_parser_->get().body().size;
    if (body_parser_->is_done()) body_pending_ = false;
    if (n > 0 || body_parser_->is_done()) {
      chunk.resize(n);
      if (n == 0) co_return std::string();
      co_return chunk;
    }
  }
}

asio::awaitable<bool> Connection::WriteResponse(bhttp::response<bhttp::string_body>& res) {
  res.keep_alive(keep_alive());
  stream_.expires_after(server_->options().write_timeout);
  error_code ec;
  co_await bhttp::async_write(stream_, res, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) close_after_ = true;
  co_return !ec;
}

asio::awaitable<bool> Connection::WriteStreamHead(bhttp::response<bhttp::empty_body>& res) {
  res.keep_alive(keep_alive());
  res.chunked(true);
  bhttp::response_serializer<bhttp::empty_body> sr(res);
  stream_.expires_after(server_->options().write_timeout);
  error_code ec;
  co_await bhttp::async_write_header(stream_, sr, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) close_after_ = true;
  co_return !ec;
}

asio::awaitable<bool> Connection::WriteChunk(std::string_view data) {
  if (data.empty()) co_return true;  // an empty chunk would end the stream
  stream_.expires_after(server_->options().write_timeout);
  error_code ec;
  co_await asio::async_write(stream_, bhttp::make_chunk(asio::buffer(data.data(), data.size())),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) close_after_ = true;
  co_return !ec;
}

asio::awaitable<bool> Connection::WriteLastChunk() {
  stream_.expires_after(server_->options().write_timeout);
  error_code ec;
  co_await asio::async_write(stream_, bhttp::make_chunk_last(),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) close_after_ = true;
  co_return !ec;
}

asio::any_io_executor Exchange::executor() const { return conn_->executor(); }

asio::awaitable<void> Exchange::Respond(int status, std::string_view content_type, std::string body,
                                        std::vector<std::pair<std::string, std::string>> headers) {
  if (answered_) co_return;
  answered_ = true;
  status_ = status;
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), conn_->version()};
  res.set(bhttp::field::server, "airlockd");
  res.set(bhttp::field::content_type, beast::string_view(content_type.data(), content_type.size()));
  res.set("X-Request-Id", req_.request_id);
  for (const auto& [k, v] : headers) res.set(k, HeaderValue(v));
  res.body() = std::move(body);
  res.prepare_payload();
  co_await conn_->WriteResponse(res);
}

asio::awaitable<void> Exchange::RespondJson(int status, const nlohmann::json& body) {
  co_await Respond(status, "application/json",
                   body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

asio::awaitable<void> Exchange::RespondError(const absl::Status& status) {
  int code = HttpStatusFor(status);
  if (code >= 500) {
    Log().Error("request failed", {{"request_id", req_.request_id},
                                   {"path", req_.path},
                                   {"error", std::string(status.message())}});
  }
  if (code == 413 || code == 400) conn_->CloseAfterResponse();
  if (streaming_) {
    // Too late for a status line: end the stream with an error event the client can read.
    co_await Write(
        fmt::format("event: error\ndata: {}\n\n", ErrorBody(status, req_.request_id).dump()));
    co_await EndStream();
    co_return;
  }
  co_await RespondJson(code, ErrorBody(status, req_.request_id));
}

asio::awaitable<bool> Exchange::BeginStream(
    int status, std::string_view content_type,
    std::vector<std::pair<std::string, std::string>> headers) {
  if (answered_) co_return false;
  answered_ = true;
  streaming_ = true;
  status_ = status;
  bhttp::response<bhttp::empty_body> res{static_cast<bhttp::status>(status), conn_->version()};
  res.set(bhttp::field::server, "airlockd");
  res.set(bhttp::field::content_type, beast::string_view(content_type.data(), content_type.size()));
  res.set(bhttp::field::cache_control, "no-cache");
  res.set("X-Request-Id", req_.request_id);
  for (const auto& [k, v] : headers) res.set(k, HeaderValue(v));
  co_return co_await conn_->WriteStreamHead(res);
}

asio::awaitable<bool> Exchange::Write(std::string_view data) {
  co_return co_await conn_->WriteChunk(data);
}

asio::awaitable<void> Exchange::EndStream() {
  if (!streaming_) co_return;
  streaming_ = false;
  co_await conn_->WriteLastChunk();
}

asio::awaitable<void> StreamResponse(Exchange& ex, int status, std::string_view content_type,
                                     std::shared_ptr<StreamQueue<std::string>> queue,
                                     std::vector<std::pair<std::string, std::string>> headers,
                                     std::chrono::milliseconds keepalive) {
  if (!co_await ex.BeginStream(status, content_type, std::move(headers))) {
    queue->Abandon();
    co_return;
  }
  const bool events = content_type == "text/event-stream";
  const asio::steady_timer::duration idle =
      events ? asio::steady_timer::duration(keepalive) : asio::steady_timer::duration::max();
  // Named, not a temporary in the co_await expression (GCC 12 moves those bitwise, which breaks a
  // short std::string).
  const std::optional<std::string> ping = ": keep-alive\n\n";
  while (std::optional<std::string> item = co_await queue->PopOr(ping, idle)) {
    if (!co_await ex.Write(*item)) {
      queue->Abandon();
      co_return;
    }
  }
  co_await ex.EndStream();
}

asio::awaitable<absl::StatusOr<std::string>> Exchange::ReadBodyChunk() {
  co_return co_await conn_->ReadBodyChunk();
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

void Server::Stop() { impl_->Stop(); }

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options, Router router) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(router));
  RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

uint16_t Server::port() const { return impl_->port(); }
size_t Server::open_connections() const { return impl_->open(); }

}  // namespace airlock::http
