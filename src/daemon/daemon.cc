#include "daemon/daemon.h"

#include <signal.h>
#include <unistd.h>

#include <climits>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "boost/asio/post.hpp"
#include "boost/asio/thread_pool.hpp"
#include "command/capture.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status.h"
#include "daemon/images_api.h"
#include "daemon/interp_api.h"
#include "daemon/request_reader.h"
#include "engine/native_sandbox.h"
#include "fmt/format.h"
#include "http/errors.h"
#include "http/metrics.h"
#include "http/server.h"
#include "http/stream_queue.h"
#include "store/latency.h"
#include "store/local_blob_store.h"
#include "store/sqlite_store.h"

namespace airlock::daemon {

using http::Exchange;
using http::Verb;
using nlohmann::json;
namespace asio = boost::asio;

namespace {

const Logger& Log() {
  static const Logger& log = GetLogger("daemon");
  return log;
}

std::string Time(absl::Time t) {
  if (t == absl::InfinitePast() || t == absl::UnixEpoch()) return "";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

json SandboxJson(const store::SandboxRecord& r) {
  json j = {{"id", r.id.value()},
            {"state", std::string(store::ToString(r.state))},
            {"template", r.template_name},
            {"image_digest", r.image_digest},
            {"metadata", r.metadata},
            {"ttl_seconds", absl::ToInt64Seconds(r.ttl)},
            {"idle_timeout_seconds", absl::ToInt64Seconds(r.idle_timeout)},
            {"expires_at", Time(r.expires_at)},
            {"last_activity_at", Time(r.last_activity_at)},
            {"created_at", Time(r.created_at)},
            {"updated_at", Time(r.updated_at)},
            {"node", r.node.value()},
            {"spec", r.spec},
            {"last_error", r.last_error}};
  return j;
}

json ArtifactJson(const store::ArtifactRecord& a) {
  return {{"id", a.id.value()},
          {"path", a.path},
          {"size", a.size},
          {"sha256", a.sha256},
          {"status", std::string(store::ToString(a.status))},
          {"reason", a.reason},
          {"created_at", Time(a.created_at)}};
}

json CommandJson(const store::CommandRecord& c) {
  json j = {{"command_id", c.id.value()},
            {"sandbox_id", c.sandbox.value()},
            {"argv", c.argv},
            {"background", c.background},
            {"state", std::string(store::ToString(c.state))},
            {"started_at", Time(c.started_at)}};
  if (c.finished_at) j["finished_at"] = Time(*c.finished_at);
  if (c.result) j["result"] = *c.result;
  return j;
}

json EventJson(const store::AuditEvent& e) {
  json j = {{"seq", e.seq},
            {"time", Time(e.time)},
            {"sandbox_id", e.sandbox.value()},
            {"actor", e.actor},
            {"kind", std::string(store::ToString(e.kind))},
            {"reason", e.reason},
            {"data", e.data}};
  if (e.from) j["from"] = std::string(store::ToString(*e.from));
  if (e.to) j["to"] = std::string(store::ToString(*e.to));
  return j;
}

std::string Sse(std::string_view event, const json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", event,
                     data.dump(-1, ' ', false, json::error_handler_t::replace));
}

// One server-sent event for a chunk of a command's stream.
std::string SseFrame(const ExecFrame& f) {
  switch (f.kind) {
    case ExecFrame::Kind::kStdout:
      return Sse("stdout", {{"text", ToValidUtf8(f.data)}});
    case ExecFrame::Kind::kStderr:
      return Sse("stderr", {{"text", ToValidUtf8(f.data)}});
    case ExecFrame::Kind::kEvent: {
      json event = json::parse(f.data, nullptr, false);
      return Sse("event", event.is_object() ? event : json{{"raw", f.data}});
    }
  }
  return "";
}

absl::StatusOr<int> SignalFromJson(const json& v) {
  if (v.is_null()) return SIGKILL;
  if (v.is_number_integer()) {
    int s = v.get<int>();
    if (s > 0 && s < 65) return s;
  }
  if (v.is_string()) {
    std::string n = v.get<std::string>();
    if (n.rfind("SIG", 0) == 0) n = n.substr(3);
    for (auto [name, sig] : {std::pair{"KILL", SIGKILL},
                             {"TERM", SIGTERM},
                             {"INT", SIGINT},
                             {"HUP", SIGHUP},
                             {"QUIT", SIGQUIT},
                             {"USR1", SIGUSR1},
                             {"USR2", SIGUSR2}}) {
      if (n == name) return sig;
    }
  }
  return InvalidArgument("signal: expected a signal name (TERM, KILL, INT, ...) or number");
}

// Long requests (a command run to its end, a stream, a file transfer, a sandbox's start, an
// artifact collection) hold a worker for as long as they last. One key holds at most `per_key`
// of them at once, so that no caller can take every worker from the others.
class LongSlots {
 public:
  explicit LongSlots(int per_key) : per_key_(per_key) {}

  // Held until the last copy goes (work that outlives its request keeps one).
  class Slot {
   public:
    Slot(LongSlots* owner, std::string key) : owner_(owner), key_(std::move(key)) {}
    ~Slot() { owner_->Release(key_); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    LongSlots* owner_;
    std::string key_;
  };

