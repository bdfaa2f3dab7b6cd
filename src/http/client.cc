#include "http/client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <limits>

#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
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
#include "common/status.h"
#include "fmt/format.h"

namespace airlock::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

std::string ClientResponse::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (beast::iequals(k, beast::string_view(name.data(), name.size()))) return v;
  }
  return {};
}

class Client::Impl {
 public:
  asio::io_context ioc;
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buffer;
  bool connected = false;
  std::string host, port, prefix;

  absl::Status Parse(const std::string& url) {
    constexpr std::string_view kScheme = "http://";
    if (url.rfind(kScheme, 0) != 0) {
      return InvalidArgument(fmt::format("server URL {}: only http:// is supported", url));
    }
    std::string rest = url.substr(kScheme.size());
    size_t slash = rest.find('/');
    std::string authority = rest.substr(0, slash);
    prefix = slash == std::string::npos ? "" : rest.substr(slash);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    size_t colon = authority.rfind(':');
    if (colon == std::string::npos || authority.back() == ']') {
      host = authority;
      port = "80";
    } else {
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
    }
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    if (host.empty()) return InvalidArgument(fmt::format("server URL {}: no host", url));
    return absl::OkStatus();
  }

  // Runs one asynchronous operation to its end or to `timeout`, whichever comes first: the
  // stream's deadline applies to asynchronous operations only (Beast's synchronous calls ignore
  // it). A late operation ends with beast::error::timeout and the socket closed.
  template <typename Start>
  error_code Run(std::chrono::milliseconds timeout, Start start) {
    error_code result = asio::error::would_block;
    stream.expires_after(timeout);
    start([&result](error_code ec, auto&&...) { result = ec; });
    ioc.restart();
    ioc.run();
    return result;
  }

  // A kept-alive connection the server has closed meanwhile shows as readable (EOF): reconnect
  // before sending rather than lose a request to it.
  bool Stale() {
    if (!connected) return true;
    struct pollfd p = {stream.socket().native_handle(), POLLIN, 0};
    return ::poll(&p, 1, 0) != 0;
  }

  absl::Status Connect(std::chrono::milliseconds timeout) {
    error_code ec;
    stream.socket().close(ec);
    buffer.consume(buffer.size());
    connected = false;
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(host, port, ec);
    if (ec) return absl::UnavailableError(fmt::format("resolve {}: {}", host, ec.message()));
    ec = Run(timeout, [&](auto done) { stream.async_connect(results, std::move(done)); });
    if (ec) {
      return absl::UnavailableError(
          fmt::format("connect to airlockd at {}:{}: {}", host, port, ec.message()));
    }
    stream.socket().set_option(tcp::no_delay(true), ec);
    // A call may legitimately wait long for its answer (a command's result): keep-alive probes
    // find a server that is gone (host down, connection dropped on the way) within about a
    // minute even then.
    int fd = stream.socket().native_handle();
    const int on = 1, idle = 30, interval = 10, probes = 3;
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
    connected = true;
    return absl::OkStatus();
  }

  // Reads a response body into `on_data` piece by piece; true when on_data stopped it.
  absl::StatusOr<bool> ReadBody(bhttp::response_parser<bhttp::buffer_body>& parser,
                                const std::function<bool(std::string_view)>& on_data,
                                std::chrono::milliseconds timeout, std::string_view what) {
    std::string chunk(64 << 10, '\0');
    error_code ec;
    while (!parser.is_done()) {
      parser.get().body().data = chunk.data();
      parser.get().body().size = chunk.size();
      // read_some: read would wait until the 64 KiB chunk is full, so a live stream (an exec's
      // output) would reach the caller only at its end.
      ec = Run(timeout,
               [&](auto done) { bhttp::async_read_some(stream, buffer, parser, std::move(done)); });
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) return Fail(ec, what);
      size_t n = chunk.size() - parser.get().body().size;
      if (n > 0 && !on_data(std::string_view(chunk.data(), n))) return true;
    }
    return false;
  }

  absl::Status Fail(const error_code& ec, std::string_view what) {
    connected = false;
    error_code ignored;
    stream.socket().close(ignored);
    return absl::UnavailableError(
        fmt::format("{} airlockd at {}:{}: {}", what, host, port, ec.message()));
  }
};

Client::Client(ClientOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  std::unique_ptr<Client> c(new Client(std::move(options)));
  RETURN_IF_ERROR(c->impl_->Parse(c->options_.base_url));
  return c;
}

