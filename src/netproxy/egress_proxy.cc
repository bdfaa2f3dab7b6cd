#include "netproxy/egress_proxy.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <exception>
#include <thread>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/detached.hpp"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/local/stream_protocol.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/redirect_error.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/asio/write.hpp"
#include "common/logging.h"
#include "common/status.h"
#include "fmt/format.h"
#include "netproxy/internal/proxy_state.h"
#include "netproxy/internal/session.h"

namespace airlock::netproxy {

using internal::Acceptor;
using internal::ClientSocket;
using internal::ProxyConfig;
using internal::SandboxState;
using internal::Session;
using internal::Strand;
namespace asio = boost::asio;
using boost::system::error_code;

namespace {

const Logger& Log() {
  static const Logger& log = GetLogger("netproxy");
  return log;
}

absl::Status BoostStatus(const error_code& ec, std::string_view what) {
  return ErrnoStatus(ec.value(), what);
}

// The proxy holds up to six descriptors per connection and a node serves many sandboxes: use
// every descriptor the hard limit allows. Returns the limit in force.
uint64_t RaiseFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = {rl.rlim_max, rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return rl.rlim_cur;
}

constexpr uint64_t kFdsPerConnection = 6;
constexpr uint64_t kFdsKeptBack = 512;

// 503 with `why` (one line) as the body, then close.
asio::awaitable<void> RefuseOverLimit(ClientSocket socket, std::string_view why) {
  std::string body = fmt::format("airlock egress proxy: {}\n", why);
  std::string answer = fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      body.size(), body);
  error_code ec;
  co_await asio::async_write(socket, asio::buffer(answer),
                             asio::redirect_error(asio::use_awaitable, ec));
}

}  // namespace

class EgressProxy::Impl {
 public:
  explicit Impl(ProxyConfig config) : config_(std::move(config)) {}

  ~Impl() {
    config_.lookups->Stop();  // no lookup thread posts to the context from here on
    work_.reset();
    ioc_.stop();
    for (std::thread& t : threads_) t.join();
    std::lock_guard lock(mu_);
    for (auto& [id, sandbox] : sandboxes_) CloseListeners(*sandbox);
  }

  void Run(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { ioc_.run(); });
  }

  absl::StatusOr<std::shared_ptr<SandboxState>> GetOrCreate(const SandboxId& id, Policy policy,
                                                            bool* created,
                                                            std::string proxy_authorization = {}) {
    std::lock_guard lock(mu_);
    auto it = sandboxes_.find(id);
    if (it != sandboxes_.end()) {
      *created = false;
      return it->second;
    }
    auto sandbox = std::make_shared<SandboxState>();
    sandbox->id = id;
    sandbox->config = &config_;
    sandbox->policy_ = std::make_shared<const Policy>(std::move(policy));
    sandbox->proxy_authorization = std::move(proxy_authorization);  // before anyone sees it
    sandboxes_.emplace(id, sandbox);
    *created = true;
    return sandbox;
  }

  std::shared_ptr<SandboxState> Find(const SandboxId& id) const {
    std::lock_guard lock(mu_);
    auto it = sandboxes_.find(id);
    return it == sandboxes_.end() ? nullptr : it->second;
  }

  // Binds and listens on `endpoint`, then accepts for `sandbox` until the acceptor is closed.
  absl::StatusOr<std::shared_ptr<Acceptor>> Listen(
      const std::shared_ptr<SandboxState>& sandbox,
      const asio::generic::stream_protocol::endpoint& ep, bool reuse_address) {
    auto acceptor = std::make_shared<Acceptor>(asio::make_strand(ioc_));
    error_code ec;
    acceptor->open(ep.protocol(), ec);
    if (ec) return BoostStatus(ec, "socket");
    if (reuse_address) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    acceptor->bind(ep, ec);
    if (ec) return BoostStatus(ec, "bind");
    acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return BoostStatus(ec, "listen");
    {
      std::lock_guard lock(sandbox->mu);
      sandbox->acceptors.push_back(acceptor);
    }
    asio::co_spawn(acceptor->get_executor(), AcceptLoop(sandbox, acceptor),
                   [](std::exception_ptr e) {
                     if (e) Log().Error("accept loop failed");
                   });
    return acceptor;
  }

  absl::Status Remove(const SandboxId& id) {
    std::shared_ptr<SandboxState> sandbox;
    {
      std::lock_guard lock(mu_);
      auto it = sandboxes_.find(id);
      if (it == sandboxes_.end()) return NotFound(fmt::format("sandbox {} not served", id.value()));
      sandbox = it->second;
      sandboxes_.erase(it);
    }
    CloseListeners(*sandbox);
    for (std::shared_ptr<Session>& s : SessionsOf(*sandbox)) {
      asio::post(s->strand(), [s] { s->Close("sandbox-removed"); });
    }
    return absl::OkStatus();
  }

  // The sandbox's live sessions. Collected under the lock, to be used and released outside it:
  // the last reference to a session may be dropped by the caller, and its destructor takes the
  // same lock.
  static std::vector<std::shared_ptr<Session>> SessionsOf(SandboxState& sandbox) {
    std::vector<std::shared_ptr<Session>> sessions;
    std::lock_guard lock(sandbox.mu);
    for (auto& [ptr, weak] : sandbox.sessions) {
      if (std::shared_ptr<Session> s = weak.lock()) sessions.push_back(std::move(s));
    }
    return sessions;
  }

  const ProxyConfig& config() const { return config_; }

 private:
  static void CloseListeners(SandboxState& sandbox) {
    std::vector<std::shared_ptr<Acceptor>> acceptors;
    std::vector<std::string> paths;
    {
      std::lock_guard lock(sandbox.mu);
      acceptors.swap(sandbox.acceptors);
      paths.swap(sandbox.socket_paths);
    }
    for (auto& acceptor : acceptors) {
      asio::post(acceptor->get_executor(), [acceptor] {
        error_code ec;
        acceptor->close(ec);
      });
    }
    for (const std::string& path : paths) ::unlink(path.c_str());
  }

  asio::awaitable<void> AcceptLoop(std::shared_ptr<SandboxState> sandbox,
                                   std::shared_ptr<Acceptor> acceptor) {
    const size_t limit = config_.options.max_connections_per_sandbox;
    while (acceptor->is_open()) {
      error_code ec;
      ClientSocket socket = co_await acceptor->async_accept(
          asio::make_strand(ioc_), asio::redirect_error(asio::use_awaitable, ec));
      if (ec == asio::error::operation_aborted || !acceptor->is_open()) break;
      if (ec) {
        // Out of descriptors or memory: back off instead of spinning on the error.
        Log().Warn("accept failed", {{"sandbox", sandbox->id.value()}, {"error", ec.message()}});
        asio::steady_timer pause(acceptor->get_executor(), std::chrono::milliseconds(50));
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      sandbox->accepted.fetch_add(1, std::memory_order_relaxed);
      const char* over = nullptr;
      if (sandbox->active.load(std::memory_order_relaxed) >= limit) {
        over = "too many connections from sandbox";
      } else if (config_.active_total->load(std::memory_order_relaxed) >= config_.max_connections) {
        over = "too many connections on this node";
      }
      if (over != nullptr) {
        sandbox->refused_over_limit.fetch_add(1, std::memory_order_relaxed);
        auto executor = socket.get_executor();
        asio::co_spawn(executor, RefuseOverLimit(std::move(socket), over), asio::detached);
        continue;
      }
      Session::Start(std::make_shared<Session>(sandbox, std::move(socket)));
    }
  }

  ProxyConfig config_;
  mutable std::mutex mu_;
  std::map<SandboxId, std::shared_ptr<SandboxState>> sandboxes_;  // guarded by mu_
  // Declared after config_ and sandboxes_: destroying the context destroys pending sessions,
  // which still read both.
  asio::io_context ioc_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_{
      ioc_.get_executor()};
  std::vector<std::thread> threads_;
};

