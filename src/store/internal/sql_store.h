// The Store on a SQL database (internal/sql.h): all of the Store's logic, written once for
// SQLite and PostgreSQL. Every compare-and-set is a conditional UPDATE (or INSERT ... ON
// CONFLICT DO NOTHING) whose row count decides, so the logic holds under SQLite's serialized
// writers and under PostgreSQL's READ COMMITTED alike. Thread-safe (see store.h).
#ifndef AIRLOCK_STORE_INTERNAL_SQL_STORE_H_
#define AIRLOCK_STORE_INTERNAL_SQL_STORE_H_

#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "store/internal/schema.h"
#include "store/internal/sql.h"
#include "store/store.h"

namespace airlock::store::internal {

// Migrates `db` to the newest of `migrations` and returns the Store on it.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Store>> OpenSqlStore(
    std::unique_ptr<SqlDatabase> db, std::span<const Migration> migrations, StoreOptions options);

}  // namespace airlock::store::internal

#endif  // AIRLOCK_STORE_INTERNAL_SQL_STORE_H_