  // ResourceExhausted (429) when `key` holds all of its slots.
  absl::StatusOr<std::shared_ptr<Slot>> Take(const std::string& key) {
    std::lock_guard lock(mu_);
    int& held = held_[key];
    if (held >= per_key_) {
      return ResourceExhausted(
          fmt::format("this API key already has {} long requests running (commands, streams, file "
                      "transfers, sandbox starts); retry when one has ended",
                      per_key_));
    }
    ++held;
    return std::make_shared<Slot>(this, key);
  }

 private:
  void Release(const std::string& key) {
    std::lock_guard lock(mu_);
    if (--held_[key] == 0) held_.erase(key);
  }

  const int per_key_;
  std::mutex mu_;
  std::map<std::string, int> held_;
};

}  // namespace

class Daemon::Impl {
 public:
  explicit Impl(DaemonOptions options)
      : options_(std::move(options)),
        long_slots_(options_.max_long_requests_per_key > 0
                        ? options_.max_long_requests_per_key
                        : std::max(1, options_.worker_threads / 2)),
        pool_(static_cast<size_t>(options_.worker_threads)),
        long_pool_(static_cast<size_t>(options_.worker_threads)) {}

  ~Impl() {
    {
      std::lock_guard lock(stop_mu_);
      stopping_ = true;
      stop_cv_.notify_all();
    }
    if (reaper_.joinable()) reaper_.join();
    // Blocking work still running on the pool hands its result back to the server's I/O
    // context: stop the server, let that work end, and only then destroy the context.
    if (server_) server_->Stop();
    // Work waiting on shims (commands, streams) ends now; the commands go on in the shims.
    if (manager_) manager_->InterruptWaits();
    pool_.join();
    long_pool_.join();
    // No create runs any more: the sandboxes still waiting in the warm pool go.
    if (manager_) manager_->StopWarmPool();
    server_.reset();
  }

  absl::Status Start() {
    ManagerOptions& m = options_.manager;
    if (m.data_dir.empty()) return InvalidArgument("--data-dir: required");
    RETURN_IF_ERROR(MakeDirs(m.data_dir, 0700), "data directory");
    // Shim sockets live at DIR/sandboxes/sb-<12>/shim.sock; unix socket paths are short.
    if (m.data_dir.size() + 38 > 107) {
      return InvalidArgument(fmt::format(
          "--data-dir {} is too long: sandbox sockets under it would pass the 107-byte limit "
          "of unix socket paths; use a path of at most 69 characters",
          m.data_dir));
    }
    for (const char* sub : {"/sandboxes", "/run", "/templates"}) {
      RETURN_IF_ERROR(MakeDirs(m.data_dir + sub, 0700));
    }
    if (m.node.empty()) {
      ASSIGN_OR_RETURN(m.node, NodeIdFor(m.data_dir));
    }
    if (m.tools_dir.empty()) m.tools_dir = engine::DefaultToolsDir();
    if (m.shim_bin.empty()) m.shim_bin = DefaultShimBinary();

    store_latency_ = &metrics_.AddHistogram("airlock_store_seconds", "Store call latency.",
                                            http::Metrics::LatencyBuckets(), {"op"});
    http_requests_ =
        &metrics_.AddCounter("airlock_http_requests_total", "HTTP requests.", {"route", "status"});
    sandboxes_ = &metrics_.AddGauge("airlock_sandboxes", "Sandboxes by state.", {"state"});
    store::SqliteStoreOptions so;
    so.store.observer = [this](const store::StoreCall& c) {
      store_latency_->Observe(absl::ToDoubleSeconds(c.latency), {std::string(c.op)});
    };
    ASSIGN_OR_RETURN(store_, store::OpenSqliteStore(m.data_dir, so), "store");
    ASSIGN_OR_RETURN(blobs_, store::OpenLocalBlobStore(m.data_dir + "/blobs"), "blob store");
    ASSIGN_OR_RETURN(images_, OpenNodeImageStore(m.data_dir, store_.get()), "image store");
    images_api_ = std::make_unique<ImagesApi>(
        images_.get(), pool_.get_executor(),
        ImagesApiOptions{.upload_dir = m.data_dir + "/uploads",
                         .max_image_bytes_per_key = options_.max_image_bytes_per_key});
    manager_ =
        std::make_unique<SandboxManager>(m, store_.get(), blobs_.get(), &metrics_, images_.get());
    metrics_.OnRender([this] {
      std::map<http::LabelValues, double> v;
      for (const auto& [state, n] : manager_->CountByState()) v[{state}] = static_cast<double>(n);
      sandboxes_->SetAll(std::move(v));
    });

    manager_->Reconcile();
    RETURN_IF_ERROR(manager_->StartWarmPool());

    http::ServerOptions ho;
    ho.listen = options_.listen;
    ho.threads = options_.http_threads;
    ho.authenticate = [this](Exchange& ex) { return Authenticate(ex); };
    ho.authenticate_on = pool_.get_executor();  // a store read, once a minute a write
    ho.on_complete = [this](const Exchange& ex, std::string_view route, std::chrono::microseconds) {
      http_requests_->Inc(
          {std::string(route.empty() ? "unmatched" : route), std::to_string(ex.status())});
    };
    ASSIGN_OR_RETURN(server_, http::Server::Start(ho, Routes()), "listen");
    reaper_ = std::thread([this] { ReapLoop(); });
    Log().Info("airlockd serving", {{"listen", options_.listen},
                                    {"port", static_cast<int64_t>(server_->port())},
                                    {"data_dir", m.data_dir},
                                    {"node", m.node.value()}});
    return absl::OkStatus();
  }

