#include "daemon/interp_api.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "boost/asio/post.hpp"
#include "common/logging.h"
#include "common/status.h"
#include "daemon/request_reader.h"
#include "fmt/format.h"
#include "interp/snapshot_store.h"

namespace airlock::daemon {

using http::Exchange;
using http::Verb;
using interp::Outcome;
using nlohmann::json;
namespace asio = boost::asio;

namespace {

const Logger& Log() {
  static const Logger& log = GetLogger("interp-api");
  return log;
}

constexpr char kStateNew[] = "new";
constexpr char kStateRunning[] = "running";
constexpr char kStatePaused[] = "paused";
constexpr char kStateFinished[] = "finished";
constexpr char kStateDeleted[] = "deleted";

// A paused guest's snapshot is at most its linear memory (bounded by the memory limit below).
constexpr uint64_t kMaxBlobBytes = uint64_t{4} << 30;

// How long past its wall time a run may take to store its outcome before its record counts as
// abandoned by a daemon that died.
constexpr absl::Duration kAbandonedAfter = absl::Seconds(10);

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string Time(absl::Time t) {
  if (t == absl::InfinitePast() || t == absl::UnixEpoch()) return "";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

json ParsedOrText(const std::string& text) {
  json v = json::parse(text, nullptr, false);
  return v.is_discarded() ? json(text) : v;
}

json JournalJson(const std::vector<interp::JournalEntry>& journal) {
  json out = json::array();
  for (const auto& e : journal) {
    json j = {{"call_id", e.call_id},
              {"tool", e.tool},
              {"args", ParsedOrText(e.args_json)},
              {"status", interp::ToString(e.status)},
              {"started_unix_ms", e.started_unix_ms},
              {"finished_unix_ms", e.finished_unix_ms}};
    if (e.status == interp::JournalEntry::Status::kOk) j["result"] = ParsedOrText(e.result);
    if (e.status == interp::JournalEntry::Status::kError ||
        e.status == interp::JournalEntry::Status::kRefused) {
      j["error"] = e.result;
    }
    out.push_back(std::move(j));
  }
  return out;
}

json PendingJson(const std::vector<interp::JournalEntry>& journal) {
  json out = json::array();
  for (const auto& e : journal) {
    if (e.status != interp::JournalEntry::Status::kPending) continue;
    out.push_back({{"call_id", e.call_id}, {"tool", e.tool}, {"args", ParsedOrText(e.args_json)}});
  }
  return out;
}

json RunResultJson(const interp::RunResult& r) {
  json j = {{"outcome", interp::ToString(r.outcome)},
            {"guest_ms", static_cast<double>(r.guest_time.count()) / 1e6}};
  if (r.outcome == Outcome::kCompleted) j["result"] = ParsedOrText(r.result_json);
  if (!r.error.empty()) j["error"] = r.error;
  json pending = json::array();
  for (const auto& p : r.pending) {
    pending.push_back({{"call_id", p.id}, {"tool", p.name}, {"args", ParsedOrText(p.args_json)}});
  }
  j["pending"] = std::move(pending);
  return j;
}

// The tools a session may allow, by name.
constexpr std::string_view kToolNames[] = {interp::kHumanApprovalToolName, kSandboxExecToolName};

class SandboxExecTool : public interp::Tool, public std::enable_shared_from_this<SandboxExecTool> {
 public:
  SandboxExecTool(SandboxManager* manager, Caller caller, asio::any_io_executor executor,
                  bool may_communicate)
      : manager_(manager),
        caller_(std::move(caller)),
        executor_(std::move(executor)),
        may_communicate_(may_communicate) {
    info_.name = kSandboxExecToolName;
    info_.description =
        "Runs a command in a sandbox: {sandbox_id, argv, timeout_seconds?} -> CommandResult.";
    info_.kind = interp::ToolKind::kImmediate;
    info_.capabilities.Add(interp::Capability::kSeesUntrustedContent);
    if (may_communicate_) info_.capabilities.Add(interp::Capability::kChangesState);
  }

  const interp::ToolInfo& info() const override { return info_; }

  void Start(const interp::ToolCall& call, interp::ToolDone done) override {
    absl::StatusOr<std::pair<SandboxId, ExecRequest>> request = Parse(call.args_json);
    if (!request.ok()) {
      done(interp::ToolResult::Error(fmt::format("sandbox.exec: {}", Message(request.status()))));
      return;
    }
    // The session may be gone before the command ends: the work keeps the tool alive.
    asio::post(
        executor_, [self = shared_from_this(), req = *std::move(request), done = std::move(done)] {
          absl::StatusOr<json> r = self->Run(req.first, req.second);
          if (!r.ok()) {
            done(interp::ToolResult::Error(fmt::format("sandbox.exec: {}", Message(r.status()))));
          } else {
            done(interp::ToolResult::Value(Dump(*r)));
          }
        });
  }

 private:
  static absl::StatusOr<std::pair<SandboxId, ExecRequest>> Parse(const std::string& args_json) {
    absl::StatusOr<json> args = ParseBody(args_json);
    if (!args.ok()) return InvalidArgument("arguments are not a JSON object");
    if (!args->is_object()) return InvalidArgument("arguments must be an object");
    RequestReader rd(*args);
    ExecRequest req;
    std::string sandbox =
        rd.String("sandbox_id", {.required = true, .max_length = 64}).value_or("");
    req.command.argv =
        rd.Strings("argv", {.required = true, .max_items = 4096, .max_length = 1 << 16})
            .value_or(std::vector<std::string>{});
    if (args->contains("argv") && (*args)["argv"].is_array() && (*args)["argv"].empty()) {
      rd.Error("argv", "must not be empty");
    }
    if (auto t = rd.Int("timeout_seconds", {.min = 1, .max = 3600})) {
      req.command.timeout = std::chrono::seconds(*t);
    }
    RETURN_IF_ERROR(rd.Finish());
    return std::pair{SandboxId(sandbox), std::move(req)};
  }

  absl::StatusOr<json> Run(const SandboxId& id, const ExecRequest& req) {
    ASSIGN_OR_RETURN(store::SandboxRecord record, manager_->Get(caller_, id));
    std::string profile = "none";
    if (const json* net = record.spec.contains("network") ? &record.spec["network"] : nullptr;
        net != nullptr && net->is_object() && net->contains("profile") &&
        (*net)["profile"].is_string()) {
      profile = (*net)["profile"].get<std::string>();
    }
    if (profile != "none" && !may_communicate_) {
      return PermissionDenied(fmt::format(
          "sandbox {} has network profile \"{}\": its commands can communicate externally, and "
          "this session did not declare changes-state",
          id.value(), profile));
    }
    ASSIGN_OR_RETURN(CommandResult r, manager_->Exec(caller_, id, req));
    return ToJson(r);
  }

  SandboxManager* manager_;
  Caller caller_;
  asio::any_io_executor executor_;
  bool may_communicate_;
  interp::ToolInfo info_;
};

}  // namespace

std::shared_ptr<interp::Tool> MakeSandboxExecTool(SandboxManager* manager, Caller caller,
                                                  asio::any_io_executor executor,
                                                  bool may_communicate) {
  return std::make_shared<SandboxExecTool>(manager, std::move(caller), std::move(executor),
                                           may_communicate);
}

// ---------------------------------------------------------------------------------------------

struct InterpApi::Settings {
  InterpSessionId id;
  interp::Limits limits;
  std::vector<std::string> tools;
  interp::CapabilitySet declared;

