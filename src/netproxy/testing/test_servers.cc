#include "netproxy/testing/test_servers.h"

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>
#include <utility>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/detached.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/redirect_error.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/string_body.hpp"
#include "common/files.h"
#include "common/status.h"
#include "fmt/format.h"
#include "netproxy/testing/test_net.h"

namespace airlock::netproxy::testing {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;
using tcp = asio::ip::tcp;

class TestServer::Impl {
 public:
  explicit Impl(Options options) : options_(std::move(options)), acceptor_(ioc_) {}

  ~Impl() {
    ioc_.stop();
    if (thread_.joinable()) thread_.join();
  }

  absl::Status Listen() {
    error_code ec;
    tcp::endpoint ep(asio::ip::make_address(options_.address, ec), options_.port);
    if (ec) return InvalidArgument(options_.address);
    auto open = [&] {
      acceptor_.open(ep.protocol(), ec);
      if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) acceptor_.bind(ep, ec);
      if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    };
    if (options_.netns.empty()) {
      open();
    } else {
      RETURN_IF_ERROR(InNetns(options_.netns, open));
    }
    if (ec) return ErrnoStatus(ec.value(), fmt::format("test server on {}", options_.address));
    port_ = acceptor_.local_endpoint().port();
    asio::co_spawn(ioc_, Accept(), asio::detached);
    thread_ = std::thread([this] { ioc_.run(); });
    return absl::OkStatus();
  }

  uint16_t port() const { return port_; }
  std::vector<std::string> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  std::string last_head() const {
    std::lock_guard lock(mu_);
    return last_head_;
  }
  uint64_t connections() const { return connections_; }

 private:
  asio::awaitable<void> Accept() {
    while (true) {
      error_code ec;
      tcp::socket socket =
          co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      ++connections_;
      if (options_.kind == Kind::kEcho) {
        asio::co_spawn(ioc_, Echo(std::move(socket)), asio::detached);
      } else {
        asio::co_spawn(ioc_, Serve(std::move(socket)), asio::detached);
      }
    }
  }

  static asio::awaitable<void> Echo(tcp::socket socket) {
    char buf[16384];
    error_code ec;
    while (true) {
      size_t n = co_await socket.async_read_some(asio::buffer(buf),
                                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      co_await asio::async_write(socket, asio::buffer(buf, n),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
    }
  }

  asio::awaitable<void> Serve(tcp::socket socket) {
    boost::beast::flat_buffer buffer;
    error_code ec;
    auto token = asio::redirect_error(asio::use_awaitable, ec);
    while (true) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(256 << 20);
      co_await http::async_read(socket, buffer, parser, token);
      if (ec) co_return;
      const auto& req = parser.get();
      std::string target(req.target());
      std::string method(req.method_string());
      std::string head = fmt::format("{} {}\r\n", method, target);
      for (const auto& field : req) {
        head +=
            fmt::format("{}: {}\r\n", std::string(field.name_string()), std::string(field.value()));
      }
      {
        std::lock_guard lock(mu_);
        requests_.push_back(fmt::format("{} {}", method, target));
        last_head_ = head;
      }
      std::string body;
      int status = 200;
      uint64_t stream_bytes = 0;
      std::string type = "text/plain";
      if (req.method() == http::verb::post && target == "/echo") {
        body = req.body();
      } else if (req.method() == http::verb::post || req.method() == http::verb::put) {
        body = fmt::format("got {} bytes\n", req.body().size());
      } else if (target == "/hello") {
        body = fmt::format("hello from {}\n", options_.name);
      } else if (target.starts_with("/bytes/")) {
        stream_bytes = std::stoull(target.substr(7));
      } else if (target == "/headers") {
        body = head;
      } else if (!options_.static_root.empty() && target.find("..") == std::string::npos) {
        std::string path = options_.static_root + target.substr(0, target.find('?'));
        if (path.ends_with('/')) path.pop_back();
        if (std::filesystem::is_directory(path)) path += "/index";
        absl::StatusOr<std::string> file = ReadFile(path);
        if (file.ok()) {
          body = *std::move(file);
          type = path.ends_with(".tgz") ? "application/octet-stream" : "application/json";
        } else {
          status = 404;
          body = "not found\n";
        }
      } else {
        status = 404;
        body = "not found\n";
      }
      uint64_t length = stream_bytes ? stream_bytes : body.size();
      std::string out = fmt::format(
          "HTTP/1.1 {} X\r\nContent-Type: {}\r\nContent-Length: {}\r\n\r\n", status, type, length);
      if (req.method() != http::verb::head) out += body;
      co_await asio::async_write(socket, asio::buffer(out), token);
      if (ec) co_return;
      static const std::string kChunk(64 << 10, 'x');
      while (stream_bytes > 0 && req.method() != http::verb::head) {
        size_t n = std::min<uint64_t>(stream_bytes, kChunk.size());
        co_await asio::async_write(socket, asio::buffer(kChunk.data(), n), token);
        if (ec) co_return;
        stream_bytes -= n;
      }
      if (!req.keep_alive()) {
        socket.shutdown(tcp::socket::shutdown_send, ec);
        co_return;
      }
    }
  }

  Options options_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  uint16_t port_ = 0;
  std::atomic<uint64_t> connections_{0};
  mutable std::mutex mu_;
  std::vector<std::string> requests_;
  std::string last_head_;
};

TestServer::TestServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TestServer::~TestServer() = default;

absl::StatusOr<std::unique_ptr<TestServer>> TestServer::Start(Options options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<TestServer>(new TestServer(std::move(impl)));
}

uint16_t TestServer::port() const { return impl_->port(); }
std::vector<std::string> TestServer::requests() const { return impl_->requests(); }
std::string TestServer::last_head() const { return impl_->last_head(); }
uint64_t TestServer::connections() const { return impl_->connections(); }

}  // namespace airlock::netproxy::testing
