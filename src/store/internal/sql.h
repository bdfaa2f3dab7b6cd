// The small SQL driver interface that SqlStore (internal/sql_store.h) runs on. SQLite
// (internal/sqlite_db.h) implements it now; a PostgreSQL driver (libpq) is the second one.
//
// Statements are written once, in the SQL both databases accept: parameters are $1..$N (native
// in PostgreSQL; named parameters in SQLite), INSERT ... ON CONFLICT ... DO NOTHING, RETURNING,
// and only TEXT and BIGINT values (booleans as 0/1, times as Unix milliseconds, JSON as text).
// Only the schema (internal/schema.h) is written per database.
#ifndef AIRLOCK_STORE_INTERNAL_SQL_H_
#define AIRLOCK_STORE_INTERNAL_SQL_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace airlock::store::internal {

// NULL, a BIGINT or a TEXT.
using SqlValue = std::variant<std::monostate, int64_t, std::string>;

class SqlRow {
 public:
  explicit SqlRow(std::vector<SqlValue> values) : values_(std::move(values)) {}

  size_t size() const { return values_.size(); }
  bool IsNull(size_t i) const { return std::holds_alternative<std::monostate>(values_.at(i)); }
  // The value of column i; NULL or a value of the other type reads as 0 or "".
  int64_t Int(size_t i) const;
  const std::string& Text(size_t i) const;
  const SqlValue& Value(size_t i) const { return values_.at(i); }

 private:
  std::vector<SqlValue> values_;
};

using SqlParams = std::vector<SqlValue>;

enum class TxKind {
  kRead,   // a consistent snapshot for several reads
  kWrite,  // takes the write lock at BEGIN (SQLite: BEGIN IMMEDIATE), so it never deadlocks
};

// One connection, used by one thread at a time. Errors are mapped to the codes of store.h
// (unique violation -> AlreadyExists, foreign key -> FailedPrecondition, busy -> Unavailable).
class SqlConnection {
 public:
  virtual ~SqlConnection() = default;

  [[nodiscard]] virtual absl::StatusOr<std::vector<SqlRow>> Query(std::string_view sql,
                                                                  const SqlParams& params) = 0;
  // Returns the number of rows changed.
  [[nodiscard]] virtual absl::StatusOr<int64_t> Exec(std::string_view sql,
                                                     const SqlParams& params) = 0;
  // Runs a script of statements without parameters (schema migrations).
  [[nodiscard]] virtual absl::Status ExecScript(std::string_view sql) = 0;

  // A write transaction also holds the process-wide writer lock of its database until Commit or
  // Rollback, so the writers of one process queue instead of polling the database lock.
  [[nodiscard]] virtual absl::Status Begin(TxKind kind) = 0;
  [[nodiscard]] virtual absl::Status Commit() = 0;
  // Never fails in a way the caller could act on; errors are logged.
  virtual void Rollback() = 0;
};

// A pool of connections to one database. Thread-safe.
class SqlDatabase {
 public:
  virtual ~SqlDatabase() = default;

  // A connection for the calling thread, returned to the pool when the lease is destroyed.
  // Waits while every connection is in use.
  class Lease {
   public:
    Lease(SqlDatabase* db, std::unique_ptr<SqlConnection> conn) : db_(db), conn_(std::move(conn)) {}
    Lease(Lease&&) = default;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (conn_) db_->Release(std::move(conn_));
    }
    SqlConnection& operator*() const { return *conn_; }
    SqlConnection* operator->() const { return conn_.get(); }

   private:
    SqlDatabase* db_;
    std::unique_ptr<SqlConnection> conn_;
  };

  [[nodiscard]] virtual absl::StatusOr<Lease> Acquire() = 0;

 protected:
  virtual void Release(std::unique_ptr<SqlConnection> conn) = 0;
};

// Runs `body` in one transaction on a pooled connection: commits when it returns OK, rolls back
// otherwise (and when the commit fails). `body` must not acquire another connection.
[[nodiscard]] absl::Status InTransaction(SqlDatabase& db, TxKind kind,
                                         absl::FunctionRef<absl::Status(SqlConnection&)> body);

}  // namespace airlock::store::internal

#endif  // AIRLOCK_STORE_INTERNAL_SQL_H_