  json ToJson() const {
    return {{"session", id.value()},
            {"limits",
             {{"memory_bytes", limits.memory_bytes},
              {"stack_bytes", limits.stack_bytes},
              {"exec_time_ms", limits.exec_time.count()},
              {"wall_time_ms", limits.wall_time.count()},
              {"max_in_flight_calls", limits.max_in_flight_calls},
              {"max_total_calls", limits.max_total_calls},
              {"max_console_bytes", limits.max_console_bytes},
              {"max_value_bytes", limits.max_value_bytes}}},
            {"tools", tools},
            {"declared", declared.bits()}};
  }

  // Reads the "limits" object of a request or of a stored blob.
  static void ReadLimits(RequestReader& r, interp::Limits* l) {
    auto set = [&](std::string_view key, int64_t min, int64_t max, auto* field) {
      if (auto v = r.Int(key, {.min = min, .max = max})) {
        *field = static_cast<std::remove_pointer_t<decltype(field)>>(*v);
      }
    };
    set("memory_bytes", int64_t{1} << 20, int64_t{1} << 30, &l->memory_bytes);
    set("stack_bytes", int64_t{64} << 10, int64_t{4} << 20, &l->stack_bytes);
    set("max_in_flight_calls", 1, 64, &l->max_in_flight_calls);
    set("max_total_calls", 1, 10000, &l->max_total_calls);
    set("max_console_bytes", 0, int64_t{16} << 20, &l->max_console_bytes);
    set("max_value_bytes", 1024, int64_t{64} << 20, &l->max_value_bytes);
    if (auto v = r.Int("exec_time_ms", {.min = 1, .max = 600'000})) {
      l->exec_time = std::chrono::milliseconds(*v);
    }
    if (auto v = r.Int("wall_time_ms", {.min = 1, .max = 600'000})) {
      l->wall_time = std::chrono::milliseconds(*v);
    }
  }

  static absl::StatusOr<Settings> FromJson(const json& j) {
    if (!j.is_object() || !j.contains("limits") || !j["limits"].is_object()) {
      return absl::DataLossError("interpreter session blob: settings are not readable");
    }
    Settings s;
    s.id = InterpSessionId(j.value("session", ""));
    RequestReader lr(j["limits"]);
    ReadLimits(lr, &s.limits);
    RETURN_IF_ERROR(lr.Finish(), "interpreter session blob: limits");
    s.tools = j.value("tools", std::vector<std::string>{});
    s.declared = interp::CapabilitySet::FromBits(j.value("declared", uint8_t{0}));
    return s;
  }
};

// A session's blob: its settings as one line of JSON, then the payload (nothing for a new
// session, the signed snapshot of a paused one, the result JSON of a finished one).
namespace {
std::string Envelope(const json& settings, std::string_view payload) {
  std::string out = Dump(settings);
  out += '\n';
  out.append(payload);
  return out;
}
}  // namespace

struct InterpApi::Loaded {
  store::InterpSession record;
  Settings settings;
  std::string payload;
};

InterpApi::InterpApi(InterpApiOptions options, store::Store* store, store::BlobStore* blobs,
                     SandboxManager* manager, asio::any_io_executor executor)
    : options_(std::move(options)),
      store_(store),
      blobs_(blobs),
      manager_(manager),
      executor_(std::move(executor)) {}

InterpApi::~InterpApi() = default;

absl::StatusOr<std::string> InterpApi::Key() {
  std::lock_guard lock(mu_);
  if (interp_ == nullptr) {
    ASSIGN_OR_RETURN(interp_, interp::Interpreter::Create(), "interpreter");
  }
  if (key_.empty()) {
    ASSIGN_OR_RETURN(key_, interp::LoadOrCreateKeyFile(options_.data_dir + "/interp.key"),
                     "interpreter snapshot key");
  }
  return key_;
}

absl::StatusOr<interp::SessionOptions> InterpApi::OptionsFor(const Caller& caller,
                                                             const Settings& settings) {
  interp::SessionOptions o;
  ASSIGN_OR_RETURN(o.hmac_key, Key());
  o.limits = settings.limits;
  o.declared = settings.declared;
  for (const std::string& name : settings.tools) {
    if (name == interp::kHumanApprovalToolName) {
      o.tools.push_back(interp::MakeHumanApprovalTool());
    } else if (name == kSandboxExecToolName) {
      o.tools.push_back(MakeSandboxExecTool(
          manager_, caller, executor_, settings.declared.Has(interp::Capability::kChangesState)));
    } else {
      return absl::DataLossError(fmt::format(
          "interpreter session {}: unknown tool '{}' in its settings", settings.id.value(), name));
    }
  }
  return o;
}

absl::StatusOr<InterpApi::Loaded> InterpApi::Load(const Caller& caller, const InterpSessionId& id,
                                                  bool with_blob) {
  absl::StatusOr<store::InterpSession> record = store_->GetInterpSession(id);
  if ((!record.ok() && record.status().code() == absl::StatusCode::kNotFound) ||
      (record.ok() && (record->owner != caller.key || record->state == kStateDeleted))) {
    return NotFound(fmt::format("interpreter session {} not found", id.value()));
  }
  RETURN_IF_ERROR(record.status());
  Loaded l;
  l.record = *std::move(record);
  if (!with_blob || l.record.snapshot_blob.empty()) return l;
  ASSIGN_OR_RETURN(std::string blob, blobs_->Get(l.record.snapshot_blob, kMaxBlobBytes),
                   fmt::format("interpreter session {}", id.value()));
  size_t nl = blob.find('\n');
  if (nl == std::string::npos) {
    return absl::DataLossError(
        fmt::format("interpreter session {}: its blob has no settings", id.value()));
  }
  json settings = json::parse(std::string_view(blob).substr(0, nl), nullptr, false);
  ASSIGN_OR_RETURN(l.settings, Settings::FromJson(settings));
  l.settings.id = id;
  l.payload = blob.substr(nl + 1);
  // A run ends within its wall time; a record still "running" well after that was left by a
  // daemon that died mid-run. Its blob is still the state before that run, so the session goes
  // on from there (what the lost run did through tools may be done again).
  if (l.record.state == kStateRunning &&
      l.record.updated_at + absl::FromChrono(l.settings.limits.wall_time) + kAbandonedAfter <
          absl::Now()) {
    l.record.state = l.payload.empty() ? kStateNew : kStatePaused;
  }
  return l;
}

absl::StatusOr<std::unique_ptr<interp::Session>> InterpApi::Take(const Caller& caller,
                                                                 const Loaded& l) {
  {
    std::lock_guard lock(mu_);
    auto it = cache_.find(l.record.id);
    if (it != cache_.end()) {
      Cached c = std::move(it->second);
      cache_.erase(it);
      if (c.version == l.record.version && c.session != nullptr) return std::move(c.session);
    }
  }
  ASSIGN_OR_RETURN(interp::SessionOptions opts, OptionsFor(caller, l.settings));
  if (l.record.state == kStateNew) return interp_->NewSession(std::move(opts));
  if (l.record.state == kStatePaused) {
    absl::StatusOr<std::unique_ptr<interp::Session>> s =
        interp_->Restore(l.payload, std::move(opts));
    RETURN_IF_ERROR(s.status(), fmt::format("restore interpreter session {}", l.record.id.value()));
    return s;
  }
  return FailedPrecondition(
      fmt::format("interpreter session {} is {}", l.record.id.value(), l.record.state));
}

void InterpApi::Keep(const InterpSessionId& id, int64_t version,
                     std::unique_ptr<interp::Session> session) {
  std::lock_guard lock(mu_);
  if (cache_.size() >= options_.max_cached_sessions && cache_.count(id) == 0) {
    cache_.erase(cache_.begin());  // it is in the store; it will be restored when asked for
  }
  cache_[id] = Cached{version, std::move(session)};
}

class InterpApi::RunSlot {
 public:
  explicit RunSlot(InterpApi* api) : api_(api) {}
  RunSlot(RunSlot&& other) noexcept : api_(std::exchange(other.api_, nullptr)) {}
  RunSlot& operator=(RunSlot&&) = delete;
  ~RunSlot() {
    if (api_ == nullptr) return;
    std::lock_guard lock(api_->mu_);
    --api_->running_;
  }

 private:
  InterpApi* api_;
};

absl::StatusOr<InterpApi::RunSlot> InterpApi::StartRun() {
  std::lock_guard lock(mu_);
  if (running_ >= options_.max_running) {
    return ResourceExhausted(fmt::format(
        "{} interpreter scripts are running on this node, the limit; retry later", running_));
  }
  ++running_;
  return RunSlot(this);
}

absl::StatusOr<store::InterpSession> InterpApi::Claim(const store::InterpSession& record) {
  store::InterpSession running = record;
  running.state = kStateRunning;
  absl::StatusOr<store::InterpSession> claimed = store_->UpdateInterpSession(running);
  if (!claimed.ok() && claimed.status().code() == absl::StatusCode::kFailedPrecondition) {
    return FailedPrecondition(
        fmt::format("interpreter session {} was changed by another request while this one "
                    "started (it was {} at version {})",
                    record.id.value(), record.state, record.version));
  }
  return claimed;
}

void InterpApi::Unclaim(const store::InterpSession& claimed, const store::InterpSession& before) {
  store::InterpSession back = before;
  back.version = claimed.version;
  absl::StatusOr<store::InterpSession> r = store_->UpdateInterpSession(back);
  if (!r.ok()) {
    Log().Error("interpreter session left running",
                {{"session", claimed.id.value()}, {"error", std::string(Message(r.status()))}});
  }
}

absl::StatusOr<json> InterpApi::Commit(const store::InterpSession& claimed,
                                       const store::InterpSession& before, const Settings& settings,
                                       std::unique_ptr<interp::Session> session,
                                       const interp::RunResult& result) {
  json out = RunResultJson(result);
  auto stored = [&]() -> absl::StatusOr<store::InterpSession> {
    store::InterpSession next = claimed;
    std::string payload;
    if (result.outcome == Outcome::kPaused) {
      ASSIGN_OR_RETURN(payload, session->Snapshot());
      next.state = kStatePaused;
    } else {
      payload = Dump({{"result", out}, {"journal", JournalJson(session->journal())}});
      next.state = kStateFinished;
    }
    ASSIGN_OR_RETURN(next.snapshot_blob, blobs_->Put(Envelope(settings.ToJson(), payload)));
    next.console_output = session->console();
    return store_->UpdateInterpSession(next);
  }();
  if (!stored.ok()) {
    Unclaim(claimed, before);
    return Annotate(stored.status(),
                    fmt::format("store interpreter session {}", claimed.id.value()));
  }
  if (!before.snapshot_blob.empty() && before.snapshot_blob != stored->snapshot_blob) {
    if (absl::Status s = blobs_->Delete(before.snapshot_blob); !s.ok()) {
      Log().Warn("old interpreter blob not deleted", {{"error", std::string(Message(s))}});
    }
  }
  out["id"] = claimed.id.value();
  out["state"] = stored->state;
  out["console"] = session->console();
  if (stored->state == kStatePaused) Keep(claimed.id, stored->version, std::move(session));
  return out;
}

// ---------------------------------------------------------------------------------------------

absl::StatusOr<json> InterpApi::Create(const Caller& caller, const json& body) {
  RequestReader rd(body);
  Settings s;
  if (const json* limits = rd.Object("limits")) {
    RequestReader lr(*limits, "limits");
    Settings::ReadLimits(lr, &s.limits);
    rd.Merge(lr);
  }
  s.tools =
      rd.Strings("tools", {.max_items = 16, .max_length = 64}).value_or(std::vector<std::string>{});
  for (size_t i = 0; i < s.tools.size(); ++i) {
    const std::string& t = s.tools[i];
    if (std::find(std::begin(kToolNames), std::end(kToolNames), t) == std::end(kToolNames)) {
      rd.Error(fmt::format("tools[{}]", i),
               fmt::format("unknown tool \"{}\" (available: human_approval, sandbox.exec)", t));
    } else if (std::count(s.tools.begin(), s.tools.end(), t) > 1) {
      rd.Error(fmt::format("tools[{}]", i), fmt::format("\"{}\" is listed twice", t));
    }
  }
  std::vector<std::string> declared = rd.Strings("declared", {.max_items = 3, .max_length = 64})
                                          .value_or(std::vector<std::string>{});
  for (size_t i = 0; i < declared.size(); ++i) {
    absl::StatusOr<interp::Capability> c = interp::ParseCapability(declared[i]);
    if (!c.ok()) {
      rd.Error(fmt::format("declared[{}]", i), std::string(Message(c.status())));
    } else {
      s.declared.Add(*c);
    }
  }
  RETURN_IF_ERROR(rd.Finish());
  s.id = InterpSessionId::New();
  ASSIGN_OR_RETURN(interp::SessionOptions opts, OptionsFor(caller, s));
  // Checks the limits and the rule of two before anything is stored.
  ASSIGN_OR_RETURN(std::unique_ptr<interp::Session> session, interp_->NewSession(std::move(opts)));
  ASSIGN_OR_RETURN(std::string blob, blobs_->Put(Envelope(s.ToJson(), "")));
  store::InterpSession record;
  record.id = s.id;
  record.owner = caller.key;
  record.state = kStateNew;
  record.snapshot_blob = blob;
  ASSIGN_OR_RETURN(record, store_->PutInterpSession(record));
  Keep(record.id, record.version, std::move(session));
  json out = s.ToJson();
  out.erase("session");
  out["declared"] = s.declared.ToString();
  out["id"] = record.id.value();
  out["state"] = record.state;
  out["created_at"] = Time(record.created_at);
  return out;
}

absl::StatusOr<json> InterpApi::Eval(const Caller& caller, const InterpSessionId& id,
                                     const json& body) {
  RequestReader rd(body);
  std::string script = rd.String("script", {.required = true, .max_length = 1 << 20}).value_or("");
  RETURN_IF_ERROR(rd.Finish());
  ASSIGN_OR_RETURN(RunSlot slot, StartRun());
  ASSIGN_OR_RETURN(Loaded l, Load(caller, id, /*with_blob=*/true));
  if (l.record.state != kStateNew) {
    return FailedPrecondition(fmt::format(
        "interpreter session {} is {}: a session runs one script{}", id.value(), l.record.state,
        l.record.state == kStatePaused ? "; answer its pending calls with resume" : ""));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<interp::Session> session, Take(caller, l));
  absl::StatusOr<store::InterpSession> claimed = Claim(l.record);
  if (!claimed.ok()) return claimed.status();
  absl::StatusOr<interp::RunResult> r = session->Run(script);
  if (!r.ok()) {
    Unclaim(*claimed, l.record);
    if (session->state() == interp::SessionState::kNew) {
      Keep(id, l.record.version, std::move(session));
    }
    return r.status();
  }
  return Commit(*claimed, l.record, l.settings, std::move(session), *r);
}

absl::StatusOr<json> InterpApi::Resume(const Caller& caller, const InterpSessionId& id,
                                       const json& body) {
  json rest = body.is_object() ? body : json::object();
  std::optional<json> value;
  if (rest.contains("result")) {
    value = rest["result"];
    rest.erase("result");
  }
  RequestReader rd(rest);
  std::string call_id = rd.String("call_id", {.required = true, .max_length = 64}).value_or("");
  std::optional<std::string> error = rd.String("error", {.max_length = 1 << 16});
  if (value.has_value() == error.has_value()) {
    rd.Error("result", "give exactly one of result (any JSON value) and error (a message)");
  }
  RETURN_IF_ERROR(rd.Finish());
  ASSIGN_OR_RETURN(RunSlot slot, StartRun());
  ASSIGN_OR_RETURN(Loaded l, Load(caller, id, /*with_blob=*/true));
  if (l.record.state != kStatePaused) {
    return FailedPrecondition(
        fmt::format("interpreter session {} is {}, not paused: there is no call to answer",
                    id.value(), l.record.state));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<interp::Session> session, Take(caller, l));
  bool pending = false;
  for (const auto& e : session->journal()) {
    pending |= e.call_id == call_id && e.status == interp::JournalEntry::Status::kPending;
  }
  if (!pending) {
    json p = PendingJson(session->journal());
    Keep(id, l.record.version, std::move(session));
    return FailedPrecondition(
        fmt::format("interpreter session {}: call \"{}\" is not awaiting an answer (pending: {})",
                    id.value(), call_id, Dump(p)));
  }
  absl::StatusOr<store::InterpSession> claimed = Claim(l.record);
  if (!claimed.ok()) return claimed.status();
  interp::ToolResult answer = value.has_value() ? interp::ToolResult::Value(Dump(*value))
                                                : interp::ToolResult::Error(*error);
  absl::StatusOr<interp::RunResult> r = session->Resume(call_id, answer);
  if (!r.ok()) {
    Unclaim(*claimed, l.record);
    return r.status();
  }
  return Commit(*claimed, l.record, l.settings, std::move(session), *r);
}

absl::StatusOr<json> InterpApi::Get(const Caller& caller, const InterpSessionId& id) {
  ASSIGN_OR_RETURN(Loaded l, Load(caller, id, /*with_blob=*/true));
  json out = {{"id", id.value()},
              {"state", l.record.state},
              {"version", l.record.version},
              {"created_at", Time(l.record.created_at)},
              {"updated_at", Time(l.record.updated_at)},
              {"tools", l.settings.tools},
              {"declared", l.settings.declared.ToString()},
              {"pending", json::array()},
              {"journal", json::array()}};
  if (l.record.state == kStatePaused) {
    ASSIGN_OR_RETURN(std::unique_ptr<interp::Session> session, Take(caller, l));
    out["pending"] = PendingJson(session->journal());
    out["journal"] = JournalJson(session->journal());
    Keep(id, l.record.version, std::move(session));
  } else if (l.record.state == kStateFinished) {
    json done = json::parse(l.payload, nullptr, false);
    if (!done.is_object()) {
      return absl::DataLossError(
          fmt::format("interpreter session {}: its result is unreadable", id.value()));
    }
    out["journal"] = done.value("journal", json::array());
    out["result"] = done.value("result", json::object());
  }
  return out;
}

absl::StatusOr<json> InterpApi::Console(const Caller& caller, const InterpSessionId& id) {
  ASSIGN_OR_RETURN(Loaded l, Load(caller, id, /*with_blob=*/false));
  return json{{"id", id.value()}, {"state", l.record.state}, {"console", l.record.console_output}};
}

absl::StatusOr<json> InterpApi::Delete(const Caller& caller, const InterpSessionId& id) {
  ASSIGN_OR_RETURN(Loaded l, Load(caller, id, /*with_blob=*/true));
  if (l.record.state == kStateRunning) {
    return FailedPrecondition(fmt::format(
        "interpreter session {} is running; delete it when its request ends", id.value()));
  }
  store::InterpSession gone = l.record;
  gone.state = kStateDeleted;
  gone.snapshot_blob.clear();
  gone.console_output.clear();
  ASSIGN_OR_RETURN(gone, store_->UpdateInterpSession(gone),
                   fmt::format("delete interpreter session {}", id.value()));
  {
    std::lock_guard lock(mu_);
    cache_.erase(id);
  }
  if (!l.record.snapshot_blob.empty()) {
    if (absl::Status s = blobs_->Delete(l.record.snapshot_blob); !s.ok()) {
      Log().Warn("interpreter blob not deleted", {{"error", std::string(Message(s))}});
    }
  }
  return json{{"id", id.value()}, {"state", gone.state}};
}

// ---------------------------------------------------------------------------------------------
// Routes

namespace {

Caller CallerOf(const Exchange& ex) {
  return Caller{ApiKeyId(ex.principal()), "key:" + ex.principal()};
}

InterpSessionId IdOf(const Exchange& ex) { return InterpSessionId(ex.request().params.at("id")); }

}  // namespace

void InterpApi::AddRoutes(http::Router& r) {
  // Closures inside co_await expressions capture by reference only (GCC 12; see
  // Daemon::Impl::Blocking in daemon.cc).
  using Op =
      absl::StatusOr<json> (InterpApi::*)(const Caller&, const InterpSessionId&, const json&);
  auto answer = [this](Exchange& ex, int status,
                       const std::function<absl::StatusOr<json>()>& f) -> asio::awaitable<void> {
    absl::StatusOr<json> out = co_await http::RunBlocking(executor_, [&] { return f(); });
    if (!out.ok()) {
      co_await ex.RespondError(out.status());
    } else {
      co_await ex.RespondJson(status, *out);
    }
  };
  auto with_body = [this, answer](Op op) {
    return [this, answer, op](Exchange& ex) -> asio::awaitable<void> {
      absl::StatusOr<json> body = ParseBody(ex.request().body);
      if (!body.ok()) {
        co_await ex.RespondError(body.status());
        co_return;
      }
      Caller c = CallerOf(ex);
      InterpSessionId id = IdOf(ex);
      std::function<absl::StatusOr<json>()> f = [&] { return (this->*op)(c, id, *body); };
      co_await answer(ex, 200, f);
    };
  };
  r.Add(Verb::post, "/v1/interpreters", [this, answer](Exchange& ex) -> asio::awaitable<void> {
    absl::StatusOr<json> body = ParseBody(ex.request().body);
    if (!body.ok()) {
      co_await ex.RespondError(body.status());
      co_return;
    }
    Caller c = CallerOf(ex);
    std::function<absl::StatusOr<json>()> f = [&] { return Create(c, *body); };
    co_await answer(ex, 201, f);
  });
  r.Add(Verb::post, "/v1/interpreters/{id}/eval", with_body(&InterpApi::Eval),
        {.max_body_bytes = 4 << 20});
  r.Add(Verb::post, "/v1/interpreters/{id}/resume", with_body(&InterpApi::Resume),
        {.max_body_bytes = 8 << 20});
  using GetOp = absl::StatusOr<json> (InterpApi::*)(const Caller&, const InterpSessionId&);
  auto no_body = [this, answer](GetOp op) {
    return [this, answer, op](Exchange& ex) -> asio::awaitable<void> {
      Caller c = CallerOf(ex);
      InterpSessionId id = IdOf(ex);
      std::function<absl::StatusOr<json>()> f = [&] { return (this->*op)(c, id); };
      co_await answer(ex, 200, f);
    };
  };
  r.Add(Verb::get, "/v1/interpreters/{id}", no_body(&InterpApi::Get));
  r.Add(Verb::get, "/v1/interpreters/{id}/console", no_body(&InterpApi::Console));
  r.Add(Verb::delete_, "/v1/interpreters/{id}", no_body(&InterpApi::Delete));
}

}  // namespace airlock::daemon