namespace {

template <typename Message>
void SetCommon(Message& req, const std::string& host, const ClientOptions& o,
               std::string_view content_type, const Client::Headers& headers) {
  req.set(bhttp::field::host, host);
  req.set(bhttp::field::user_agent, "airlock-client/0.1");
  req.keep_alive(true);
  if (!o.api_key.empty()) req.set(bhttp::field::authorization, "Bearer " + o.api_key);
  if (!content_type.empty()) {
    req.set(bhttp::field::content_type,
            beast::string_view(content_type.data(), content_type.size()));
  }
  for (const auto& [k, v] : headers) req.set(k, v);
}

template <typename Parser>
void CopyHeaders(const Parser& parser, ClientResponse* out) {
  out->status = static_cast<int>(parser.get().result_int());
  for (const auto& field : parser.get()) {
    out->headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
}

using BodySink = std::function<bool(std::string_view)>;

// The response of a streaming call `call(sink)`, with its body collected.
template <typename F>
absl::StatusOr<ClientResponse> Collected(F call) {
  std::string collected;
  ASSIGN_OR_RETURN(ClientResponse r, call([&](std::string_view d) {
                     collected.append(d);
                     return true;
                   }));
  r.body = std::move(collected);
  return r;
}

}  // namespace

absl::StatusOr<ClientResponse> Client::Send(bhttp::verb method, std::string_view target,
                                            std::string body, std::string_view content_type,
                                            const Headers& headers,
                                            std::chrono::milliseconds answer_timeout) {
  return Collected([&](const BodySink& sink) {
    return SendStreaming(method, target, std::move(body), content_type, sink, headers,
                         answer_timeout);
  });
}

std::chrono::milliseconds Client::AnswerTimeout(std::chrono::milliseconds answer_timeout) const {
  return std::max(answer_timeout, options_.timeout);
}

absl::StatusOr<ClientResponse> Client::SendStreaming(
    bhttp::verb method, std::string_view target, std::string body, std::string_view content_type,
    const std::function<bool(std::string_view)>& on_data, const Headers& headers,
    std::chrono::milliseconds answer_timeout) {
  Impl& im = *impl_;
  if (im.Stale()) RETURN_IF_ERROR(im.Connect(options_.timeout));
  bhttp::request<bhttp::string_body> req{method, im.prefix + std::string(target), 11};
  SetCommon(req, im.host, options_, content_type, headers);
  req.body() = std::move(body);
  req.prepare_payload();
  error_code write_ec = im.Run(
      options_.timeout, [&](auto done) { bhttp::async_write(im.stream, req, std::move(done)); });
  // A server may answer before taking the whole body (413) and close: its answer is still
  // readable after our write failed.
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  error_code ec = im.Run(AnswerTimeout(answer_timeout), [&](auto done) {
    bhttp::async_read_header(im.stream, im.buffer, parser, std::move(done));
  });
  if (ec) return im.Fail(write_ec ? write_ec : ec, write_ec ? "send to" : "read from");
  ClientResponse out;
  CopyHeaders(parser, &out);
  ASSIGN_OR_RETURN(bool stopped, im.ReadBody(parser, on_data, options_.timeout, "read from"));
  if (stopped || write_ec || !parser.get().keep_alive()) {
    im.connected = false;
    im.stream.socket().close(ec);
  }
  return out;
}

absl::StatusOr<ClientResponse> Client::Upload(
    bhttp::verb method, std::string_view target,
    const std::function<absl::StatusOr<std::string>()>& next, std::string_view content_type,
    const Headers& headers) {
  return Collected([&](const BodySink& sink) {
    return UploadStreaming(method, target, next, content_type, sink, headers);
  });
}

absl::StatusOr<ClientResponse> Client::UploadStreaming(
    bhttp::verb method, std::string_view target,
    const std::function<absl::StatusOr<std::string>()>& next, std::string_view content_type,
    const std::function<bool(std::string_view)>& on_data, const Headers& headers) {
  Impl& im = *impl_;
  if (im.Stale()) RETURN_IF_ERROR(im.Connect(options_.timeout));
  bhttp::request<bhttp::empty_body> req{method, im.prefix + std::string(target), 11};
  SetCommon(req, im.host, options_, content_type, headers);
  req.chunked(true);
  bhttp::request_serializer<bhttp::empty_body> sr(req);
  error_code ec = im.Run(options_.timeout, [&](auto done) {
    bhttp::async_write_header(im.stream, sr, std::move(done));
  });
  if (ec) return im.Fail(ec, "send to");
  for (;;) {
    absl::StatusOr<std::string> data = next();
    if (!data.ok()) {
      im.connected = false;
      im.stream.socket().close(ec);
      return data.status();
    }
    if (data->empty()) break;
    auto chunk = bhttp::make_chunk(asio::buffer(*data));
    ec = im.Run(options_.timeout,
                [&](auto done) { asio::async_write(im.stream, chunk, std::move(done)); });
    if (ec) break;  // the server may have answered early (413): read its answer below
  }
  if (!ec) {
    auto last = bhttp::make_chunk_last();
    ec = im.Run(options_.timeout,
                [&](auto done) { asio::async_write(im.stream, last, std::move(done)); });
  }
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  error_code rec = im.Run(options_.timeout, [&](auto done) {
    bhttp::async_read_header(im.stream, im.buffer, parser, std::move(done));
  });
  if (rec) return im.Fail(ec ? ec : rec, "upload to");
  ClientResponse out;
  CopyHeaders(parser, &out);
  ASSIGN_OR_RETURN(bool stopped, im.ReadBody(parser, on_data, options_.timeout, "upload to"));
  if (stopped || ec || !parser.get().keep_alive()) {
    im.connected = false;
    im.stream.socket().close(rec);
  }
  return out;
}

}  // namespace airlock::http
