#include "store/internal/schema.h"

#include "common/status.h"
#include "fmt/format.h"

namespace airlock::store::internal {
namespace {

constexpr std::string_view kMigrationsTable = R"sql(
CREATE TABLE IF NOT EXISTS schema_migrations (
  version BIGINT NOT NULL PRIMARY KEY,
  name TEXT NOT NULL,
  applied_ms BIGINT NOT NULL
);
)sql";

// Version 1. Types are the ones PostgreSQL has too (TEXT, BIGINT); times are Unix milliseconds,
// JSON is text. Only AUTOINCREMENT and the triggers are SQLite's own.
constexpr std::string_view kSqliteV1 = R"sql(
CREATE TABLE sandboxes (
  id TEXT NOT NULL PRIMARY KEY,
  state TEXT NOT NULL,
  owner TEXT NOT NULL,
  spec TEXT NOT NULL,
  template_name TEXT NOT NULL,
  image_digest TEXT NOT NULL,
  ttl_ms BIGINT NOT NULL,
  idle_timeout_ms BIGINT NOT NULL,
  expires_ms BIGINT NOT NULL,
  last_activity_ms BIGINT NOT NULL,
  -- When the reaper should look at the sandbox: the earlier of its expiry and its idle
  -- deadline; NULL once the sandbox is terminal.
  reap_after_ms BIGINT,
  created_ms BIGINT NOT NULL,
  updated_ms BIGINT NOT NULL,
  idempotency_key TEXT,
  node_id TEXT NOT NULL,
  shim_pid BIGINT NOT NULL,
  shim_socket TEXT NOT NULL,
  cgroup_path TEXT NOT NULL,
  last_error TEXT NOT NULL,
  UNIQUE (owner, idempotency_key)
);
-- Every index is a page more to write per create; listing by owner uses the unique index above.
CREATE INDEX sandboxes_by_created ON sandboxes (created_ms, id);
CREATE INDEX sandboxes_by_reap_after ON sandboxes (reap_after_ms);

CREATE TABLE sandbox_metadata (
  sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
  key TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (sandbox_id, key)
);
CREATE INDEX sandbox_metadata_by_pair ON sandbox_metadata (key, value);

CREATE TABLE audit_events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  time_ms BIGINT NOT NULL,
  sandbox_id TEXT NOT NULL,
  actor TEXT NOT NULL,
  kind TEXT NOT NULL,
  from_state TEXT,
  to_state TEXT,
  reason TEXT NOT NULL,
  data TEXT NOT NULL
);
CREATE INDEX audit_events_by_sandbox ON audit_events (sandbox_id, seq);
CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events
BEGIN
  SELECT RAISE(ABORT, 'audit events are append-only');
END;
CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events
BEGIN
  SELECT RAISE(ABORT, 'audit events are append-only');
END;

CREATE TABLE commands (
  id TEXT NOT NULL PRIMARY KEY,
  sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
  argv TEXT NOT NULL,
  background BIGINT NOT NULL,
  state TEXT NOT NULL,
  started_ms BIGINT NOT NULL,
  finished_ms BIGINT,
  result TEXT
);
CREATE INDEX commands_by_sandbox ON commands (sandbox_id, started_ms, id);

CREATE TABLE api_keys (
  id TEXT NOT NULL PRIMARY KEY,
  name TEXT NOT NULL,
  salt TEXT NOT NULL,
  secret_hash TEXT NOT NULL,
  created_ms BIGINT NOT NULL,
  revoked_ms BIGINT,
  last_used_ms BIGINT
);

CREATE TABLE artifacts (
  id TEXT NOT NULL PRIMARY KEY,
  sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
  path TEXT NOT NULL,
  size_bytes BIGINT NOT NULL,
  sha256 TEXT NOT NULL,
  status TEXT NOT NULL,
  reason TEXT NOT NULL,
  blob_key TEXT NOT NULL,
  created_ms BIGINT NOT NULL
);
CREATE INDEX artifacts_by_sandbox ON artifacts (sandbox_id, created_ms, id);

CREATE TABLE interp_sessions (
  id TEXT NOT NULL PRIMARY KEY,
  owner TEXT NOT NULL,
  state TEXT NOT NULL,
  snapshot_blob TEXT NOT NULL,
  console_output TEXT NOT NULL,
  version BIGINT NOT NULL,
  created_ms BIGINT NOT NULL,
  updated_ms BIGINT NOT NULL
);
)sql";

// Version 2: the density limit counts live sandboxes on every create; without this index that
// count read every sandbox the node ever had.
constexpr std::string_view kSqliteV2 = R"sql(
CREATE INDEX sandboxes_by_state ON sandboxes (state);
)sql";

constexpr Migration kSqlite[] = {
    {1, "initial schema", kSqliteV1},
    {2, "index sandboxes by state", kSqliteV2},
};

}  // namespace

std::span<const Migration> SqliteMigrations() { return kSqlite; }

absl::StatusOr<int64_t> SchemaVersion(SqlConnection& conn) {
  ASSIGN_OR_RETURN(std::vector<SqlRow> rows,
                   conn.Query("SELECT MAX(version) FROM schema_migrations", {}));
  return rows.empty() ? 0 : rows[0].Int(0);
}

absl::Status Migrate(SqlDatabase& db, std::span<const Migration> migrations, absl::Time now) {
  const int64_t latest = migrations.empty() ? 0 : migrations.back().version;
  auto check_not_newer = [&](int64_t version) -> absl::Status {
    if (version <= latest) return absl::OkStatus();
    return FailedPrecondition(
        fmt::format("the database has schema version {}, newer than the {} this build knows "
                    "(written by a newer airlock)",
                    version, latest));
  };
  // The common case, a database that is up to date, needs no write lock. (A new database has
  // no schema_migrations table yet, so an error here only means "migrate".)
  absl::StatusOr<int64_t> current = absl::UnknownError("");
  (void)InTransaction(db, TxKind::kRead, [&](SqlConnection& conn) {
    current = SchemaVersion(conn);
    return current.status();
  });
  if (current.ok()) {
    RETURN_IF_ERROR(check_not_newer(*current));
    if (*current == latest) return absl::OkStatus();
  }

  for (const Migration& m : migrations) {
    absl::Status s = InTransaction(db, TxKind::kWrite, [&](SqlConnection& conn) -> absl::Status {
      RETURN_IF_ERROR(conn.ExecScript(kMigrationsTable));
      ASSIGN_OR_RETURN(int64_t version, SchemaVersion(conn));
      RETURN_IF_ERROR(check_not_newer(version));
      if (version >= m.version) return absl::OkStatus();  // another process was first
      if (version != m.version - 1) {
        return Internal(fmt::format("migration {} cannot follow version {}", m.version, version));
      }
      RETURN_IF_ERROR(conn.ExecScript(m.sql));
      SqlParams row = {m.version, std::string(m.name), absl::ToUnixMillis(now)};
      return conn
          .Exec("INSERT INTO schema_migrations (version, name, applied_ms) VALUES ($1, $2, $3)",
                row)
          .status();
    });
    RETURN_IF_ERROR(s, fmt::format("schema migration {} ({})", m.version, m.name));
  }
  return absl::OkStatus();
}

}  // namespace airlock::store::internal
