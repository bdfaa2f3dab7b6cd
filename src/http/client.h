// A small synchronous HTTP/1.1 client (Boost.Beast) for airlock's own API: keep-alive on one
// connection, bearer authentication, buffered or streamed bodies. Used by the C++ SDK, the CLI
// and the tests. Plain http:// only (the daemon listens on loopback or behind a TLS proxy).
//
// Not thread-safe: one Client per thread. A transport failure is Unavailable naming the server;
// an HTTP error status is not an error here (the caller reads Response::status).
#ifndef AIRLOCK_HTTP_CLIENT_H_
#define AIRLOCK_HTTP_CLIENT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "boost/beast/http/verb.hpp"

namespace airlock::http {

struct ClientOptions {
  std::string base_url = "http://127.0.0.1:8080";  // http://HOST:PORT[/prefix]
  std::string api_key;                             // sent as Authorization: Bearer
  // Each connect, read and write of a request must finish within this; a call whose answer
  // may take longer to begin passes its own `answer_timeout`. Connections also send TCP
  // keep-alive probes, so a server host that is gone fails a long wait within about a minute.
  std::chrono::milliseconds timeout{120'000};
};

struct ClientResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  std::string Header(std::string_view name) const;
};

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);
  ~Client();

  using Headers = std::vector<std::pair<std::string, std::string>>;

  // `target` is the path and query ("/v1/sandboxes?state=Running"), appended to the base URL.
  // `answer_timeout`, when longer than ClientOptions::timeout, is how long the answer's head may
  // take to come (a command's result comes when the command ends). A call that runs out of time
  // is Unavailable saying so, and its connection is closed.
  absl::StatusOr<ClientResponse> Send(boost::beast::http::verb method, std::string_view target,
                                      std::string body = {}, std::string_view content_type = {},
                                      const Headers& headers = {},
                                      std::chrono::milliseconds answer_timeout = {});

  // Like Send, but hands the response body to `on_data` as it arrives (the returned body is
  // empty); `on_data` returns false to stop reading, which closes the connection. Each read of
  // the body must bring something within ClientOptions::timeout (airlockd's event streams send a
  // keep-alive comment when idle).
  absl::StatusOr<ClientResponse> SendStreaming(boost::beast::http::verb method,
                                               std::string_view target, std::string body,
                                               std::string_view content_type,
                                               const std::function<bool(std::string_view)>& on_data,
                                               const Headers& headers = {},
                                               std::chrono::milliseconds answer_timeout = {});

  // Sends a body produced chunk by chunk (`next` returns an empty string at the end, or an error).
  absl::StatusOr<ClientResponse> Upload(boost::beast::http::verb method, std::string_view target,
                                        const std::function<absl::StatusOr<std::string>()>& next,
                                        std::string_view content_type, const Headers& headers = {});

  // Like Upload, but hands the response body to `on_data` as it arrives (as SendStreaming).
  absl::StatusOr<ClientResponse> UploadStreaming(
      boost::beast::http::verb method, std::string_view target,
      const std::function<absl::StatusOr<std::string>()>& next, std::string_view content_type,
      const std::function<bool(std::string_view)>& on_data, const Headers& headers = {});

  const ClientOptions& options() const { return options_; }

 private:
  class Impl;
  explicit Client(ClientOptions options);
  std::chrono::milliseconds AnswerTimeout(std::chrono::milliseconds answer_timeout) const;
  ClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace airlock::http

#endif  // AIRLOCK_HTTP_CLIENT_H_
