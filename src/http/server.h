// An HTTP/1.1 server on Boost.Beast with C++20 coroutines: keep-alive, bounded heads and bodies,
// per-route body limits, streamed request bodies, chunked (streamed) responses, request ids, and
// one place where errors become responses (http/errors.h).
//
//   Router router;
//   router.Add(Verb::get, "/v1/sandboxes/{id}", GetSandbox);
//   ASSIGN_OR_RETURN(auto server, Server::Start({.listen = "127.0.0.1:0"}, std::move(router)));
//
// Each connection runs as one coroutine on its own strand; handlers are coroutines that answer
// through their Exchange. Work that blocks (a database, a child process) belongs on a thread pool
// (RunBlocking below), never on the I/O threads. Thread-safe: Start, port and the destructor may
// be called from any thread; the destructor closes the listener and every connection and joins
// the I/O threads.
#ifndef AIRLOCK_HTTP_SERVER_H_
#define AIRLOCK_HTTP_SERVER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/async_result.hpp"
#include "boost/asio/awaitable.hpp"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/beast/http/fields.hpp"
#include "boost/beast/http/verb.hpp"
#include "http/stream_queue.h"
#include "nlohmann/json.hpp"

namespace airlock::http {

namespace asio = boost::asio;
using Verb = boost::beast::http::verb;

struct Request {
  Verb method = Verb::unknown;
  std::string target;  // as sent, e.g. "/v1/sandboxes/sb-1/files?path=a%20b"
  std::string path;    // percent-decoded path without the query
  std::vector<std::pair<std::string, std::string>> query;  // decoded, in order
  boost::beast::http::fields headers;
  std::string body;                           // the whole body, unless the route streams it
  std::map<std::string, std::string> params;  // from the route pattern: {"id": "sb-1"}
  std::string request_id;

  // The first value of a query parameter.
  std::optional<std::string> Query(std::string_view name) const;
  std::string Header(std::string_view name) const;
};

class Connection;

// One request and its response. A handler answers exactly once: Respond*, or a stream started
// with BeginStream and ended with EndStream. A handler that returns without answering gets a 500.
class Exchange {
 public:
  Exchange(Connection* connection, Request request) : conn_(connection), req_(std::move(request)) {}

  const Request& request() const { return req_; }
  Request& request() { return req_; }

  // Who is calling, as the server's authenticator established (empty for public routes).
  const std::string& principal() const { return principal_; }
  void set_principal(std::string p) { principal_ = std::move(p); }

  asio::awaitable<void> Respond(int status, std::string_view content_type, std::string body,
                                std::vector<std::pair<std::string, std::string>> headers = {});
  asio::awaitable<void> RespondJson(int status, const nlohmann::json& body);
  asio::awaitable<void> RespondError(const absl::Status& status);

  // A chunked response. Write returns false once the client has gone (the handler should stop
  // producing); EndStream sends the last chunk.
  asio::awaitable<bool> BeginStream(int status, std::string_view content_type,
                                    std::vector<std::pair<std::string, std::string>> headers = {});
  asio::awaitable<bool> Write(std::string_view data);
  asio::awaitable<void> EndStream();

  // Routes with RouteOptions::stream_body read their body here, chunk by chunk: an empty string
  // at the end; ResourceExhausted (413) past the route's limit.
  asio::awaitable<absl::StatusOr<std::string>> ReadBodyChunk();

  bool answered() const { return answered_; }
  int status() const { return status_; }
  asio::any_io_executor executor() const;

 private:
  Connection* conn_;
  Request req_;
  std::string principal_;
  bool answered_ = false;
  bool streaming_ = false;
  int status_ = 0;
};

using Handler = std::function<asio::awaitable<void>(Exchange&)>;

struct RouteOptions {
  size_t max_body_bytes = 1 << 20;
  bool stream_body = false;   // the handler reads the body with ReadBodyChunk
  bool authenticated = true;  // the server's authenticator runs first
};

// Method + path pattern -> handler. Patterns are literal segments and {name} captures, matched
// segment by segment ("/v1/sandboxes/{id}/artifacts:collect").
class Router {
 public:
  void Add(Verb method, std::string pattern, Handler handler, RouteOptions options = {});