EgressProxy::EgressProxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EgressProxy::~EgressProxy() = default;

absl::StatusOr<std::unique_ptr<EgressProxy>> EgressProxy::Start(Options options) {
  if (options.threads < 1) return InvalidArgument("egress proxy: threads must be >= 1");
  if (options.buffer_bytes < 1024) return InvalidArgument("egress proxy: buffer_bytes < 1024");
  ProxyConfig config;
  for (const auto& [name, addresses] : options.hosts) {
    absl::StatusOr<HostName> host = NormalizeHost(name);
    if (!host.ok()) return Annotate(host.status(), "egress proxy: hosts");
    std::vector<IpAddress>& out = config.hosts[host->name];
    for (const std::string& a : addresses) {
      std::optional<IpAddress> ip = IpAddress::Parse(a);
      if (!ip) {
        return InvalidArgument(
            fmt::format("egress proxy: hosts: \"{}\" for {} is not an IP "
                        "address",
                        a, name));
      }
      out.push_back(*ip);
    }
  }
  int threads = options.threads;
  uint64_t fd_limit = RaiseFileLimit();
  config.max_connections =
      options.max_connections > 0
          ? options.max_connections
          : static_cast<size_t>(fd_limit > kFdsKeptBack + kFdsPerConnection
                                    ? (fd_limit - kFdsKeptBack) / kFdsPerConnection
                                    : 1);
  config.lookups = std::make_shared<internal::Lookups>(options.max_lookups_per_sandbox,
                                                       options.lookup_threads, options.lookup);
  config.options = std::move(options);
  auto impl = std::make_unique<Impl>(std::move(config));
  impl->Run(threads);
  return std::unique_ptr<EgressProxy>(new EgressProxy(std::move(impl)));
}

