#include "store/internal/sql_store.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "common/logging.h"
#include "common/status.h"
#include "fmt/format.h"
#include "store/internal/api_key_secret.h"

namespace airlock::store::internal {
namespace {

constexpr int kMaxPage = 1000;
constexpr int kMaxAuditPage = 10000;
constexpr absl::Duration kLastUsedGranularity = absl::Minutes(1);

int64_t Ms(absl::Time t) { return absl::ToUnixMillis(t); }
int64_t Ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }
absl::Time FromMs(int64_t ms) { return absl::FromUnixMillis(ms); }

SqlValue TextOrNull(std::string_view s) {
  return s.empty() ? SqlValue{} : SqlValue{std::string(s)};
}
std::optional<absl::Time> OptionalTime(const SqlRow& row, size_t i) {
  if (row.IsNull(i)) return std::nullopt;
  return FromMs(row.Int(i));
}

// Never throws: text that is not UTF-8 is replaced rather than refused.
std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<nlohmann::json> ParseStoredJson(const std::string& text, std::string_view what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::DataLossError(fmt::format("stored {} is not JSON", what));
  return j;
}

template <typename Enum>
absl::StatusOr<Enum> ParseStoredEnum(std::optional<Enum> (*parse)(std::string_view),
                                     const std::string& text, std::string_view what) {
  std::optional<Enum> value = parse(text);
  if (!value) return absl::DataLossError(fmt::format("stored {} '{}' is unknown", what, text));
  return *value;
}

// "$1, $2, ..." for the values appended to `params`.
std::string Placeholders(SqlParams& params, const std::vector<SqlValue>& values) {
  std::string out;
  for (const SqlValue& v : values) {
    params.push_back(v);
    out += fmt::format("{}${}", out.empty() ? "" : ", ", params.size());
  }
  return out;
}

std::string StateNames(const std::vector<SandboxState>& states) {
  std::string out;
  for (SandboxState s : states) out += fmt::format("{}{}", out.empty() ? "" : " or ", ToString(s));
  return out;
}

// Rewrites the driver's message for a duplicate id into one that names the record.
absl::Status Duplicate(const absl::Status& s, std::string_view what, std::string_view id) {
  if (absl::IsAlreadyExists(s)) {
    return absl::AlreadyExistsError(fmt::format("{} {} already exists", what, id));
  }
  return s;
}

absl::StatusCode CodeOf(const absl::Status& s) { return s.code(); }
template <typename T>
absl::StatusCode CodeOf(const absl::StatusOr<T>& s) {
  return s.status().code();
}

// ---------------------------------------------------------------------------------------------
// Rows

constexpr std::string_view kSandboxColumns =
    "id, state, owner, spec, template_name, image_digest, ttl_ms, idle_timeout_ms, expires_ms, "
    "last_activity_ms, created_ms, updated_ms, idempotency_key, node_id, shim_pid, shim_socket, "
    "cgroup_path, last_error";

absl::StatusOr<SandboxRecord> SandboxFromRow(const SqlRow& r) {
  SandboxRecord s;
  s.id = SandboxId(r.Text(0));
  ASSIGN_OR_RETURN(s.state, ParseStoredEnum(&SandboxStateFromString, r.Text(1), "state"),
                   fmt::format("sandbox {}", s.id.value()));
  s.owner = ApiKeyId(r.Text(2));
  ASSIGN_OR_RETURN(s.spec, ParseStoredJson(r.Text(3), "spec"),
                   fmt::format("sandbox {}", s.id.value()));
  s.template_name = r.Text(4);
  s.image_digest = r.Text(5);
  s.ttl = absl::Milliseconds(r.Int(6));
  s.idle_timeout = absl::Milliseconds(r.Int(7));
  s.expires_at = FromMs(r.Int(8));
  s.last_activity_at = FromMs(r.Int(9));
  s.created_at = FromMs(r.Int(10));
  s.updated_at = FromMs(r.Int(11));
  s.idempotency_key = r.Text(12);
  s.node = NodeId(r.Text(13));
  s.runtime.shim_pid = r.Int(14);
  s.runtime.shim_socket = r.Text(15);
  s.runtime.cgroup_path = r.Text(16);
  s.last_error = r.Text(17);
  return s;
}

constexpr std::string_view kEventColumns =
    "seq, time_ms, sandbox_id, actor, kind, from_state, to_state, reason, data";

absl::StatusOr<AuditEvent> EventFromRow(const SqlRow& r) {
  AuditEvent e;
  e.seq = r.Int(0);
  std::string context = fmt::format("audit event {}", e.seq);
  e.time = FromMs(r.Int(1));
  e.sandbox = SandboxId(r.Text(2));
  e.actor = r.Text(3);
  ASSIGN_OR_RETURN(e.kind, ParseStoredEnum(&AuditKindFromString, r.Text(4), "kind"), context);
  if (!r.IsNull(5)) {
    ASSIGN_OR_RETURN(e.from, ParseStoredEnum(&SandboxStateFromString, r.Text(5), "from-state"),
                     context);
  }
  if (!r.IsNull(6)) {
    ASSIGN_OR_RETURN(e.to, ParseStoredEnum(&SandboxStateFromString, r.Text(6), "to-state"),
                     context);
  }
  e.reason = r.Text(7);
  ASSIGN_OR_RETURN(e.data, ParseStoredJson(r.Text(8), "data"), context);
  return e;
}

constexpr std::string_view kCommandColumns =
    "id, sandbox_id, argv, background, state, started_ms, finished_ms, result";

absl::StatusOr<CommandRecord> CommandFromRow(const SqlRow& r) {
  CommandRecord c;
  c.id = CommandId(r.Text(0));
  std::string context = fmt::format("command {}", c.id.value());
  c.sandbox = SandboxId(r.Text(1));
  ASSIGN_OR_RETURN(nlohmann::json argv, ParseStoredJson(r.Text(2), "argv"), context);
  if (!argv.is_array()) return absl::DataLossError(context + ": stored argv is not an array");
  for (const nlohmann::json& arg : argv) {
    if (!arg.is_string()) return absl::DataLossError(context + ": stored argv has a non-string");
    c.argv.push_back(arg.get<std::string>());
  }
  c.background = r.Int(3) != 0;
  ASSIGN_OR_RETURN(c.state, ParseStoredEnum(&CommandStateFromString, r.Text(4), "state"), context);
  c.started_at = FromMs(r.Int(5));
  c.finished_at = OptionalTime(r, 6);
  if (!r.IsNull(7)) {
    ASSIGN_OR_RETURN(c.result, ParseStoredJson(r.Text(7), "result"), context);
  }
  return c;
}

constexpr std::string_view kApiKeyColumns =
    "id, name, created_ms, revoked_ms, last_used_ms, salt, secret_hash";

ApiKey ApiKeyFromRow(const SqlRow& r) {
  ApiKey k;
  k.id = ApiKeyId(r.Text(0));
  k.name = r.Text(1);
  k.created_at = FromMs(r.Int(2));
  k.revoked_at = OptionalTime(r, 3);
  k.last_used_at = OptionalTime(r, 4);
  return k;
}

constexpr std::string_view kArtifactColumns =
    "id, sandbox_id, path, size_bytes, sha256, status, reason, blob_key, created_ms";

absl::StatusOr<ArtifactRecord> ArtifactFromRow(const SqlRow& r) {
  ArtifactRecord a;
  a.id = ArtifactId(r.Text(0));
  a.sandbox = SandboxId(r.Text(1));
  a.path = r.Text(2);
  a.size = r.Int(3);
  a.sha256 = r.Text(4);
  ASSIGN_OR_RETURN(a.status, ParseStoredEnum(&ArtifactStatusFromString, r.Text(5), "status"),
                   fmt::format("artifact {}", a.id.value()));
  a.reason = r.Text(6);
  a.blob_key = r.Text(7);
  a.created_at = FromMs(r.Int(8));
  return a;
}

constexpr std::string_view kInterpColumns =
    "id, owner, state, snapshot_blob, console_output, version, created_ms, updated_ms";

InterpSession InterpFromRow(const SqlRow& r) {
  InterpSession s;
  s.id = InterpSessionId(r.Text(0));
  s.owner = ApiKeyId(r.Text(1));
  s.state = r.Text(2);
  s.snapshot_blob = r.Text(3);
  s.console_output = r.Text(4);
  s.version = r.Int(5);
  s.created_at = FromMs(r.Int(6));
  s.updated_at = FromMs(r.Int(7));
  return s;
}

// The rows of `table` (whose first column is its id) decoded by `decode`.
template <typename T, typename DecodeRow>
absl::StatusOr<std::vector<T>> Decode(const std::vector<SqlRow>& rows, DecodeRow decode) {
  std::vector<T> out;
  out.reserve(rows.size());
  for (const SqlRow& row : rows) {
    absl::StatusOr<T> value = decode(row);
    if (!value.ok()) return value.status();
    out.push_back(*std::move(value));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Statements used by several operations

// The first row of `sql`, or NotFound "<what> <id> not found".
absl::StatusOr<SqlRow> One(SqlConnection& conn, std::string_view sql, const SqlParams& params,
                           std::string_view what, std::string_view id) {
  ASSIGN_OR_RETURN(std::vector<SqlRow> rows, conn.Query(sql, params));
  if (rows.empty()) return NotFound(fmt::format("{} {} not found", what, id));
  return std::move(rows.front());
}

absl::Status RequireSandbox(SqlConnection& conn, const SandboxId& id) {
  return One(conn, "SELECT 1 FROM sandboxes WHERE id = $1", {id.value()}, "sandbox", id.value())
      .status();
}

// Fills in the metadata of `sandboxes` from sandbox_metadata.
absl::Status LoadMetadata(SqlConnection& conn, std::vector<SandboxRecord>& sandboxes) {
  if (sandboxes.empty()) return absl::OkStatus();
  SqlParams params;
  std::vector<SqlValue> ids;
  for (const SandboxRecord& s : sandboxes) ids.emplace_back(s.id.value());
  std::string in = Placeholders(params, ids);
  ASSIGN_OR_RETURN(std::vector<SqlRow> rows,
                   conn.Query(fmt::format("SELECT sandbox_id, key, value FROM sandbox_metadata "
                                          "WHERE sandbox_id IN ({})",
                                          in),
                              params));
  std::map<std::string_view, SandboxRecord*> by_id;
  for (SandboxRecord& s : sandboxes) by_id[s.id.value()] = &s;
  for (const SqlRow& row : rows) {
    if (auto it = by_id.find(row.Text(0)); it != by_id.end()) {
      it->second->metadata[row.Text(1)] = row.Text(2);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SandboxRecord>> LoadSandboxes(SqlConnection& conn, std::string_view sql,
                                                         const SqlParams& params) {
  ASSIGN_OR_RETURN(std::vector<SqlRow> rows, conn.Query(sql, params));
  ASSIGN_OR_RETURN(std::vector<SandboxRecord> sandboxes,
                   Decode<SandboxRecord>(rows, SandboxFromRow));
  RETURN_IF_ERROR(LoadMetadata(conn, sandboxes));
  return sandboxes;
}

absl::StatusOr<SandboxRecord> LoadSandbox(SqlConnection& conn, const SandboxId& id) {
  static const std::string* sql =
      new std::string(fmt::format("SELECT {} FROM sandboxes WHERE id = $1", kSandboxColumns));
  ASSIGN_OR_RETURN(std::vector<SandboxRecord> found, LoadSandboxes(conn, *sql, {id.value()}));
  if (found.empty()) return NotFound(fmt::format("sandbox {} not found", id.value()));
  return std::move(found.front());
}

// When the reaper should look at a sandbox: the earlier of its expiry and its idle deadline;
// never once it is terminal. Touch computes the same in SQL.
SqlValue ReapAfter(const SandboxRecord& s) {
  if (IsTerminal(s.state)) return SqlValue{};
  absl::Time at = s.expires_at;
  if (s.idle_timeout > absl::ZeroDuration()) at = std::min(at, s.last_activity_at + s.idle_timeout);
  return Ms(at);
}

absl::StatusOr<int64_t> InsertEvent(SqlConnection& conn, const AuditEvent& e, absl::Time now) {
  ASSIGN_OR_RETURN(
      std::vector<SqlRow> rows,
      conn.Query(
          "INSERT INTO audit_events "
          "(time_ms, sandbox_id, actor, kind, from_state, to_state, reason, data) "
          "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING seq",
          {Ms(now), e.sandbox.value(), e.actor, std::string(ToString(e.kind)),
           e.from ? SqlValue{std::string(ToString(*e.from))} : SqlValue{},
           e.to ? SqlValue{std::string(ToString(*e.to))} : SqlValue{}, e.reason, DumpJson(e.data)}),
      "append audit event");
  if (rows.empty()) return Internal("append audit event: no sequence number returned");
  return rows.front().Int(0);
}

// Records activity at `at` inside the caller's transaction (last_activity_ms only moves forward;
// the reaper's deadline follows it as ReapAfter computes). NotFound for an unknown sandbox.
absl::Status TouchIn(SqlConnection& conn, const SandboxId& id, absl::Time at) {
  ASSIGN_OR_RETURN(int64_t changed,
                   conn.Exec("UPDATE sandboxes SET last_activity_ms = $1, reap_after_ms = "
                             "CASE WHEN reap_after_ms IS NULL THEN NULL "
                             "WHEN idle_timeout_ms > 0 AND $1 + idle_timeout_ms < "
                             "expires_ms THEN $1 + idle_timeout_ms ELSE expires_ms END "
                             "WHERE id = $2 AND last_activity_ms < $1",
                             {Ms(at), id.value()}));
  if (changed == 0) return RequireSandbox(conn, id);
  return absl::OkStatus();
}

absl::Status RequireActor(std::string_view actor) {
  if (actor.empty()) return absl::InvalidArgumentError("actor is empty");
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------

class SqlStore final : public Store {
 public:
  SqlStore(std::unique_ptr<SqlDatabase> db, StoreOptions options)
      : db_(std::move(db)), options_(std::move(options)) {}

  absl::StatusOr<CreateResult> CreateSandbox(const NewSandbox& request) override {
    return Observe("sandbox.create", [&] { return DoCreate(request); });
  }
  absl::StatusOr<CreateResult> ClaimSandbox(const SandboxId& id, const ApiKeyId& from_owner,
                                            const NewSandbox& request) override {
    return Observe("sandbox.claim", [&] { return DoClaim(id, from_owner, request); });
  }
  absl::StatusOr<SandboxRecord> GetSandbox(const SandboxId& id) override {
    return Observe("sandbox.get", [&]() -> absl::StatusOr<SandboxRecord> {
      absl::StatusOr<SandboxRecord> out;
      absl::Status tx = Read([&](SqlConnection& conn) {
        out = LoadSandbox(conn, id);
        return out.status();
      });
      RETURN_IF_ERROR(tx);
      return out;
    });
  }
  absl::StatusOr<SandboxPage> ListSandboxes(const SandboxQuery& query) override {
    return Observe("sandbox.list", [&] { return DoList(query); });
  }
  absl::StatusOr<int64_t> CountSandboxes(const std::vector<SandboxState>& states) override {
    return Observe("sandbox.count", [&] { return DoCount(states); });
  }
  absl::StatusOr<SandboxRecord> Transition(const TransitionRequest& request) override {
    return Observe("sandbox.transition", [&] { return DoTransition(request); });
  }
  absl::Status Touch(const SandboxId& id, absl::Time at) override {
    return Observe("sandbox.touch", [&] { return DoTouch(id, at); });
  }
  absl::StatusOr<SandboxRecord> ExtendTtl(const SandboxId& id, absl::Time expires_at,
                                          std::string_view actor) override {
    return Observe("sandbox.extend_ttl", [&] { return DoExtendTtl(id, expires_at, actor); });
  }
  absl::Status UpdateRuntime(const SandboxId& id, const RuntimeInfo& runtime) override {
    return Observe("sandbox.update_runtime", [&] { return DoUpdateRuntime(id, runtime); });
  }
  absl::StatusOr<SandboxRecord> UpdateSpec(const SandboxId& id, const nlohmann::json& spec,
                                           const AuditEvent& event) override {
    return Observe("sandbox.update_spec", [&] { return DoUpdateSpec(id, spec, event); });
  }
  absl::StatusOr<std::vector<SandboxRecord>> ListExpired(absl::Time now, int limit) override {
    return Observe("sandbox.list_expired", [&] { return DoListExpired(now, limit); });
  }

  absl::StatusOr<int64_t> AppendEvent(const AuditEvent& event) override {
    return Observe("audit.append", [&]() -> absl::StatusOr<int64_t> {
      RETURN_IF_ERROR(RequireActor(event.actor), "append audit event");
      absl::StatusOr<int64_t> seq;
      absl::Status tx = Write([&](SqlConnection& conn) {
        seq = InsertEvent(conn, event, Now());
        return seq.status();
      });
      RETURN_IF_ERROR(tx);
      return seq;
    });
  }
  absl::StatusOr<std::vector<AuditEvent>> ListEvents(const AuditQuery& query) override {
    return Observe("audit.list", [&] { return DoListEvents(query); });
  }

  absl::Status PutCommand(const CommandRecord& command, std::string_view actor) override {
    return Observe("command.put", [&] { return DoPutCommand(command, actor); });
  }
  absl::StatusOr<CommandRecord> FinishCommand(const CommandId& id, CommandState state,
                                              const nlohmann::json& result) override {
    return Observe("command.finish", [&] { return DoFinishCommand(id, state, result); });
  }
  absl::StatusOr<CommandRecord> GetCommand(const CommandId& id) override {
    return Observe("command.get", [&] {
      return ReadById<CommandRecord>("commands", kCommandColumns, id.value(), "command",
                                     CommandFromRow);
    });
  }
  absl::StatusOr<std::vector<CommandRecord>> ListCommands(const SandboxId& sandbox) override {
    return Observe("command.list", [&] {
      return ReadBySandbox<CommandRecord>("commands", kCommandColumns, "started_ms", sandbox,
                                          CommandFromRow);
    });
  }

  absl::StatusOr<NewApiKey> CreateApiKey(std::string_view name, std::string_view actor) override {
    return Observe("api_key.create", [&] { return DoCreateApiKey(name, actor); });
  }
  absl::StatusOr<ApiKey> Authenticate(std::string_view token) override {
    return Observe("api_key.authenticate", [&] { return DoAuthenticate(token); });
  }
  absl::StatusOr<ApiKey> GetApiKey(const ApiKeyId& id) override {
    return Observe("api_key.get", [&] {
      return ReadById<ApiKey>(
          "api_keys", kApiKeyColumns, id.value(), "API key",
          [](const SqlRow& r) -> absl::StatusOr<ApiKey> { return ApiKeyFromRow(r); });
    });
  }
  absl::Status RevokeApiKey(const ApiKeyId& id, std::string_view actor) override {
    return Observe("api_key.revoke", [&] { return DoRevokeApiKey(id, actor); });
  }
  absl::StatusOr<std::vector<ApiKey>> ListApiKeys() override {
    return Observe("api_key.list", [&] {
      return ReadAll<ApiKey>(
          fmt::format("SELECT {} FROM api_keys ORDER BY created_ms, id", kApiKeyColumns), {},
          [](const SqlRow& r) -> absl::StatusOr<ApiKey> { return ApiKeyFromRow(r); });
    });
  }

  absl::Status PutArtifact(const ArtifactRecord& artifact, std::string_view actor) override {
    return Observe("artifact.put", [&] { return DoPutArtifact(artifact, actor); });
  }
  absl::StatusOr<ArtifactRecord> GetArtifact(const ArtifactId& id) override {
    return Observe("artifact.get", [&] {
      return ReadById<ArtifactRecord>("artifacts", kArtifactColumns, id.value(), "artifact",
                                      ArtifactFromRow);
    });
  }
  absl::StatusOr<std::vector<ArtifactRecord>> ListArtifacts(const SandboxId& sandbox) override {
    return Observe("artifact.list", [&] {
      return ReadBySandbox<ArtifactRecord>("artifacts", kArtifactColumns, "created_ms", sandbox,
                                           ArtifactFromRow);
    });
  }

  absl::StatusOr<InterpSession> PutInterpSession(const InterpSession& session) override {
    return Observe("interp.put", [&] { return DoPutInterp(session); });
  }
  absl::StatusOr<InterpSession> GetInterpSession(const InterpSessionId& id) override {
    return Observe("interp.get", [&] {
      return ReadById<InterpSession>(
          "interp_sessions", kInterpColumns, id.value(), "interpreter session",
          [](const SqlRow& r) -> absl::StatusOr<InterpSession> { return InterpFromRow(r); });
    });
  }
  absl::StatusOr<InterpSession> UpdateInterpSession(const InterpSession& session) override {
    return Observe("interp.update", [&] { return DoUpdateInterp(session); });
  }

 private:
  // Truncated to what the database keeps, so records built in memory equal what a Get returns.
  absl::Time Now() const { return FromMs(Ms(options_.clock ? options_.clock() : absl::Now())); }

  template <typename F>
  auto Observe(std::string_view op, F&& f) -> decltype(f()) {
    if (!options_.observer) return f();
    auto start = std::chrono::steady_clock::now();
    auto result = f();
    options_.observer(StoreCall{
        .op = op,
        .latency = absl::FromChrono(std::chrono::steady_clock::now() - start),
        .code = CodeOf(result),
    });
    return result;
  }

  absl::Status Read(absl::FunctionRef<absl::Status(SqlConnection&)> body) {
    return InTransaction(*db_, TxKind::kRead, body);
  }
  absl::Status Write(absl::FunctionRef<absl::Status(SqlConnection&)> body) {
    return InTransaction(*db_, TxKind::kWrite, body);
  }

  template <typename T>
  absl::StatusOr<std::vector<T>> ReadAll(
      const std::string& sql, const SqlParams& params,
      absl::FunctionRef<absl::StatusOr<T>(const SqlRow&)> decode) {
    absl::StatusOr<std::vector<SqlRow>> rows;
    absl::Status tx = Read([&](SqlConnection& conn) {
      rows = conn.Query(sql, params);
      return rows.status();
    });
    RETURN_IF_ERROR(tx);
    return Decode<T>(*rows, decode);
  }

  // The row of `table` with this id; NotFound "<what> <id> not found".
  template <typename T>
  absl::StatusOr<T> ReadById(std::string_view table, std::string_view columns,
                             const std::string& id, std::string_view what,
                             absl::FunctionRef<absl::StatusOr<T>(const SqlRow&)> decode) {
    absl::StatusOr<SqlRow> row = absl::UnknownError("");
    absl::Status tx = Read([&](SqlConnection& conn) {
      row =
          One(conn, fmt::format("SELECT {} FROM {} WHERE id = $1", columns, table), {id}, what, id);
      return row.status();
    });
    RETURN_IF_ERROR(tx);
    return decode(*row);
  }

  // The rows of `table` that belong to a sandbox, oldest first.
  template <typename T>
  absl::StatusOr<std::vector<T>> ReadBySandbox(
      std::string_view table, std::string_view columns, std::string_view time_column,
      const SandboxId& sandbox, absl::FunctionRef<absl::StatusOr<T>(const SqlRow&)> decode) {
    return ReadAll<T>(fmt::format("SELECT {} FROM {} WHERE sandbox_id = $1 ORDER BY {}, id",
                                  columns, table, time_column),
                      {sandbox.value()}, decode);
  }

  // Sandboxes -------------------------------------------------------------------------------

  // What CreateSandbox and ClaimSandbox refuse in a request, before any transaction.
  static absl::Status ValidateNew(const NewSandbox& r) {
    if (r.owner.empty()) return absl::InvalidArgumentError("owner is empty");
    if (r.ttl <= absl::ZeroDuration()) return absl::InvalidArgumentError("ttl must be positive");
    if (r.idle_timeout < absl::ZeroDuration()) {
      return absl::InvalidArgumentError("idle timeout must not be negative");
    }
    for (const auto& [key, value] : r.metadata) {
      if (key.empty()) return absl::InvalidArgumentError("metadata key is empty");
    }
    return RequireActor(r.actor);
  }

  // The sandbox `owner` created with `key`, if any (inside the caller's transaction).
  static absl::StatusOr<std::optional<SandboxRecord>> FindByKey(SqlConnection& conn,
                                                                const ApiKeyId& owner,
                                                                const std::string& key) {
    static const std::string* by_key = new std::string(fmt::format(
        "SELECT {} FROM sandboxes WHERE owner = $1 AND idempotency_key = $2", kSandboxColumns));
    ASSIGN_OR_RETURN(std::vector<SandboxRecord> found,
                     LoadSandboxes(conn, *by_key, {owner.value(), key}));
    if (found.empty()) return std::nullopt;
    return std::move(found.front());
  }

  static absl::Status InsertMetadata(SqlConnection& conn, const SandboxId& id,
                                     const std::map<std::string, std::string>& metadata) {
    for (const auto& [key, value] : metadata) {
      RETURN_IF_ERROR(
          conn.Exec("INSERT INTO sandbox_metadata (sandbox_id, key, value) VALUES ($1, $2, $3)",
                    {id.value(), key, value})
              .status());
    }
    return absl::OkStatus();
  }

  // The data of the audit event that gives a sandbox its owner.
  static nlohmann::json OwnerEventData(const NewSandbox& r) {
    nlohmann::json data = {{"owner", r.owner.value()}};
    if (!r.template_name.empty()) data["template"] = r.template_name;
    if (!r.idempotency_key.empty()) data["idempotency_key"] = r.idempotency_key;
    return data;
  }

  absl::StatusOr<CreateResult> DoClaim(const SandboxId& id, const ApiKeyId& from_owner,
                                       const NewSandbox& r) {
    std::string context = fmt::format("claim sandbox {}", id.value());
    RETURN_IF_ERROR(ValidateNew(r), context);
    const absl::Time now = Now();
    CreateResult result;
    absl::Status tx = Write([&](SqlConnection& conn) -> absl::Status {
      if (!r.idempotency_key.empty()) {
        ASSIGN_OR_RETURN(std::optional<SandboxRecord> earlier,
                         FindByKey(conn, r.owner, r.idempotency_key));
        if (earlier) {
          result.sandbox = std::move(*earlier);
          result.created = false;
          return absl::OkStatus();
        }
      }
      ASSIGN_OR_RETURN(SandboxRecord s, LoadSandbox(conn, id));
      if (s.state != SandboxState::kRunning || s.owner != from_owner) {
        return FailedPrecondition(
            fmt::format("the sandbox is no longer ready to hand out ({})", ToString(s.state)));
      }
      if (s.spec != r.spec) {
        return FailedPrecondition("the request's spec is not the sandbox's");
      }
      s.owner = r.owner;
      s.template_name = r.template_name;
      s.metadata = r.metadata;
      s.ttl = absl::Milliseconds(Ms(r.ttl));
      s.idle_timeout = absl::Milliseconds(Ms(r.idle_timeout));
      s.created_at = now;
      s.updated_at = now;
      s.last_activity_at = now;
      s.expires_at = FromMs(Ms(now + r.ttl));
      s.idempotency_key = r.idempotency_key;
      ASSIGN_OR_RETURN(
          int64_t changed,
          conn.Exec(
              "UPDATE sandboxes SET owner = $1, template_name = $2, ttl_ms = $3, "
              "idle_timeout_ms = $4, expires_ms = $5, last_activity_ms = $6, "
              "reap_after_ms = $7, created_ms = $6, updated_ms = $6, idempotency_key = $8 "
              "WHERE id = $9 AND owner = $10 AND state = $11",
              {r.owner.value(), r.template_name, Ms(s.ttl), Ms(s.idle_timeout), Ms(s.expires_at),
               Ms(now), ReapAfter(s), TextOrNull(r.idempotency_key), id.value(), from_owner.value(),
               std::string(ToString(SandboxState::kRunning))}));
      if (changed != 1) return Internal("the sandbox changed inside the transaction");
      RETURN_IF_ERROR(
          conn.Exec("DELETE FROM sandbox_metadata WHERE sandbox_id = $1", {id.value()}).status());
      RETURN_IF_ERROR(InsertMetadata(conn, id, r.metadata));
      nlohmann::json data = OwnerEventData(r);
      data["from_owner"] = from_owner.value();
      RETURN_IF_ERROR(InsertEvent(conn,
                                  AuditEvent{.sandbox = id,
                                             .actor = r.actor,
                                             .kind = AuditKind::kSandboxClaimed,
                                             .reason = "handed out by the warm pool",
                                             .data = std::move(data)},
                                  now)
                          .status());
      result.sandbox = std::move(s);
      result.created = true;
      return absl::OkStatus();
    });
    RETURN_IF_ERROR(tx, context);
    return result;
  }

  absl::StatusOr<CreateResult> DoCreate(const NewSandbox& r) {
    SandboxId id = r.id.empty() ? SandboxId::New() : r.id;
    std::string context = fmt::format("create sandbox {}", id.value());
    RETURN_IF_ERROR(ValidateNew(r), context);

    const absl::Time now = Now();
    SandboxRecord record{.id = id,
                         .state = SandboxState::kAllocating,
                         .owner = r.owner,
                         .spec = r.spec,
                         .template_name = r.template_name,
                         .image_digest = r.image_digest,
                         .metadata = r.metadata,
                         .ttl = absl::Milliseconds(Ms(r.ttl)),
                         .idle_timeout = absl::Milliseconds(Ms(r.idle_timeout)),
                         .expires_at = FromMs(Ms(now + r.ttl)),
                         .last_activity_at = now,
                         .created_at = now,
                         .updated_at = now,
                         .idempotency_key = r.idempotency_key,
                         .node = r.node};
    CreateResult result;
    absl::Status s = Write([&](SqlConnection& conn) -> absl::Status {
      ASSIGN_OR_RETURN(
          int64_t inserted,
          conn.Exec("INSERT INTO sandboxes (id, state, owner, spec, template_name, image_digest, "
                    "ttl_ms, idle_timeout_ms, expires_ms, last_activity_ms, reap_after_ms, "
                    "created_ms, updated_ms, idempotency_key, node_id, shim_pid, shim_socket, "
                    "cgroup_path, last_error) "
                    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $13, $14, "
                    "0, '', '', '') "
                    "ON CONFLICT (owner, idempotency_key) DO NOTHING",
                    {id.value(), std::string(ToString(record.state)), r.owner.value(),
                     DumpJson(r.spec), r.template_name, r.image_digest, Ms(record.ttl),
                     Ms(record.idle_timeout), Ms(record.expires_at), Ms(now), ReapAfter(record),
                     Ms(now), TextOrNull(r.idempotency_key), r.node.value()}));
      if (inserted == 0) {
        ASSIGN_OR_RETURN(std::optional<SandboxRecord> existing,
                         FindByKey(conn, r.owner, r.idempotency_key));
        if (!existing) {
          return absl::UnavailableError("idempotency key in use by a concurrent create");
        }
        result.sandbox = std::move(*existing);
        result.created = false;
        return absl::OkStatus();
      }
      RETURN_IF_ERROR(InsertMetadata(conn, id, r.metadata));
      RETURN_IF_ERROR(InsertEvent(conn,
                                  AuditEvent{.sandbox = id,
                                             .actor = r.actor,
                                             .kind = AuditKind::kStateTransition,
                                             .to = SandboxState::kAllocating,
                                             .reason = "created",
                                             .data = OwnerEventData(r)},
                                  now)
                          .status());
      result.sandbox = std::move(record);
      result.created = true;
      return absl::OkStatus();
    });
    RETURN_IF_ERROR(Duplicate(s, "sandbox", id.value()), context);
    return result;
  }

  absl::StatusOr<int64_t> DoCount(const std::vector<SandboxState>& states) {
    SqlParams params;
    std::string sql = "SELECT COUNT(*) FROM sandboxes";
    if (!states.empty()) {
      std::vector<SqlValue> names;
      for (SandboxState st : states) names.emplace_back(std::string(ToString(st)));
      sql += fmt::format(" WHERE state IN ({})", Placeholders(params, names));
    }
    int64_t count = 0;
    absl::Status tx = Read([&](SqlConnection& conn) -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<SqlRow> rows, conn.Query(sql, params));
      if (rows.empty()) return Internal("count sandboxes: no row");
      count = rows.front().Int(0);
      return absl::OkStatus();
    });
    RETURN_IF_ERROR(tx, "count sandboxes");
    return count;
  }

  absl::StatusOr<SandboxPage> DoList(const SandboxQuery& q) {
    if (q.limit < 1 || q.limit > kMaxPage) {
      return absl::InvalidArgumentError(
          fmt::format("list sandboxes: limit must be 1..{}, not {}", kMaxPage, q.limit));
    }
    SqlParams params;
    auto param = [&](SqlValue v) {
      params.push_back(std::move(v));
      return fmt::format("${}", params.size());
    };
    std::string where = "1 = 1";
    if (q.owner) where += fmt::format(" AND s.owner = {}", param(q.owner->value()));
    if (!q.states.empty()) {
      std::vector<SqlValue> names;
      for (SandboxState st : q.states) names.emplace_back(std::string(ToString(st)));
      where += fmt::format(" AND s.state IN ({})", Placeholders(params, names));
    }
    for (const auto& [key, value] : q.metadata) {
      std::string k = param(key);
      where += fmt::format(
          " AND EXISTS (SELECT 1 FROM sandbox_metadata m WHERE m.sandbox_id = s.id "
          "AND m.key = {} AND m.value = {})",
          k, param(value));
    }
    if (!q.cursor.empty()) {
      size_t dot = q.cursor.find('.');
      int64_t created_ms = 0;
      if (dot == std::string::npos || dot == 0 ||
          !absl::SimpleAtoi(absl::string_view(q.cursor.data(), dot), &created_ms)) {
        return absl::InvalidArgumentError("list sandboxes: malformed cursor");
      }
      std::string c = param(created_ms);
      where += fmt::format(" AND (s.created_ms > {} OR (s.created_ms = {} AND s.id > {}))", c, c,
                           param(q.cursor.substr(dot + 1)));
    }
    // One more than asked tells whether there is a next page.
    std::string sql =
        fmt::format("SELECT {} FROM sandboxes s WHERE {} ORDER BY s.created_ms, s.id LIMIT {}",
                    kSandboxColumns, where, param(int64_t{q.limit} + 1));
    SandboxPage page;
    absl::Status tx = Read([&](SqlConnection& conn) -> absl::Status {
      ASSIGN_OR_RETURN(page.sandboxes, LoadSandboxes(conn, sql, params));
      return absl::OkStatus();
    });
    RETURN_IF_ERROR(tx, "list sandboxes");
    if (page.sandboxes.size() > static_cast<size_t>(q.limit)) {
      page.sandboxes.resize(static_cast<size_t>(q.limit));
      const SandboxRecord& last = page.sandboxes.back();
      page.next_cursor = fmt::format("{}.{}", Ms(last.created_at), last.id.value());
    }
    return page;
  }

  absl::StatusOr<SandboxRecord> DoTransition(const TransitionRequest& r) {
    std::string context = fmt::format("transition sandbox {} to {}", r.id.value(), ToString(r.to));
    if (r.from.empty()) return absl::InvalidArgumentError(context + ": no expected state given");
    for (SandboxState from : r.from) {
      if (!IsAllowedTransition(from, r.to)) {
        return FailedPrecondition(fmt::format("{}: the lifecycle has no edge {} -> {}", context,
                                              ToString(from), ToString(r.to)));
      }
    }
    RETURN_IF_ERROR(RequireActor(r.actor), context);
    const absl::Time now = Now();
    SandboxRecord out;
    absl::Status tx = Write([&](SqlConnection& conn) -> absl::Status {
      ASSIGN_OR_RETURN(out, LoadSandbox(conn, r.id));
      const SandboxState current = out.state;
      if (std::find(r.from.begin(), r.from.end(), current) == r.from.end()) {
        return FailedPrecondition(
            fmt::format("sandbox is {}, not {}", ToString(current), StateNames(r.from)));
      }
      out.state = r.to;
      out.updated_at = now;
      if (r.error) out.last_error = *r.error;
      // The condition on the state keeps this a compare-and-set where the read above may be
      // stale (PostgreSQL, READ COMMITTED); under SQLite's write lock it always matches.
      ASSIGN_OR_RETURN(
          int64_t changed,
          conn.Exec("UPDATE sandboxes SET state = $1, updated_ms = $2, last_error = $3, "
                    "reap_after_ms = $4 WHERE id = $5 AND state = $6",
                    {std::string(ToString(r.to)), Ms(now), out.last_error, ReapAfter(out),
                     r.id.value(), std::string(ToString(current))}));
      if (changed == 0) {
        return FailedPrecondition(
            fmt::format("sandbox left {} during the transition", ToString(current)));
      }
      return InsertEvent(conn,
                         AuditEvent{.sandbox = r.id,
                                    .actor = r.actor,
                                    .kind = AuditKind::kStateTransition,
                                    .from = current,
                                    .to = r.to,
                                    .reason = r.reason,
                                    .data = r.data},
                         now)
          .status();
    });
    RETURN_IF_ERROR(tx, context);
    return out;
  }

  absl::Status DoTouch(const SandboxId& id, absl::Time at) {
    return Annotate(Write([&](SqlConnection& conn) { return TouchIn(conn, id, at); }),
                    fmt::format("touch sandbox {}", id.value()));
  }

  // Changes a live (non-terminal) sandbox in one transaction: `change` edits the record loaded in
  // it and writes the edit and its audit event through `conn`. Returns the record after it.
  absl::StatusOr<SandboxRecord> ChangeLive(
      const SandboxId& id, std::string_view actor, const std::string& context,
      absl::FunctionRef<absl::Status(SqlConnection&, SandboxRecord&, absl::Time now)> change) {
    RETURN_IF_ERROR(RequireActor(actor), context);
    const absl::Time now = Now();
    SandboxRecord out;
    absl::Status tx = Write([&](SqlConnection& conn) -> absl::Status {
      ASSIGN_OR_RETURN(out, LoadSandbox(conn, id));
      if (IsTerminal(out.state)) {
        return FailedPrecondition(fmt::format("sandbox is {}", ToString(out.state)));
      }
      return change(conn, out, now);
    });
    RETURN_IF_ERROR(tx, context);
    return out;
  }

  absl::StatusOr<SandboxRecord> DoUpdateSpec(const SandboxId& id, const nlohmann::json& spec,
                                             const AuditEvent& event) {
    return ChangeLive(
        id, event.actor, fmt::format("update the spec of sandbox {}", id.value()),
        [&](SqlConnection& conn, SandboxRecord& out, absl::Time now) -> absl::Status {
          out.spec = spec;
          out.updated_at = now;
          RETURN_IF_ERROR(conn.Exec("UPDATE sandboxes SET spec = $1, updated_ms = $2 WHERE id = $3",
                                    {DumpJson(spec), Ms(now), id.value()})
                              .status());
          AuditEvent e = event;
          e.sandbox = id;
          return InsertEvent(conn, e, now).status();
        });
  }

  absl::StatusOr<SandboxRecord> DoExtendTtl(const SandboxId& id, absl::Time expires_at,
                                            std::string_view actor) {
    return ChangeLive(
        id, actor, fmt::format("extend the TTL of sandbox {}", id.value()),
        [&](SqlConnection& conn, SandboxRecord& out, absl::Time now) -> absl::Status {
          const absl::Time previous = out.expires_at;
          out.expires_at = std::max(previous, FromMs(Ms(expires_at)));
          out.ttl = out.expires_at - out.created_at;
          out.updated_at = now;
          RETURN_IF_ERROR(
              conn.Exec("UPDATE sandboxes SET expires_ms = $1, ttl_ms = $2, "
                        "updated_ms = $3, reap_after_ms = $4 WHERE id = $5",
                        {Ms(out.expires_at), Ms(out.ttl), Ms(now), ReapAfter(out), id.value()})
                  .status());
          return InsertEvent(
                     conn,
                     AuditEvent{.sandbox = id,
                                .actor = std::string(actor),
                                .kind = AuditKind::kTtlExtended,
                                .data = {{"previous_expires_at", absl::FormatTime(previous)},
                                         {"expires_at", absl::FormatTime(out.expires_at)}}},
                     now)
              .status();
        });
  }

  absl::Status DoUpdateRuntime(const SandboxId& id, const RuntimeInfo& rt) {
    return Annotate(
        Write([&](SqlConnection& conn) -> absl::Status {
          ASSIGN_OR_RETURN(
              int64_t changed,
              conn.Exec("UPDATE sandboxes SET shim_pid = $1, shim_socket = $2, "
                        "cgroup_path = $3, updated_ms = $4 WHERE id = $5",
                        {rt.shim_pid, rt.shim_socket, rt.cgroup_path, Ms(Now()), id.value()}));
          if (changed == 0) return RequireSandbox(conn, id);
          return absl::OkStatus();
        }),
        fmt::format("update the runtime of sandbox {}", id.value()));
  }

  absl::StatusOr<std::vector<SandboxRecord>> DoListExpired(absl::Time now, int limit) {
    if (limit < 1 || limit > kMaxPage) {
      return absl::InvalidArgumentError(
          fmt::format("list expired sandboxes: limit must be 1..{}, not {}", kMaxPage, limit));
    }
    static const std::string* sql =
        new std::string(fmt::format("SELECT {} FROM sandboxes WHERE reap_after_ms <= $1 "
                                    "ORDER BY reap_after_ms, id LIMIT $2",
                                    kSandboxColumns));
    std::vector<SandboxRecord> out;
    absl::Status tx = Read([&](SqlConnection& conn) -> absl::Status {
      ASSIGN_OR_RETURN(out, LoadSandboxes(conn, *sql, {Ms(now), int64_t{limit}}));
      return absl::OkStatus();
    });
    RETURN_IF_ERROR(tx, "list expired sandboxes");
    return out;
  }

  // Audit -----------------------------------------------------------------------------------

  absl::StatusOr<std::vector<AuditEvent>> DoListEvents(const AuditQuery& q) {
    if (q.limit < 1 || q.limit > kMaxAuditPage) {
      return absl::InvalidArgumentError(
          fmt::format("list audit events: limit must be 1..{}, not {}", kMaxAuditPage, q.limit));
    }
    SqlParams params = {q.after_seq};
    std::string where = "seq > $1";
    if (q.until_seq > 0) {
      params.emplace_back(q.until_seq);
      where += fmt::format(" AND seq <= ${}", params.size());
    }
    if (q.sandbox) {
      params.emplace_back(q.sandbox->value());
      where += fmt::format(" AND sandbox_id = ${}", params.size());
    }
    params.emplace_back(int64_t{q.limit});
    ASSIGN_OR_RETURN(
        std::vector<AuditEvent> events,
        ReadAll<AuditEvent>(fmt::format("SELECT {} FROM audit_events WHERE {} ORDER BY seq "
                                        "LIMIT ${}",
                                        kEventColumns, where, params.size()),
                            params, EventFromRow),
        "list audit events");
    return events;
  }

  // Commands --------------------------------------------------------------------------------

  absl::Status DoPutCommand(const CommandRecord& c, std::string_view actor) {
    std::string context = fmt::format("put command {}", c.id.value());
    if (c.id.empty() || c.sandbox.empty()) {
      return absl::InvalidArgumentError(context + ": command or sandbox id is empty");
    }
    if (c.argv.empty()) return absl::InvalidArgumentError(context + ": argv is empty");
    RETURN_IF_ERROR(RequireActor(actor), context);
    const absl::Time now = Now();
    absl::Status s = Write([&](SqlConnection& conn) -> absl::Status {
      // Also checks that the sandbox exists.
      RETURN_IF_ERROR(TouchIn(conn, c.sandbox, now));
      nlohmann::json argv = c.argv;
      RETURN_IF_ERROR(
          conn.Exec("INSERT INTO commands (id, sandbox_id, argv, background, state, started_ms) "
                    "VALUES ($1, $2, $3, $4, $5, $6)",
                    {c.id.value(), c.sandbox.value(), DumpJson(argv), int64_t{c.background},
                     std::string(ToString(CommandState::kRunning)), Ms(now)})
              .status());
      return InsertEvent(conn,
                         AuditEvent{.sandbox = c.sandbox,
                                    .actor = std::string(actor),
                                    .kind = AuditKind::kExec,
                                    .data = {{"command_id", c.id.value()},
                                             {"argv", std::move(argv)},
                                             {"background", c.background}}},
                         now)
          .status();
    });
    return Annotate(Duplicate(s, "command", c.id.value()), context);
  }

  absl::StatusOr<CommandRecord> DoFinishCommand(const CommandId& id, CommandState state,
                                                const nlohmann::json& result) {
    std::string context = fmt::format("finish command {}", id.value());
    if (state == CommandState::kRunning) {
      return absl::InvalidArgumentError(context + ": the final state cannot be running");
    }
    absl::StatusOr<SqlRow> row = absl::UnknownError("");
    const absl::Time now = Now();
    absl::Status tx = Write([&](SqlConnection& conn) -> absl::Status {
      ASSIGN_OR_RETURN(
          int64_t changed,
          conn.Exec("UPDATE commands SET state = $1, finished_ms = $2, result = $3 "
                    "WHERE id = $4 AND state = 'running'",
                    {std::string(ToString(state)), Ms(now), DumpJson(result), id.value()}));
      row = One(conn, fmt::format("SELECT {} FROM commands WHERE id = $1", kCommandColumns),
                {id.value()}, "command", id.value());
      if (!row.ok()) return row.status();
      if (changed == 0) {
        return FailedPrecondition(fmt::format("command is {}, not running", row->Text(4)));
      }
      return TouchIn(conn, SandboxId(row->Text(1)), now);
    });
    RETURN_IF_ERROR(tx, context);
    ASSIGN_OR_RETURN(CommandRecord command, CommandFromRow(*row), context);
    return command;
  }

  // API keys --------------------------------------------------------------------------------

  absl::StatusOr<NewApiKey> DoCreateApiKey(std::string_view name, std::string_view actor) {
    if (name.empty() || name.size() > 200) {
      return absl::InvalidArgumentError("create API key: the name must have 1-200 characters");
    }
    RETURN_IF_ERROR(RequireActor(actor), "create API key");
    const absl::Time now = Now();
    NewApiKey out;
    out.key = ApiKey{.id = ApiKeyId::New(), .name = std::string(name), .created_at = now};
    const std::string secret = RandomHex(32);
    const std::string salt = RandomHex(16);
    out.token = FormatToken(out.key.id, secret);
    absl::Status tx = Write([&](SqlConnection& conn) -> absl::Status {
      RETURN_IF_ERROR(
          conn.Exec("INSERT INTO api_keys (id, name, salt, secret_hash, created_ms) "
                    "VALUES ($1, $2, $3, $4, $5)",
                    {out.key.id.value(), out.key.name, salt, HashSecret(salt, secret), Ms(now)})
              .status());
      return InsertEvent(
                 conn,
                 AuditEvent{.actor = std::string(actor),
                            .kind = AuditKind::kApiKeyCreated,
                            .data = {{"key_id", out.key.id.value()}, {"name", out.key.name}}},
                 now)
          .status();
    });
    RETURN_IF_ERROR(tx, fmt::format("create API key {}", out.key.id.value()));
    return out;
  }

  absl::StatusOr<ApiKey> DoAuthenticate(std::string_view token) {
    ASSIGN_OR_RETURN(ParsedToken parsed, ParseToken(token));
    absl::StatusOr<std::vector<SqlRow>> rows;
    absl::Status tx = Read([&](SqlConnection& conn) {
      rows = conn.Query(fmt::format("SELECT {} FROM api_keys WHERE id = $1", kApiKeyColumns),
                        {parsed.id.value()});
      return rows.status();
    });
    RETURN_IF_ERROR(tx, fmt::format("authenticate API key {}", parsed.id.value()));
    if (rows->empty()) {
      return absl::UnauthenticatedError(fmt::format("unknown API key {}", parsed.id.value()));
    }
    const SqlRow& row = rows->front();
    if (!SecretMatches(row.Text(5), parsed.secret, row.Text(6))) {
      return absl::UnauthenticatedError(fmt::format("API key {}: wrong secret", parsed.id.value()));
    }
    ApiKey key = ApiKeyFromRow(row);
    if (key.revoked_at) {
      return absl::UnauthenticatedError(fmt::format("API key {} is revoked", parsed.id.value()));
    }
    // last_used_at is a hint for operators: written at most once a minute, so that
    // authentication stays a read, and a busy database does not fail the request.
    const absl::Time now = Now();
    if (!key.last_used_at || now - *key.last_used_at >= kLastUsedGranularity) {
      absl::Status s = Write([&](SqlConnection& conn) {
        return conn
            .Exec(
                "UPDATE api_keys SET last_used_ms = $1 WHERE id = $2 "
                "AND (last_used_ms IS NULL OR last_used_ms <= $3)",
                {Ms(now), key.id.value(), Ms(now - kLastUsedGranularity)})
            .status();
      });
      if (s.ok()) {
        key.last_used_at = now;
      } else {
        GetLogger("store").Warn("recording API key use failed",
                                {{"key", key.id.value()}, {"error", Message(s)}});
      }
    }
    return key;
  }

  absl::Status DoRevokeApiKey(const ApiKeyId& id, std::string_view actor) {
    std::string context = fmt::format("revoke API key {}", id.value());
    RETURN_IF_ERROR(RequireActor(actor), context);
    const absl::Time now = Now();
    return Annotate(Write([&](SqlConnection& conn) -> absl::Status {
                      ASSIGN_OR_RETURN(int64_t changed,
                                       conn.Exec("UPDATE api_keys SET revoked_ms = $1 "
                                                 "WHERE id = $2 AND revoked_ms IS NULL",
                                                 {Ms(now), id.value()}));
                      if (changed == 0) {
                        RETURN_IF_ERROR(One(conn, "SELECT 1 FROM api_keys WHERE id = $1",
                                            {id.value()}, "API key", id.value())
                                            .status());
                        return FailedPrecondition("the key is revoked already");
                      }
                      return InsertEvent(conn,
                                         AuditEvent{.actor = std::string(actor),
                                                    .kind = AuditKind::kApiKeyRevoked,
                                                    .data = {{"key_id", id.value()}}},
                                         now)
                          .status();
                    }),
                    context);
  }

  // Artifacts -------------------------------------------------------------------------------

  absl::Status DoPutArtifact(const ArtifactRecord& a, std::string_view actor) {
    std::string context = fmt::format("put artifact {}", a.id.value());
    if (a.id.empty() || a.sandbox.empty()) {
      return absl::InvalidArgumentError(context + ": artifact or sandbox id is empty");
    }
    if (a.size < 0) return absl::InvalidArgumentError(context + ": negative size");
    RETURN_IF_ERROR(RequireActor(actor), context);
    const absl::Time now = Now();
    absl::Status s = Write([&](SqlConnection& conn) -> absl::Status {
      RETURN_IF_ERROR(RequireSandbox(conn, a.sandbox));
      RETURN_IF_ERROR(conn.Exec("INSERT INTO artifacts (id, sandbox_id, path, size_bytes, sha256, "
                                "status, reason, blob_key, created_ms) "
                                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                                {a.id.value(), a.sandbox.value(), a.path, a.size, a.sha256,
                                 std::string(ToString(a.status)), a.reason, a.blob_key, Ms(now)})
                          .status());
      return InsertEvent(conn,
                         AuditEvent{.sandbox = a.sandbox,
                                    .actor = std::string(actor),
                                    .kind = a.status == ArtifactStatus::kReleased
                                                ? AuditKind::kArtifactReleased
                                                : AuditKind::kArtifactQuarantined,
                                    .reason = a.reason,
                                    .data = {{"artifact_id", a.id.value()},
                                             {"path", a.path},
                                             {"size", a.size},
                                             {"sha256", a.sha256},
                                             {"blob_key", a.blob_key}}},
                         now)
          .status();
    });
    return Annotate(Duplicate(s, "artifact", a.id.value()), context);
  }

  // Interpreter sessions --------------------------------------------------------------------

  absl::StatusOr<InterpSession> DoPutInterp(const InterpSession& session) {
    std::string context = fmt::format("put interpreter session {}", session.id.value());
    if (session.id.empty() || session.owner.empty()) {
      return absl::InvalidArgumentError(context + ": session id or owner is empty");
    }
    InterpSession out = session;
    out.version = 1;
    out.created_at = out.updated_at = Now();
    absl::Status s = Write([&](SqlConnection& conn) {
      return conn
          .Exec(
              "INSERT INTO interp_sessions (id, owner, state, snapshot_blob, console_output, "
              "version, created_ms, updated_ms) VALUES ($1, $2, $3, $4, $5, 1, $6, $6)",
              {out.id.value(), out.owner.value(), out.state, out.snapshot_blob, out.console_output,
               Ms(out.created_at)})
          .status();
    });
    RETURN_IF_ERROR(Duplicate(s, "interpreter session", out.id.value()), context);
    return out;
  }

  absl::StatusOr<InterpSession> DoUpdateInterp(const InterpSession& session) {
    std::string context = fmt::format("update interpreter session {}", session.id.value());
    absl::StatusOr<SqlRow> row = absl::UnknownError("");
    absl::Status tx = Write([&](SqlConnection& conn) -> absl::Status {
      ASSIGN_OR_RETURN(int64_t changed,
                       conn.Exec("UPDATE interp_sessions SET state = $1, snapshot_blob = $2, "
                                 "console_output = $3, version = version + 1, updated_ms = $4 "
                                 "WHERE id = $5 AND version = $6",
                                 {session.state, session.snapshot_blob, session.console_output,
                                  Ms(Now()), session.id.value(), session.version}));
      row = One(conn, fmt::format("SELECT {} FROM interp_sessions WHERE id = $1", kInterpColumns),
                {session.id.value()}, "interpreter session", session.id.value());
      if (!row.ok()) return row.status();
      if (changed == 0) {
        return FailedPrecondition(
            fmt::format("the session is at version {}, not {}", row->Int(5), session.version));
      }
      return absl::OkStatus();
    });
    RETURN_IF_ERROR(tx, context);
    return InterpFromRow(*row);
  }

  const std::unique_ptr<SqlDatabase> db_;
  const StoreOptions options_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenSqlStore(std::unique_ptr<SqlDatabase> db,
                                                    std::span<const Migration> migrations,
                                                    StoreOptions options) {
  absl::Time now = options.clock ? options.clock() : absl::Now();
  RETURN_IF_ERROR(Migrate(*db, migrations, now));
  return std::make_unique<SqlStore>(std::move(db), std::move(options));
}

}  // namespace airlock::store::internal