  struct Match {
    const Handler* handler = nullptr;
    const RouteOptions* options = nullptr;
    std::string_view pattern;
    std::map<std::string, std::string> params;
  };
  // NotFound when no pattern matches the path; kMethodNotAllowed when one matches with another
  // method.
  absl::StatusOr<Match> Find(Verb method, std::string_view path) const;

 private:
  struct Route {
    Verb method;
    std::string pattern;
    std::vector<std::string> segments;
    Handler handler;
    RouteOptions options;
  };
  std::vector<Route> routes_;
};

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks a free one
  int threads = 2;
  size_t max_header_bytes = 16 << 10;
  std::chrono::milliseconds header_timeout{10'000};  // a whole request head
  std::chrono::milliseconds body_timeout{300'000};   // a whole request body
  std::chrono::milliseconds write_timeout{60'000};   // each write of a response
  std::chrono::milliseconds idle_timeout{75'000};    // a kept-alive connection with no request
  // Open connections at most. When full, the one that has waited longest for a request head (its
  // first, or the next on a kept-alive connection) is closed to make room for a new one; with
  // none waiting, the new one is refused.
  size_t max_connections = 4096;
  // Runs before every authenticated route: sets the principal or fails (401/403).
  std::function<absl::Status(Exchange&)> authenticate;
  // Where `authenticate` runs when it may block (a database lookup): a thread pool, so that a
  // slow lookup holds up only its own request. Empty: on the connection's I/O thread.
  std::optional<asio::any_io_executor> authenticate_on;
  // After every request: for access logs and metrics. `route` is the pattern matched ("" if none).
  std::function<void(const Exchange&, std::string_view route, std::chrono::microseconds)>
      on_complete;
};

class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Start(ServerOptions options, Router router);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Stops accepting, closes every connection and joins the I/O threads; the I/O context (and
  // the handlers still queued on it) lives until the Server is destroyed, so work finishing on
  // other threads may still hand results to it. Idempotent; the destructor calls it.
  void Stop();

  uint16_t port() const;
  size_t open_connections() const;

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Answers with a chunked response of what `queue` yields until it closes. When the client goes
// away (or never gets the head), abandons the queue so its producer stops. An event stream
// (text/event-stream) gets a comment line, ": keep-alive", whenever nothing has been sent for
// `keepalive`: a client's read timeout then catches a dead server, not a quiet command.
asio::awaitable<void> StreamResponse(
    Exchange& ex, int status, std::string_view content_type,
    std::shared_ptr<StreamQueue<std::string>> queue,
    std::vector<std::pair<std::string, std::string>> headers = {},
    std::chrono::milliseconds keepalive = std::chrono::seconds(15));

// Runs `f` on `executor` (a thread pool) and resumes the calling coroutine, on its own
// executor, with f's result. `f` must not throw. Callers in a coroutine: see the note on
// closures in co_await expressions in daemon.cc (Daemon::Impl::Blocking).
template <typename F>
asio::awaitable<std::invoke_result_t<F>> RunBlocking(asio::any_io_executor executor, F f) {
  using R = std::invoke_result_t<F>;
  return asio::async_initiate<decltype(asio::use_awaitable), void(R)>(
      [executor](auto handler, F work) mutable {
        asio::post(executor, [work = std::move(work), handler = std::move(handler)]() mutable {
          R result = work();
          auto home = asio::get_associated_executor(handler);
          asio::dispatch(home,
                         [handler = std::move(handler), result = std::move(result)]() mutable {
                           std::move(handler)(std::move(result));
                         });
        });
      },
      asio::use_awaitable, std::move(f));
}

// "a%20b" -> "a b"; nullopt for a malformed escape or an encoded NUL.
std::optional<std::string> PercentDecode(std::string_view s, bool plus_is_space);

// "a b/c" -> "a%20b%2Fc": every byte but ASCII letters, digits, "-._~" and those in `keep` as
// %XX (upper-case hex).
std::string PercentEncode(std::string_view s, std::string_view keep = "");

}  // namespace airlock::http

#endif  // AIRLOCK_HTTP_SERVER_H_
