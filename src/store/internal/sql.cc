#include "store/internal/sql.h"

namespace airlock::store::internal {

int64_t SqlRow::Int(size_t i) const {
  const auto* v = std::get_if<int64_t>(&values_.at(i));
  return v != nullptr ? *v : 0;
}

const std::string& SqlRow::Text(size_t i) const {
  static const std::string* empty = new std::string;
  const auto* v = std::get_if<std::string>(&values_.at(i));
  return v != nullptr ? *v : *empty;
}

absl::Status InTransaction(SqlDatabase& db, TxKind kind,
                           absl::FunctionRef<absl::Status(SqlConnection&)> body) {
  absl::StatusOr<SqlDatabase::Lease> lease = db.Acquire();
  if (!lease.ok()) return lease.status();
  SqlConnection& conn = **lease;
  if (absl::Status s = conn.Begin(kind); !s.ok()) return s;
  absl::Status s = body(conn);
  if (s.ok()) s = conn.Commit();
  if (!s.ok()) conn.Rollback();
  return s;
}

}  // namespace airlock::store::internal
