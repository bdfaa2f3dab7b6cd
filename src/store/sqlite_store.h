// The Store on SQLite: the embedded default (`airlockd --role all --data-dir DIR` keeps
// everything in DIR/airlock.db). docs/store.md describes the schema and its migrations.
//
// The database runs in WAL mode (readers never wait for the writer), with foreign keys on, and
// every write transaction starts with BEGIN IMMEDIATE, so several Store objects and several
// processes may use one file at once: a writer that finds the file locked by another process
// waits up to `busy_timeout` and then fails with Unavailable. Within one process, writers queue
// on a lock shared by every Store open on the same file instead of polling SQLite's lock.
// A filesystem on which WAL mode cannot be enabled is an error, not a fallback.
#ifndef AIRLOCK_STORE_SQLITE_STORE_H_
#define AIRLOCK_STORE_SQLITE_STORE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/store.h"

namespace airlock::store {

// When a committed transaction reaches the disk (SQLite's `synchronous` setting in WAL mode).
enum class SqliteDurability {
  // synchronous=NORMAL: the WAL is synced at checkpoints (on a background thread), not at each
  // commit. A committed transaction survives the crash or kill -9 of any process; a power
  // failure or kernel crash may lose the last transactions (never corrupting the file). A
  // commit costs ~0.1 ms instead of an fsync (~4 ms on the development host's disk).
  kSyncAtCheckpoint,
  // synchronous=FULL: every commit is synced; a committed transaction also survives a power
  // failure.
  kSyncEveryCommit,
};

struct SqliteStoreOptions {
  StoreOptions store;
  absl::Duration busy_timeout = absl::Seconds(5);
  int max_connections = 8;  // readers run in parallel; writers take turns
  SqliteDurability durability = SqliteDurability::kSyncAtCheckpoint;
};

// The database file inside a data directory.
inline constexpr std::string_view kSqliteFileName = "airlock.db";

// Opens DIR/airlock.db, creating DIR (mode 0700) and the file (mode 0600) when absent, and
// brings its schema to the newest version. FailedPrecondition when the file's schema is newer
// than this build knows; Unavailable when another process holds the file locked beyond the
// busy timeout.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(
    const std::string& data_dir, const SqliteStoreOptions& options = {});

// The same on a database file named directly (its directory must exist).
[[nodiscard]] absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStoreFile(
    const std::string& path, const SqliteStoreOptions& options = {});

}  // namespace airlock::store

#endif  // AIRLOCK_STORE_SQLITE_STORE_H_
