// What only the SQLite store does: the file and its modes, WAL mode, the busy timeout, the
// append-only audit table, schema migrations. The behaviour every Store shares is in
// store_contract_test.cc.
#include "store/sqlite_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <string>
#include <thread>
#include <vector>

#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/internal/schema.h"
#include "store/internal/sqlite_db.h"
#include "store/test_util.h"

namespace airlock::store {
namespace {

using test::TempDir;
using ::testing::HasSubstr;

// A plain SQLite connection beside the store's, as another program would open the file.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
    sqlite3_busy_timeout(db_, 5000);
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  // Runs `sql`; returns "" or the error message.
  std::string Exec(const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
    std::string msg = rc == SQLITE_OK ? "" : (err != nullptr ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    return msg;
  }

  // The first column of the first row of `sql` as text.
  std::string Value(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK) << sql;
    std::string out;
    if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

std::unique_ptr<Store> MustOpen(const std::string& dir, SqliteStoreOptions options = {}) {
  auto store = OpenSqliteStore(dir, options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

NewSandbox Request() {
  return NewSandbox{.owner = ApiKeyId("ak-owner000001"), .node = NodeId("n"), .actor = "test"};
}

TEST(SqliteStoreTest, CreatesTheDataDirectoryAndAPrivateDatabaseInWalMode) {
  TempDir tmp;
  std::string dir = tmp.path() + "/data/airlock";
  ASSERT_NE(MustOpen(dir), nullptr);
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  std::string db = dir + "/airlock.db";
  ASSERT_EQ(::stat(db.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  RawDb raw(db);
  EXPECT_EQ(raw.Value("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.Value("SELECT MAX(version) FROM schema_migrations"),
            std::to_string(internal::SqliteMigrations().back().version));
}

// Someone with the database file tries to rewrite history: the schema refuses.
TEST(SqliteStoreTest, AuditEventsCannotBeUpdatedOrDeleted) {
  TempDir tmp;
  auto store = MustOpen(tmp.path());
  ASSERT_OK(store->CreateSandbox(Request()).status());
  RawDb raw(tmp.path() + "/airlock.db");
  EXPECT_THAT(raw.Exec("DELETE FROM audit_events"), HasSubstr("append-only"));
  EXPECT_THAT(raw.Exec("UPDATE audit_events SET actor = 'nobody'"), HasSubstr("append-only"));
  EXPECT_EQ(raw.Value("SELECT COUNT(*) FROM audit_events WHERE actor = 'test'"), "1");
}

// The token's secret is nowhere in the files, only its salted hash.
TEST(SqliteStoreTest, ApiKeySecretsAreNotStored) {
  TempDir tmp;
  auto store = MustOpen(tmp.path());
  ASSERT_OK_AND_ASSIGN(NewApiKey key, store->CreateApiKey("k", "admin"));
  std::string secret = key.token.substr(16);
  ASSERT_EQ(secret.size(), 64u);
  std::string files;
  for (const char* name : {"/airlock.db", "/airlock.db-wal"}) {
    auto data = ReadFile(tmp.path() + name);
    if (data.ok()) files += *data;
  }
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(files.find(secret), std::string::npos);
  EXPECT_EQ(files.find(secret.substr(0, 16)), std::string::npos);
  RawDb raw(tmp.path() + "/airlock.db");
  EXPECT_EQ(raw.Value("SELECT length(secret_hash) FROM api_keys"), "64");
}

// While another program holds the write lock, reads go on (WAL) and a write waits for the busy
// timeout, then fails with Unavailable; once the lock is gone, writes succeed again.
TEST(SqliteStoreTest, AWriterBlockedBeyondTheBusyTimeoutIsUnavailable) {
  TempDir tmp;
  SqliteStoreOptions options;
  options.busy_timeout = absl::Milliseconds(200);
  auto store = MustOpen(tmp.path(), options);
  ASSERT_OK_AND_ASSIGN(CreateResult first, store->CreateSandbox(Request()));
  RawDb raw(tmp.path() + "/airlock.db");
  ASSERT_EQ(raw.Exec("BEGIN IMMEDIATE"), "");
  absl::Time start = absl::Now();
  auto blocked = store->CreateSandbox(Request());
  absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kUnavailable) << blocked.status();
  EXPECT_THAT(blocked.status().message(), HasSubstr("another writer"));
  EXPECT_GE(waited, absl::Milliseconds(150));
  EXPECT_TRUE(store->GetSandbox(first.sandbox.id).ok());
  ASSERT_EQ(raw.Exec("COMMIT"), "");
  EXPECT_TRUE(store->CreateSandbox(Request()).ok());
}

TEST(SqliteStoreTest, ADatabaseFromANewerAirlockIsRefused) {
  TempDir tmp;
  MustOpen(tmp.path()).reset();
  {
    RawDb raw(tmp.path() + "/airlock.db");
    ASSERT_EQ(raw.Exec("INSERT INTO schema_migrations VALUES (99, 'future', 0)"), "");
  }
  auto store = OpenSqliteStore(tmp.path());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("schema version 99"));
}

TEST(SqliteStoreTest, AFileThatIsNotADatabaseIsDataLoss) {
  TempDir tmp;
  ASSERT_OK(WriteFileAtomic(tmp.path() + "/airlock.db", std::string(4096, 'x'), 0600));
  auto store = OpenSqliteStore(tmp.path());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr("airlock.db"));
}

TEST(SqliteStoreTest, ConcurrentOpenersOfANewFileMigrateItOnce) {
  TempDir tmp;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&] {
      auto store = OpenSqliteStore(tmp.path());
      if (!store.ok()) {
        ++failures;
        ADD_FAILURE() << store.status();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  RawDb raw(tmp.path() + "/airlock.db");
  EXPECT_EQ(raw.Value("SELECT COUNT(*) FROM schema_migrations"),
            std::to_string(internal::SqliteMigrations().size()));
}

// A later migration that fails leaves the database at the version before it, data intact, and
// the fixed migration applies on the next open.
TEST(SqliteStoreTest, AFailedMigrationRollsBackToThePreviousVersion) {
  TempDir tmp;
  std::string path = tmp.path() + "/m.db";
  const internal::Migration v1 = {1, "notes", "CREATE TABLE notes (id TEXT PRIMARY KEY);"};
  const internal::Migration broken = {
      2, "add column", "ALTER TABLE notes ADD COLUMN body TEXT; INSERT INTO nowhere VALUES (1);"};
  const internal::Migration fixed = {2, "add column", "ALTER TABLE notes ADD COLUMN body TEXT;"};
  ASSERT_OK_AND_ASSIGN(auto db, internal::OpenSqliteDatabase(path, {}));
  const internal::Migration first[] = {v1};
  ASSERT_OK(internal::Migrate(*db, first, absl::Now()));
  {
    RawDb raw(path);
    ASSERT_EQ(raw.Exec("INSERT INTO notes VALUES ('kept')"), "");
  }
  const internal::Migration with_broken[] = {v1, broken};
  absl::Status failed = internal::Migrate(*db, with_broken, absl::Now());
  EXPECT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(), HasSubstr("schema migration 2 (add column)"));
  EXPECT_THAT(failed.message(), HasSubstr("nowhere"));
  {
    RawDb raw(path);
    EXPECT_EQ(raw.Value("SELECT MAX(version) FROM schema_migrations"), "1");
    EXPECT_THAT(raw.Exec("SELECT body FROM notes"), HasSubstr("no such column"));
    EXPECT_EQ(raw.Value("SELECT id FROM notes"), "kept");
  }
  const internal::Migration with_fixed[] = {v1, fixed};
  ASSERT_OK(internal::Migrate(*db, with_fixed, absl::Now()));
  RawDb raw(path);
  EXPECT_EQ(raw.Value("SELECT MAX(version) FROM schema_migrations"), "2");
  EXPECT_EQ(raw.Exec("SELECT body FROM notes"), "");
  EXPECT_EQ(raw.Value("SELECT id FROM notes"), "kept");
}

}  // namespace
}  // namespace airlock::store
