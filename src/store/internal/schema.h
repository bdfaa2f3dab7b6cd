// The database schema as an ordered list of migrations, and the runner that applies them.
//
// A database records every migration applied to it in `schema_migrations` (version, name,
// applied_ms); its schema version is the largest version there. Migrations are never edited
// once released: a change of schema is a new migration at the end of the list. The schema is
// the only SQL written per database (the statements of sql_store.cc are shared).
#ifndef AIRLOCK_STORE_INTERNAL_SCHEMA_H_
#define AIRLOCK_STORE_INTERNAL_SCHEMA_H_

#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/internal/sql.h"

namespace airlock::store::internal {

struct Migration {
  int64_t version;  // 1, 2, 3, ... without gaps
  std::string_view name;
  std::string_view sql;  // a script of statements
};

// The SQLite schema.
std::span<const Migration> SqliteMigrations();

// Applies the migrations newer than the database's version, each in its own write transaction
// together with its schema_migrations row, so a failed migration leaves the database at the
// version before it and concurrent openers apply each migration once. FailedPrecondition when
// the database's version is newer than the last of `migrations` (written by a newer airlock).
[[nodiscard]] absl::Status Migrate(SqlDatabase& db, std::span<const Migration> migrations,
                                   absl::Time now);

// The database's schema version; 0 for a database no migration ran on.
[[nodiscard]] absl::StatusOr<int64_t> SchemaVersion(SqlConnection& conn);

}  // namespace airlock::store::internal

#endif  // AIRLOCK_STORE_INTERNAL_SCHEMA_H_