  uint16_t port() const { return server_->port(); }
  SandboxManager& manager() { return *manager_; }

 private:
  absl::Status Authenticate(Exchange& ex) {
    std::string auth = ex.request().Header("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (auth.size() <= kBearer.size() || auth.compare(0, kBearer.size(), kBearer) != 0) {
      return http::WithReason(
          absl::UnauthenticatedError("missing credentials: send Authorization: Bearer <API key>"),
          http::Reason::kUnauthenticated);
    }
    absl::StatusOr<store::ApiKey> key = store_->Authenticate(auth.substr(kBearer.size()));
    if (!key.ok()) {
      if (key.status().code() == absl::StatusCode::kUnauthenticated) {
        return absl::UnauthenticatedError("the API key is unknown or revoked");
      }
      return key.status();
    }
    ex.set_principal(key->id.value());
    return absl::OkStatus();
  }

  static Caller CallerOf(const Exchange& ex) {
    return Caller{ApiKeyId(ex.principal()), "key:" + ex.principal()};
  }

  static SandboxId IdOf(const Exchange& ex) { return SandboxId(ex.request().params.at("id")); }

  // Runs `f` on the pool. In a coroutine, a lambda written inside a co_await expression
  // captures by reference only ([&]: the frame outlives the awaited work). GCC 12 relocates
  // such a temporary closure bitwise, which breaks a captured std::string that points into
  // itself (a short string) and frees frame memory on destruction. Work that must outlive the
  // coroutine is named first and moved in (see StreamFrom).
  template <typename F>
  auto Blocking(F f) {
    return http::RunBlocking(pool_.get_executor(), std::move(f));
  }

  // Runs `f` on the pool of long work (LongSlots); the caller holds a slot.
  template <typename F>
  auto LongBlocking(F f) {
    return http::RunBlocking(long_pool_.get_executor(), std::move(f));
  }

  // A long-request slot of the caller's, or null after answering 429.
  asio::awaitable<std::shared_ptr<LongSlots::Slot>> TakeLongSlot(Exchange& ex) {
    absl::StatusOr<std::shared_ptr<LongSlots::Slot>> slot = long_slots_.Take(ex.principal());
    if (!slot.ok()) {
      co_await ex.RespondError(slot.status());
      co_return nullptr;
    }
    co_return *std::move(slot);
  }

  // Answers with the JSON `f` returns (or its error); `f` is long work (LongSlots).
  template <typename F>
  asio::awaitable<void> AnswerLong(Exchange& ex, int status, F f) {
    std::shared_ptr<LongSlots::Slot> slot = co_await TakeLongSlot(ex);
    if (!slot) co_return;
    absl::StatusOr<json> r = co_await LongBlocking(std::move(f));
    if (!r.ok()) {
      co_await ex.RespondError(r.status());
    } else {
      co_await ex.RespondJson(status, *r);
    }
  }

  // Answers with the JSON `f` returns (or its error).
  template <typename F>
  asio::awaitable<void> Answer(Exchange& ex, int status, F f) {
    absl::StatusOr<json> r = co_await Blocking(std::move(f));
    if (!r.ok()) {
      co_await ex.RespondError(r.status());
    } else {
      co_await ex.RespondJson(status, *r);
    }
  }

  // Reads the body as a strict JSON object into `out`; answers the error itself when false.
  static asio::awaitable<bool> Body(Exchange& ex, json* out) {
    absl::StatusOr<json> body = ParseBody(ex.request().body);
    if (!body.ok()) {
      co_await ex.RespondError(body.status());
      co_return false;
    }
    *out = *std::move(body);
    co_return true;
  }

