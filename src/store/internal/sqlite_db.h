// The SQLite driver of internal/sql.h: a pool of connections to one database file, each with its
// own prepared-statement cache. See store/sqlite_store.h for the behaviour callers see.
#ifndef AIRLOCK_STORE_INTERNAL_SQLITE_DB_H_
#define AIRLOCK_STORE_INTERNAL_SQLITE_DB_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "store/internal/sql.h"
#include "store/sqlite_store.h"

namespace airlock::store::internal {

// Opens one connection right away (so a bad path, a foreign file or a filesystem without WAL
// fails here), more on demand up to options.max_connections.
[[nodiscard]] absl::StatusOr<std::unique_ptr<SqlDatabase>> OpenSqliteDatabase(
    const std::string& path, const SqliteStoreOptions& options);

}  // namespace airlock::store::internal

#endif  // AIRLOCK_STORE_INTERNAL_SQLITE_DB_H_
