#include "store/sqlite_store.h"

#include "common/files.h"
#include "common/status.h"
#include "fmt/format.h"
#include "store/internal/schema.h"
#include "store/internal/sql_store.h"
#include "store/internal/sqlite_db.h"

namespace airlock::store {

absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStoreFile(const std::string& path,
                                                           const SqliteStoreOptions& options) {
  std::string context = fmt::format("open store {}", path);
  ASSIGN_OR_RETURN(std::unique_ptr<internal::SqlDatabase> db,
                   internal::OpenSqliteDatabase(path, options), context);
  ASSIGN_OR_RETURN(
      std::unique_ptr<Store> store,
      internal::OpenSqlStore(std::move(db), internal::SqliteMigrations(), options.store), context);
  return store;
}

absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(const std::string& data_dir,
                                                       const SqliteStoreOptions& options) {
  RETURN_IF_ERROR(MakeDirs(data_dir, 0700), "open store");
  return OpenSqliteStoreFile(fmt::format("{}/{}", data_dir, kSqliteFileName), options);
}

}  // namespace airlock::store