  http::Router Routes() {
    http::Router r;
    r.Add(Verb::get, "/healthz",
          [](Exchange& ex) -> asio::awaitable<void> {
            co_await ex.Respond(200, "text/plain", "ok\n");
          },
          {.authenticated = false});
    r.Add(Verb::get, "/readyz",
          [this](Exchange& ex) -> asio::awaitable<void> {
            absl::Status ready = co_await Blocking([&] { return manager_->Ready(); });
            json body = {{"ready", ready.ok()}};
            if (!ready.ok()) body["reason"] = std::string(ready.message());
            co_await ex.RespondJson(ready.ok() ? 200 : 503, body);
          },
          {.authenticated = false});
    r.Add(Verb::get, "/metrics",
          [this](Exchange& ex) -> asio::awaitable<void> {
            std::string text = co_await Blocking([&] { return metrics_.Render(); });
            co_await ex.Respond(200, "text/plain; version=0.0.4", std::move(text));
          },
          {.authenticated = false});

    r.Add(Verb::post, "/v1/sandboxes", [this](Exchange& ex) { return CreateSandbox(ex); });
    r.Add(Verb::get, "/v1/sandboxes", [this](Exchange& ex) { return ListSandboxes(ex); });
    r.Add(Verb::get, "/v1/sandboxes/{id}", [this](Exchange& ex) -> asio::awaitable<void> {
      Caller c = CallerOf(ex);
      SandboxId id = IdOf(ex);
      co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
        ASSIGN_OR_RETURN(store::SandboxRecord s, manager_->Get(c, id));
        return SandboxJson(s);
      });
    });
    r.Add(Verb::delete_, "/v1/sandboxes/{id}", [this](Exchange& ex) -> asio::awaitable<void> {
      Caller c = CallerOf(ex);
      SandboxId id = IdOf(ex);
      co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
        ASSIGN_OR_RETURN(store::SandboxRecord s, manager_->Destroy(c, id, "terminated by API"));
        return SandboxJson(s);
      });
    });
    r.Add(Verb::post, "/v1/sandboxes/{id}/exec", [this](Exchange& ex) { return Exec(ex); });
    r.Add(Verb::get, "/v1/sandboxes/{id}/commands", [this](Exchange& ex) -> asio::awaitable<void> {
      Caller c = CallerOf(ex);
      SandboxId id = IdOf(ex);
      co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
        ASSIGN_OR_RETURN(auto list, manager_->ListCommands(c, id));
        json out = json::array();
        for (const auto& cmd : list) out.push_back(CommandJson(cmd));
        return json{{"commands", out}};
      });
    });
    r.Add(Verb::get, "/v1/sandboxes/{id}/commands/{cid}",
          [this](Exchange& ex) -> asio::awaitable<void> {
            Caller c = CallerOf(ex);
            SandboxId id = IdOf(ex);
            CommandId cid(ex.request().params.at("cid"));
            co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
              ASSIGN_OR_RETURN(store::CommandRecord cmd, manager_->GetCommand(c, id, cid));
              return CommandJson(cmd);
            });
          });
    r.Add(Verb::get, "/v1/sandboxes/{id}/commands/{cid}/stream",
          [this](Exchange& ex) { return AttachStream(ex); });
    r.Add(Verb::post, "/v1/sandboxes/{id}/commands/{cid}/kill",
          [this](Exchange& ex) -> asio::awaitable<void> {
            json body;
            if (!co_await Body(ex, &body)) co_return;
            RequestReader rd(body);
            json sig = body.contains("signal") ? body["signal"] : json();
            (void)rd.Object("signal");  // read below with its own rules
            absl::StatusOr<int> signal = SignalFromJson(sig);
            absl::Status fields = rd.Finish();
            if (!signal.ok() ||
                (!fields.ok() && fields.message().find("signal") == std::string::npos)) {
              co_await ex.RespondError(!signal.ok() ? signal.status() : fields);
              co_return;
            }
            Caller c = CallerOf(ex);
            SandboxId id = IdOf(ex);
            CommandId cid(ex.request().params.at("cid"));
            int s = *signal;
            co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
              RETURN_IF_ERROR(manager_->KillCommand(c, id, cid, s));
              return json{{"command_id", cid.value()}, {"signal", s}};
            });
          });

    r.Add(Verb::get, "/v1/sandboxes/{id}/files", [this](Exchange& ex) { return Download(ex); });
    r.Add(Verb::put, "/v1/sandboxes/{id}/files", [this](Exchange& ex) { return Upload(ex); },
          {.max_body_bytes = options_.manager.max_file_bytes, .stream_body = true});
    r.Add(Verb::delete_, "/v1/sandboxes/{id}/files", [this](Exchange& ex) -> asio::awaitable<void> {
      Caller c = CallerOf(ex);
      SandboxId id = IdOf(ex);
      std::string path = ex.request().Query("path").value_or("");
      bool recursive = ex.request().Query("recursive").value_or("") == "true";
      co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
        RETURN_IF_ERROR(manager_->RemoveFile(c, id, path, recursive));
        return json{{"path", path}, {"removed", true}};
      });
    });
    r.Add(Verb::get, "/v1/sandboxes/{id}/files:list",
          [this](Exchange& ex) -> asio::awaitable<void> {
            Caller c = CallerOf(ex);
            SandboxId id = IdOf(ex);
            std::string path = ex.request().Query("path").value_or("/sandbox/workspace");
            co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
              ASSIGN_OR_RETURN(json entries, manager_->ListFiles(c, id, path));
              return json{{"path", path}, {"entries", entries}};
            });
          });
    r.Add(Verb::get, "/v1/sandboxes/{id}/files:stat",
          [this](Exchange& ex) -> asio::awaitable<void> {
            Caller c = CallerOf(ex);
            SandboxId id = IdOf(ex);
            std::string path = ex.request().Query("path").value_or("");
            co_await Answer(ex, 200, [&]() { return manager_->StatFile(c, id, path); });
          });
    r.Add(Verb::post, "/v1/sandboxes/{id}/files:mkdir",
          [this](Exchange& ex) -> asio::awaitable<void> {
            Caller c = CallerOf(ex);
            SandboxId id = IdOf(ex);
            std::string path = ex.request().Query("path").value_or("");
            bool parents = ex.request().Query("parents").value_or("") == "true";
            co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
              RETURN_IF_ERROR(manager_->MakeDirectory(c, id, path, parents));
              return json{{"path", path}, {"created", true}};
            });
          });

    r.Add(Verb::post, "/v1/sandboxes/{id}/pause", [this](Exchange& ex) -> asio::awaitable<void> {
      Caller c = CallerOf(ex);
      SandboxId id = IdOf(ex);
      co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
        ASSIGN_OR_RETURN(store::SandboxRecord s, manager_->Pause(c, id));
        return SandboxJson(s);
      });
    });
    r.Add(Verb::post, "/v1/sandboxes/{id}/resume", [this](Exchange& ex) -> asio::awaitable<void> {
      Caller c = CallerOf(ex);
      SandboxId id = IdOf(ex);
      co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
        ASSIGN_OR_RETURN(store::SandboxRecord s, manager_->Resume(c, id));
        return SandboxJson(s);
      });
    });
    r.Add(Verb::post, "/v1/sandboxes/{id}/ttl", [this](Exchange& ex) -> asio::awaitable<void> {
      json body;
      if (!co_await Body(ex, &body)) co_return;
      RequestReader rd(body);
      auto ttl = rd.Int("ttl_seconds", {.required = true, .min = 1, .max = INT32_MAX});
      if (absl::Status s = rd.Finish(); !s.ok()) {
        co_await ex.RespondError(s);
        co_return;
      }
      Caller c = CallerOf(ex);
      SandboxId id = IdOf(ex);
      absl::Duration d = absl::Seconds(*ttl);
      co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
        ASSIGN_OR_RETURN(store::SandboxRecord s, manager_->ExtendTtl(c, id, d));
        return SandboxJson(s);
      });
    });
    r.Add(Verb::put, "/v1/sandboxes/{id}/network", [this](Exchange& ex) -> asio::awaitable<void> {
      json body;
      if (!co_await Body(ex, &body)) co_return;
      RequestReader rd(body);
      const json* network = rd.Object("network", {.required = true});
      bool loosen = rd.Bool("loosen").value_or(false);
      if (absl::Status s = rd.Finish(); !s.ok()) {
        co_await ex.RespondError(s);
        co_return;
      }
      Caller c = CallerOf(ex);
      SandboxId id = IdOf(ex);
      json net = *network;
      co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
        ASSIGN_OR_RETURN(store::SandboxRecord s, manager_->UpdateNetwork(c, id, net, loosen));
        return SandboxJson(s);
      });
    });
    r.Add(Verb::get, "/v1/sandboxes/{id}/events", [this](Exchange& ex) -> asio::awaitable<void> {
      Caller c = CallerOf(ex);
      SandboxId id = IdOf(ex);
      int64_t after = 0;
      int limit = 1000;
      if (auto a = ex.request().Query("after"); a && !absl::SimpleAtoi(*a, &after)) {
        co_await ex.RespondError(InvalidArgument("after: expected an integer"));
        co_return;
      }
      if (auto l = ex.request().Query("limit");
          l && (!absl::SimpleAtoi(*l, &limit) || limit < 1 || limit > 10000)) {
        co_await ex.RespondError(InvalidArgument("limit: must be between 1 and 10000"));
        co_return;
      }
      co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
        ASSIGN_OR_RETURN(auto events, manager_->Events(c, id, after, limit));
        json out = json::array();
        for (const auto& e : events) out.push_back(EventJson(e));
        return json{{"events", out}};
      });
    });
    AddArtifactRoutes(r);
    interp_api_ = std::make_unique<InterpApi>(
        InterpApiOptions{.data_dir = options_.manager.data_dir,
                         .max_running = std::max(1, options_.worker_threads / 4)},
        store_.get(), blobs_.get(), manager_.get(), pool_.get_executor());
    interp_api_->AddRoutes(r);
    images_api_->AddRoutes(r);
    return r;
  }

  void AddArtifactRoutes(http::Router& r) {
    r.Add(Verb::post, "/v1/sandboxes/{id}/artifacts:collect",
          [this](Exchange& ex) -> asio::awaitable<void> {
            json body;
            if (!co_await Body(ex, &body)) co_return;
            RequestReader rd(body);
            CollectRequest req;
            req.paths =
                rd.Strings("paths", {.max_items = 256}).value_or(std::vector<std::string>{});
            req.secrets =
                rd.Strings("secrets", {.max_items = 64}).value_or(std::vector<std::string>{});
            if (absl::Status s = rd.Finish(); !s.ok()) {
              co_await ex.RespondError(s);
              co_return;
            }
            Caller c = CallerOf(ex);
            SandboxId id = IdOf(ex);
            co_await AnswerLong(ex, 200, [&] { return manager_->CollectArtifacts(c, id, req); });
          });
    r.Add(Verb::post, "/v1/sandboxes/{id}/workspace:diff",
          [this](Exchange& ex) -> asio::awaitable<void> {
            Caller c = CallerOf(ex);
            SandboxId id = IdOf(ex);
            co_await AnswerLong(ex, 200, [&] { return manager_->WorkspaceDiff(c, id); });
          });
    r.Add(Verb::get, "/v1/sandboxes/{id}/artifacts", [this](Exchange& ex) -> asio::awaitable<void> {
      Caller c = CallerOf(ex);
      SandboxId id = IdOf(ex);
      co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
        ASSIGN_OR_RETURN(auto list, manager_->ListArtifacts(c, id));
        json out = json::array();
        for (const auto& a : list) out.push_back(ArtifactJson(a));
        return json{{"artifacts", out}};
      });
    });
    r.Add(Verb::get, "/v1/sandboxes/{id}/artifacts/{aid}",
          [this](Exchange& ex) -> asio::awaitable<void> {
            Caller c = CallerOf(ex);
            SandboxId id = IdOf(ex);
            ArtifactId aid(ex.request().params.at("aid"));
            auto read = co_await Blocking([&] { return manager_->ReadArtifact(c, id, aid); });
            if (!read.ok()) {
              co_await ex.RespondError(read.status());
              co_return;
            }
            std::vector<std::pair<std::string, std::string>> headers = {
                // The path is the sandbox's choice of name: percent-encoded, "/" kept.
                {"X-Artifact-Path", http::PercentEncode(read->first.path, "/")},
                {"X-Artifact-Sha256", read->first.sha256}};
            co_await ex.Respond(200, "application/octet-stream", std::move(read->second),
                                std::move(headers));
          });
  }

  asio::awaitable<void> CreateSandbox(Exchange& ex) {
    json body;
    if (!co_await Body(ex, &body)) co_return;
    RequestReader rd(body);
    CreateRequest req;
    const json* spec = rd.Object("spec");
    if (spec != nullptr) req.spec = *spec;
    req.template_name = rd.String("template", {.max_length = 64}).value_or("");
    if (auto ttl = rd.Int("ttl_seconds", {.min = 1, .max = INT32_MAX}))
      req.ttl = absl::Seconds(*ttl);
    if (auto idle = rd.Int("idle_timeout_seconds", {.min = 1, .max = INT32_MAX})) {
      req.idle_timeout = absl::Seconds(*idle);
    }
    req.metadata = rd.StringMap("metadata", {.max_items = 64, .max_length = 1024})
                       .value_or(std::map<std::string, std::string>{});
    req.idempotency_key = rd.String("idempotency_key", {.max_length = 200}).value_or("");
    if (const json* ws = rd.Object("workspace")) {
      RequestReader wr(*ws, "workspace");
      if (const json* git = wr.Object("git", {.required = true})) {
        RequestReader gr(*git, "workspace.git");
        WorkspaceSource src;
        src.repo = gr.String("repo", {.required = true}).value_or("");
        src.commit = gr.String("commit", {.required = true, .max_length = 256}).value_or("");
        req.workspace = src;
        wr.Merge(gr);
      }
      rd.Merge(wr);
    }
    if (spec == nullptr && req.template_name.empty()) {
      rd.Error("spec", "give a spec or a template");
    }
    if (absl::Status s = rd.Finish(); !s.ok()) {
      co_await ex.RespondError(s);
      co_return;
    }
    Caller c = CallerOf(ex);
    std::shared_ptr<LongSlots::Slot> slot = co_await TakeLongSlot(ex);
    if (!slot) co_return;
    absl::StatusOr<store::CreateResult> created =
        co_await LongBlocking([&] { return manager_->Create(c, req); });
    if (!created.ok()) {
      co_await ex.RespondError(created.status());
      co_return;
    }
    co_await ex.RespondJson(created->created ? 201 : 200, SandboxJson(created->sandbox));
  }

  asio::awaitable<void> ListSandboxes(Exchange& ex) {
    store::SandboxQuery q;
    for (const auto& [k, v] : ex.request().query) {
      if (k == "state") {
        size_t i = 0;
        while (i <= v.size()) {
          size_t j = v.find(',', i);
          if (j == std::string::npos) j = v.size();
          std::string name = v.substr(i, j - i);
          auto s = store::SandboxStateFromString(name);
          if (!s) {
            co_await ex.RespondError(
                InvalidArgument(fmt::format("state: unknown state \"{}\"", name)));
            co_return;
          }
          q.states.push_back(*s);
          i = j + 1;
        }
      } else if (k.rfind("metadata.", 0) == 0) {
        q.metadata[k.substr(9)] = v;
      } else if (k == "limit") {
        if (!absl::SimpleAtoi(v, &q.limit) || q.limit < 1 || q.limit > 1000) {
          co_await ex.RespondError(InvalidArgument("limit: must be between 1 and 1000"));
          co_return;
        }
      } else if (k == "cursor") {
        q.cursor = v;
      } else {
        co_await ex.RespondError(InvalidArgument(fmt::format("unknown query parameter \"{}\"", k)));
        co_return;
      }
    }
    Caller c = CallerOf(ex);
    co_await Answer(ex, 200, [&]() -> absl::StatusOr<json> {
      ASSIGN_OR_RETURN(store::SandboxPage page, manager_->List(c, q));
      json out = json::array();
      for (const auto& s : page.sandboxes) out.push_back(SandboxJson(s));
      return json{{"sandboxes", out}, {"next_cursor", page.next_cursor}};
    });
  }

  asio::awaitable<void> Exec(Exchange& ex) {
    json body;
    if (!co_await Body(ex, &body)) co_return;
    RequestReader rd(body);
    ExecRequest req;
    req.command.argv =
        rd.Strings("argv", {.required = true, .max_items = 4096, .max_length = 1 << 16})
            .value_or(std::vector<std::string>{});
    if (body.contains("argv") && body["argv"].is_array() && body["argv"].empty()) {
      rd.Error("argv", "must not be empty");
    }
    if (auto t = rd.Int("timeout_seconds", {.min = 1, .max = 86400})) {
      req.command.timeout = std::chrono::seconds(*t);
    }
    req.command.env = rd.StringMap("env", {.max_items = 256, .max_length = 1 << 16})
                          .value_or(std::map<std::string, std::string>{});
    req.command.workdir = rd.String("workdir").value_or("");
    req.command.stdin_data = rd.String("stdin", {.max_length = 1 << 20}).value_or("");
    req.secrets = rd.Strings("secrets", {.max_items = 64}).value_or(std::vector<std::string>{});
    req.keep_background = rd.Bool("keep_background").value_or(false);
    bool stream = rd.Bool("stream").value_or(false);
    bool background = rd.Bool("background").value_or(false);
    if (stream && background)
      rd.Error("stream", "a background command is streamed with its stream endpoint");
    if (absl::Status s = rd.Finish(); !s.ok()) {
      co_await ex.RespondError(s);
      co_return;
    }
    Caller c = CallerOf(ex);
    SandboxId id = IdOf(ex);
    if (background) {
      co_await Answer(ex, 202, [&]() -> absl::StatusOr<json> {
        ASSIGN_OR_RETURN(store::CommandRecord cmd, manager_->StartBackground(c, id, req));
        return CommandJson(cmd);
      });
      co_return;
    }
    if (!stream) {
      co_await AnswerLong(ex, 200, [&]() -> absl::StatusOr<json> {
        ASSIGN_OR_RETURN(CommandResult r, manager_->Exec(c, id, req));
        return ToJson(r);
      });
      co_return;
    }
    // Errors that come before the command starts are ordinary HTTP answers.
    absl::StatusOr<store::SandboxRecord> record =
        co_await Blocking([&] { return manager_->Get(c, id); });
    if (record.ok() && record->state != store::SandboxState::kRunning) {
      record = FailedPrecondition(
          fmt::format("sandbox {} is {}, not Running", id.value(), store::ToString(record->state)));
    }
    if (!record.ok()) {
      co_await ex.RespondError(record.status());
      co_return;
    }
    StreamWork work = [this, c, id, req](const FrameSink& sink) -> absl::StatusOr<json> {
      ASSIGN_OR_RETURN(CommandResult r, manager_->Exec(c, id, req, sink));
      return ToJson(r);
    };
    co_await StreamFrom(ex, std::move(work));
  }

  asio::awaitable<void> AttachStream(Exchange& ex) {
    Caller c = CallerOf(ex);
    SandboxId id = IdOf(ex);
    CommandId cid(ex.request().params.at("cid"));
    absl::StatusOr<store::CommandRecord> cmd =
        co_await Blocking([&] { return manager_->GetCommand(c, id, cid); });
    if (!cmd.ok()) {
      co_await ex.RespondError(cmd.status());
      co_return;
    }
    StreamWork work = [this, c, id, cid](const FrameSink& sink) -> absl::StatusOr<json> {
      ASSIGN_OR_RETURN(store::CommandRecord done, manager_->Attach(c, id, cid, sink));
      return done.result.value_or(json{{"state", std::string(store::ToString(done.state))}});
    };
    co_await StreamFrom(ex, std::move(work));
  }

  // Runs `work` on the pool, streaming what it sends to its sink as server-sent events, and
  // its outcome as a final `result` (or `error`) event. A client that leaves ends the stream
  // only; the work goes on.
  using StreamWork = std::function<absl::StatusOr<json>(const FrameSink&)>;
  asio::awaitable<void> StreamFrom(Exchange& ex, StreamWork work) {
    std::shared_ptr<LongSlots::Slot> slot = co_await TakeLongSlot(ex);
    if (!slot) co_return;
    auto q = std::make_shared<http::StreamQueue<std::string>>(ex.executor(), 256);
    std::string request_id = ex.request().request_id;
    asio::post(long_pool_, [q, work = std::move(work), request_id, slot] {
      absl::StatusOr<json> r = work([q](const ExecFrame& f) { return q->Push(SseFrame(f)); });
      q->Push(r.ok() ? Sse("result", *r) : Sse("error", http::ErrorBody(r.status(), request_id)));
      q->Close();
    });
    co_await http::StreamResponse(ex, 200, "text/event-stream", q);
  }

  asio::awaitable<void> Download(Exchange& ex) {
    Caller c = CallerOf(ex);
    SandboxId id = IdOf(ex);
    std::string path = ex.request().Query("path").value_or("");
    // A stat first, so a missing or refused file is an ordinary error answer.
    absl::StatusOr<json> info = co_await Blocking([&] { return manager_->StatFile(c, id, path); });
    if (info.ok() && info->value("type", "") != "file") {
      info =
          FailedPrecondition(fmt::format("{} is a {}, not a file", path, info->value("type", "")));
    }
    if (!info.ok()) {
      co_await ex.RespondError(info.status());
      co_return;
    }
    std::shared_ptr<LongSlots::Slot> slot = co_await TakeLongSlot(ex);
    if (!slot) co_return;
    auto q = std::make_shared<http::StreamQueue<std::string>>(ex.executor(), 16);
    asio::post(long_pool_, [this, q, c, id, path, slot] {
      absl::StatusOr<json> r = manager_->ReadFile(
          c, id, path, [q](std::string_view data) { return q->Push(std::string(data)); });
      if (!r.ok())
        Log().Warn("download ended early", {{"error", std::string(Message(r.status()))}});
      q->Close();
    });
    std::vector<std::pair<std::string, std::string>> headers = {
        {"X-File-Size", std::to_string(info->value("size", 0))}};
    co_await http::StreamResponse(ex, 200, "application/octet-stream", q, std::move(headers));
  }

  asio::awaitable<void> Upload(Exchange& ex) {
    Caller c = CallerOf(ex);
    SandboxId id = IdOf(ex);
    std::string path = ex.request().Query("path").value_or("");
    bool parents = ex.request().Query("parents").value_or("true") != "false";
    uint32_t mode = 0644;
    if (auto m = ex.request().Query("mode")) {
      unsigned long v = 0;
      char* end = nullptr;
      v = std::strtoul(m->c_str(), &end, 8);
      if (m->empty() || *end != '\0' || v > 0777) {
        co_await ex.RespondError(InvalidArgument("mode: expected an octal mode such as 644"));
        co_return;
      }
      mode = static_cast<uint32_t>(v);
    }
    // The body goes to the shim chunk by chunk as it arrives: never whole in memory.
    std::shared_ptr<LongSlots::Slot> slot = co_await TakeLongSlot(ex);
    if (!slot) co_return;
    absl::StatusOr<std::unique_ptr<SandboxManager::FileWriter>> writer =
        co_await LongBlocking([&] { return manager_->BeginWrite(c, id, path, mode, parents); });
    if (!writer.ok()) {
      co_await ex.RespondError(writer.status());
      co_return;
    }
    std::shared_ptr<SandboxManager::FileWriter> w = std::move(*writer);
    for (;;) {
      absl::StatusOr<std::string> chunk = co_await ex.ReadBodyChunk();
      if (!chunk.ok()) {
        co_await Blocking([&] {
          w.reset();
          return 0;
        });  // abandons the write
        co_await ex.RespondError(chunk.status());
        co_return;
      }
      if (chunk->empty()) break;
      absl::Status sent = co_await LongBlocking([&] { return w->Write(*chunk); });
      if (!sent.ok()) {
        co_await ex.RespondError(sent);
        co_return;
      }
    }
    absl::StatusOr<json> r = co_await LongBlocking([&] { return w->Finish(); });
    if (!r.ok()) {
      co_await ex.RespondError(r.status());
    } else {
      co_await ex.RespondJson(200, *r);
    }
  }

  void ReapLoop() {
    for (;;) {
      {
        std::unique_lock lock(stop_mu_);
        if (stop_cv_.wait_for(lock, options_.reap_interval, [&] { return stopping_; })) return;
      }
      manager_->Reconcile();
    }
  }

  DaemonOptions options_;
  http::Metrics metrics_;
  http::Histogram* store_latency_ = nullptr;
  http::Counter* http_requests_ = nullptr;
  http::Gauge* sandboxes_ = nullptr;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<store::BlobStore> blobs_;
  std::unique_ptr<image::ImageStore> images_;
  std::unique_ptr<ImagesApi> images_api_;
  std::unique_ptr<SandboxManager> manager_;
  LongSlots long_slots_;
  asio::thread_pool pool_;       // quick blocking work: the database, a stat, a listing
  asio::thread_pool long_pool_;  // long requests (LongSlots)
  std::unique_ptr<http::Server> server_;
  std::thread reaper_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::unique_ptr<InterpApi> interp_api_;  // after the pool: destroyed first, once it is joined
};

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() = default;

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

uint16_t Daemon::port() const { return impl_->port(); }
SandboxManager& Daemon::manager() { return impl_->manager(); }

absl::StatusOr<NodeId> NodeIdFor(const std::string& data_dir) {
  std::string path = data_dir + "/node-id";
  if (absl::StatusOr<std::string> id = ReadFile(path, 64); id.ok()) {
    std::string v = *id;
    while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
    if (v.rfind("node-", 0) == 0) return NodeId(v);
  }
  NodeId id = NodeId::New();
  RETURN_IF_ERROR(WriteFileAtomic(path, id.value() + "\n", 0600), "node id");
  return id;
}

std::string DefaultShimBinary() {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    for (const std::string& c :
         {dir + "/airlock-shim", dir + "/../bin/airlock-shim", dir + "/../../bin/airlock-shim"}) {
      if (::access(c.c_str(), X_OK) == 0) return c;
    }
  }
  return "/usr/libexec/airlock/airlock-shim";
}

}  // namespace airlock::daemon