absl::Status EgressProxy::AddSandbox(const SandboxId& sandbox, Policy policy,
                                     const std::string& socket_path) {
  std::string context = fmt::format("serve sandbox {} on {}", sandbox.value(), socket_path);
  if (socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return InvalidArgument(fmt::format("{}: path too long", context));
  }
  bool created = false;
  ASSIGN_OR_RETURN(std::shared_ptr<SandboxState> state,
                   impl_->GetOrCreate(sandbox, std::move(policy), &created));
  if (!created) return absl::AlreadyExistsError(context + ": already served");
  struct stat st {};
  if (::lstat(socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(socket_path.c_str());
  absl::StatusOr<std::shared_ptr<Acceptor>> acceptor = impl_->Listen(
      state,
      asio::generic::stream_protocol::endpoint(asio::local::stream_protocol::endpoint(socket_path)),
      false);
  if (!acceptor.ok()) {
    impl_->Remove(sandbox).IgnoreError();
    return Annotate(acceptor.status(), context);
  }
  {
    std::lock_guard lock(state->mu);
    state->socket_paths.push_back(socket_path);
  }
  if (::chmod(socket_path.c_str(), 0666) != 0) {
    absl::Status status = ErrnoStatus(errno, fmt::format("{}: chmod", context));
    impl_->Remove(sandbox).IgnoreError();
    return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint16_t> EgressProxy::AddSandboxTcp(const SandboxId& sandbox, Policy policy,
                                                    const std::string& address,
                                                    std::string proxy_authorization) {
  std::string context = fmt::format("serve sandbox {} on {}", sandbox.value(), address);
  // Port 0 (any free port) is valid here, unlike in a request.
  size_t colon = address.rfind(':');
  std::optional<IpAddress> ip =
      colon == std::string::npos ? std::nullopt : IpAddress::Parse(address.substr(0, colon));
  int port = colon == std::string::npos ? -1 : std::atoi(address.c_str() + colon + 1);
  if (!ip || port < 0 || port > 65535) {
    return InvalidArgument(fmt::format("{}: want IP:PORT", context));
  }
  asio::ip::tcp::endpoint ep(ip->is_v4()
                                 ? asio::ip::address(asio::ip::address_v4(ip->v4()))
                                 : asio::ip::address(asio::ip::make_address_v6(ip->ToString())),
                             static_cast<uint16_t>(port));
  bool created = false;
  const std::string wanted = proxy_authorization;
  ASSIGN_OR_RETURN(
      std::shared_ptr<SandboxState> state,
      impl_->GetOrCreate(sandbox, std::move(policy), &created, std::move(proxy_authorization)));
  if (!created && state->proxy_authorization != wanted) {
    return FailedPrecondition(
        fmt::format("{}: the sandbox is served with another proxy authorization", context));
  }
  absl::StatusOr<std::shared_ptr<Acceptor>> acceptor =
      impl_->Listen(state, asio::generic::stream_protocol::endpoint(ep), true);
  if (!acceptor.ok()) {
    if (created) impl_->Remove(sandbox).IgnoreError();
    return Annotate(acceptor.status(), context);
  }
  error_code ec;
  asio::generic::stream_protocol::endpoint bound = (*acceptor)->local_endpoint(ec);
  if (ec) return BoostStatus(ec, context);
  const auto* sa = reinterpret_cast<const sockaddr_in*>(bound.data());
  return ntohs(sa->sin_port);  // sin_port and sin6_port share their offset
}

absl::StatusOr<PolicyChanged> EgressProxy::UpdatePolicy(const SandboxId& sandbox, Policy policy,
                                                        PolicyAuthority authority) {
  std::shared_ptr<SandboxState> state = impl_->Find(sandbox);
  if (!state) return NotFound(fmt::format("update policy: sandbox {} not served", sandbox.value()));
  auto next = std::make_shared<const Policy>(std::move(policy));
  std::shared_ptr<const Policy> old;
  bool loosens = false;
  {
    std::lock_guard lock(state->mu);
    old = state->policy_;
    loosens = !next->IsNoLooserThan(*old);
    if (loosens && authority != PolicyAuthority::kMayLoosen) {
      return PermissionDenied(fmt::format(
          "update policy of sandbox {}: the new policy allows more than the old one and the "
          "caller has no authority to loosen it",
          sandbox.value()));
    }
    state->policy_ = next;
  }
  // Open connections were decided under the old policy: each one checks its destination again
  // and closes if the new policy refuses it.
  for (const std::shared_ptr<Session>& s : impl_->SessionsOf(*state)) {
    asio::post(s->strand(), [s] { s->Recheck(); });
  }
  Log().Info("egress policy changed", {{"sandbox", sandbox.value()}, {"loosened", loosens}});
  PolicyChanged change{sandbox, old->ToJson(), next->ToJson(), loosens,
                       std::chrono::system_clock::now()};
  if (impl_->config().options.on_event) impl_->config().options.on_event(change);
  return change;
}

absl::Status EgressProxy::RemoveSandbox(const SandboxId& sandbox) { return impl_->Remove(sandbox); }

absl::StatusOr<SandboxStats> EgressProxy::Stats(const SandboxId& sandbox) const {
  std::shared_ptr<SandboxState> s = impl_->Find(sandbox);
  if (!s) return NotFound(fmt::format("stats: sandbox {} not served", sandbox.value()));
  return SandboxStats{s->active.load(),  s->accepted.load(), s->refused_over_limit.load(),
                      s->blocked.load(), s->bytes_up.load(), s->bytes_down.load()};
}

}  // namespace airlock::netproxy
