#include "store/internal/sqlite_db.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/status.h"
#include "fmt/format.h"

namespace airlock::store::internal {
namespace {

const Logger& Log() {
  static const Logger& log = GetLogger("store");
  return log;
}

absl::StatusCode CodeOf(int rc) {
  switch (rc) {
    case SQLITE_CONSTRAINT_PRIMARYKEY:
    case SQLITE_CONSTRAINT_UNIQUE:
      return absl::StatusCode::kAlreadyExists;
    case SQLITE_CONSTRAINT_FOREIGNKEY:
    case SQLITE_CONSTRAINT_TRIGGER:
      return absl::StatusCode::kFailedPrecondition;
    default:
      break;
  }
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_PROTOCOL:
      return absl::StatusCode::kUnavailable;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_TOOBIG:
      return absl::StatusCode::kInvalidArgument;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_FORMAT:
      return absl::StatusCode::kDataLoss;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::StatusCode::kPermissionDenied;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status SqliteError(int rc, sqlite3* db, std::string_view what) {
  // sqlite3_errmsg describes the last error of the connection, which is `rc` only when the
  // failing call was made on `db`; sqlite3_errstr(rc) is right in every case.
  std::string detail = sqlite3_errstr(rc);
  if (db != nullptr && sqlite3_extended_errcode(db) == rc && detail != sqlite3_errmsg(db)) {
    detail = fmt::format("{} ({})", sqlite3_errmsg(db), detail);
  }
  if ((rc & 0xff) == SQLITE_BUSY) detail += "; another writer holds the database";
  if (what.empty()) return absl::Status(CodeOf(rc), detail);
  return absl::Status(CodeOf(rc), fmt::format("{}: {}", what, detail));
}

// One writer lock per database file (by device and inode) for the whole process.
std::shared_ptr<std::mutex> WriterLockFor(dev_t dev, ino_t ino) {
  static std::mutex registry_mu;
  static auto* registry = new std::map<std::pair<dev_t, ino_t>, std::weak_ptr<std::mutex>>;
  std::lock_guard lock(registry_mu);
  auto& weak = (*registry)[{dev, ino}];
  std::shared_ptr<std::mutex> mu = weak.lock();
  if (!mu) {
    mu = std::make_shared<std::mutex>();
    weak = mu;
  }
  return mu;
}

class SqliteConnection final : public SqlConnection {
 public:
  SqliteConnection(sqlite3* db, std::shared_ptr<std::mutex> writer_lock)
      : db_(db), writer_lock_(std::move(writer_lock)) {}

  sqlite3* handle() const { return db_; }

  ~SqliteConnection() override {
    if (in_tx_) Rollback();
    for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
    sqlite3_close_v2(db_);
  }

  absl::StatusOr<std::vector<SqlRow>> Query(std::string_view sql,
                                            const SqlParams& params) override {
    std::vector<SqlRow> rows;
    RETURN_IF_ERROR(Run(sql, params, &rows));
    return rows;
  }

  absl::StatusOr<int64_t> Exec(std::string_view sql, const SqlParams& params) override {
    RETURN_IF_ERROR(Run(sql, params, nullptr));
    return static_cast<int64_t>(sqlite3_changes64(db_));
  }

  absl::Status ExecScript(std::string_view sql) override {
    std::string text(sql);
    char* err = nullptr;
    int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
      std::string msg = err != nullptr ? err : sqlite3_errstr(rc);
      sqlite3_free(err);
      return absl::Status(CodeOf(rc), msg);
    }
    return absl::OkStatus();
  }

  absl::Status Begin(TxKind kind) override {
    if (kind == TxKind::kWrite) writer_lock_->lock();
    absl::Status s = Simple(kind == TxKind::kWrite ? "BEGIN IMMEDIATE" : "BEGIN");
    if (!s.ok()) {
      if (kind == TxKind::kWrite) writer_lock_->unlock();
      return s;
    }
    in_tx_ = true;
    holds_writer_ = kind == TxKind::kWrite;
    return absl::OkStatus();
  }

  absl::Status Commit() override {
    RETURN_IF_ERROR(Simple("COMMIT"));
    EndTx();
    return absl::OkStatus();
  }

  void Rollback() override {
    // After some errors (SQLITE_FULL, SQLITE_IOERR, ...) SQLite has rolled back already.
    if (!sqlite3_get_autocommit(db_)) {
      absl::Status s = Simple("ROLLBACK");
      if (!s.ok()) Log().Error("rollback failed", {{"error", Message(s)}});
    }
    EndTx();
  }

  absl::Status Configure(const SqliteStoreOptions& options) {
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, static_cast<int>(absl::ToInt64Milliseconds(options.busy_timeout)));
    RETURN_IF_ERROR(Simple("PRAGMA foreign_keys = ON"));
    ASSIGN_OR_RETURN(std::vector<SqlRow> fk, Query("PRAGMA foreign_keys", {}));
    if (fk.empty() || fk[0].Int(0) != 1) {
      return FailedPrecondition("this SQLite library cannot enforce foreign keys");
    }
    ASSIGN_OR_RETURN(std::vector<SqlRow> mode, EnableWal(options.busy_timeout));
    if (mode.empty() || mode[0].Text(0) != "wal") {
      return FailedPrecondition(fmt::format(
          "cannot enable WAL mode (journal mode stays '{}'); the file system may not support "
          "shared memory",
          mode.empty() ? "" : mode[0].Text(0)));
    }
    return Simple(options.durability == SqliteDurability::kSyncEveryCommit
                      ? "PRAGMA synchronous = FULL"
                      : "PRAGMA synchronous = NORMAL");
  }

 private:
  // Switching a new file to WAL takes its exclusive lock from inside a read. Two connections
  // doing that at once deadlock, and SQLite answers one of them SQLITE_BUSY at once instead of
  // calling the busy handler; so a busy answer is retried here, for as long as the busy timeout.
  absl::StatusOr<std::vector<SqlRow>> EnableWal(absl::Duration busy_timeout) {
    const absl::Time deadline = absl::Now() + busy_timeout;
    absl::Duration pause = absl::Milliseconds(1);
    for (;;) {
      absl::StatusOr<std::vector<SqlRow>> mode = Query("PRAGMA journal_mode = WAL", {});
      if (mode.ok() || (sqlite3_extended_errcode(db_) & 0xff) != SQLITE_BUSY ||
          absl::Now() + pause > deadline) {
        return mode;
      }
      absl::SleepFor(pause);
      pause = std::min(pause * 2, absl::Milliseconds(50));
    }
  }

  void EndTx() {
    if (holds_writer_) writer_lock_->unlock();
    holds_writer_ = false;
    in_tx_ = false;
  }

  absl::Status Simple(std::string_view sql) {
    RETURN_IF_ERROR(Run(sql, {}, nullptr));
    return absl::OkStatus();
  }

  absl::StatusOr<sqlite3_stmt*> Prepare(std::string_view sql) {
    if (auto it = statements_.find(absl::string_view(sql.data(), sql.size()));
        it != statements_.end()) {
      return it->second;
    }
    // Statements built from a query's filters vary; keep the cache bounded.
    if (statements_.size() >= 256) {
      for (auto& [text, stmt] : statements_) sqlite3_finalize(stmt);
      statements_.clear();
    }
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return SqliteError(rc, db_, "prepare");
    statements_.emplace(std::string(sql), stmt);
    return stmt;
  }

  absl::Status Bind(sqlite3_stmt* stmt, const SqlParams& params) {
    int count = sqlite3_bind_parameter_count(stmt);
    if (count != static_cast<int>(params.size())) {
      return Internal(fmt::format("statement takes {} parameters, {} given", count, params.size()));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      std::string name = fmt::format("${}", i + 1);
      int index = sqlite3_bind_parameter_index(stmt, name.c_str());
      if (index == 0) return Internal(fmt::format("statement has no parameter {}", name));
      int rc = SQLITE_OK;
      const SqlValue& v = params[i];
      if (const auto* n = std::get_if<int64_t>(&v)) {
        rc = sqlite3_bind_int64(stmt, index, *n);
      } else if (const auto* s = std::get_if<std::string>(&v)) {
        rc = sqlite3_bind_text64(stmt, index, s->data(), s->size(), SQLITE_TRANSIENT, SQLITE_UTF8);
      } else {
        rc = sqlite3_bind_null(stmt, index);
      }
      if (rc != SQLITE_OK) return SqliteError(rc, db_, fmt::format("bind {}", name));
    }
    return absl::OkStatus();
  }

  static SqlValue Column(sqlite3_stmt* stmt, int i) {
    switch (sqlite3_column_type(stmt, i)) {
      case SQLITE_NULL:
        return std::monostate{};
      case SQLITE_INTEGER:
        return static_cast<int64_t>(sqlite3_column_int64(stmt, i));
      default: {
        const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, i));
        return std::string(text != nullptr ? text : "",
                           static_cast<size_t>(sqlite3_column_bytes(stmt, i)));
      }
    }
  }

  absl::Status Run(std::string_view sql, const SqlParams& params, std::vector<SqlRow>* rows) {
    ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(sql));
    struct ResetOnExit {
      sqlite3_stmt* stmt;
      ~ResetOnExit() {
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
      }
    } reset{stmt};
    RETURN_IF_ERROR(Bind(stmt, params));
    for (;;) {
      int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) return absl::OkStatus();
      if (rc != SQLITE_ROW) return SqliteError(rc, db_, "");
      if (rows == nullptr) continue;
      int n = sqlite3_column_count(stmt);
      std::vector<SqlValue> values;
      values.reserve(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) values.push_back(Column(stmt, i));
      rows->emplace_back(std::move(values));
    }
  }

  sqlite3* db_;
  std::shared_ptr<std::mutex> writer_lock_;
  bool in_tx_ = false;
  bool holds_writer_ = false;
  absl::flat_hash_map<std::string, sqlite3_stmt*> statements_;
};

// Checkpoints (copying the WAL back into the database file, which syncs it) run on a thread of
// their own rather than inside whichever commit crosses the threshold, so no request waits for
// them: with synchronous=NORMAL that sync is the only one, and it was the p99 of every write.
constexpr int kCheckpointPages = 1000;

class SqliteDatabase final : public SqlDatabase {
 public:
  SqliteDatabase(std::string path, SqliteStoreOptions options,
                 std::shared_ptr<std::mutex> writer_lock)
      : path_(std::move(path)),
        options_(std::move(options)),
        writer_lock_(std::move(writer_lock)),
        checkpointer_([this] { CheckpointLoop(); }) {}

  ~SqliteDatabase() override {
    {
      std::lock_guard lock(checkpoint_mu_);
      stopping_ = true;
    }
    checkpoint_cv_.notify_one();
    checkpointer_.join();
  }

  absl::StatusOr<std::unique_ptr<SqliteConnection>> Connect() {
    sqlite3* db = nullptr;
    int rc =
        sqlite3_open_v2(path_.c_str(), &db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
      absl::Status s = SqliteError(rc, db, "connect");
      sqlite3_close_v2(db);
      return s;
    }
    auto conn = std::make_unique<SqliteConnection>(db, writer_lock_);
    RETURN_IF_ERROR(conn->Configure(options_), "connect");
    // Replaces SQLite's automatic checkpoint on this connection.
    sqlite3_wal_hook(db, &SqliteDatabase::OnWalCommit, this);
    return conn;
  }

  absl::StatusOr<Lease> Acquire() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !idle_.empty() || open_ < options_.max_connections; });
    if (!idle_.empty()) {
      std::unique_ptr<SqlConnection> conn = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(conn));
    }
    ++open_;
    lock.unlock();
    absl::StatusOr<std::unique_ptr<SqliteConnection>> conn = Connect();
    if (!conn.ok()) {
      lock.lock();
      --open_;
      cv_.notify_one();
      return conn.status();
    }
    return Lease(this, std::move(*conn));
  }

  void Seed(std::unique_ptr<SqlConnection> conn) {
    std::lock_guard lock(mu_);
    ++open_;
    idle_.push_back(std::move(conn));
  }

 protected:
  void Release(std::unique_ptr<SqlConnection> conn) override {
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(conn));
    cv_.notify_one();
  }

 private:
  static int OnWalCommit(void* self, sqlite3*, const char*, int pages) {
    if (pages >= kCheckpointPages) {
      auto* db = static_cast<SqliteDatabase*>(self);
      {
        std::lock_guard lock(db->checkpoint_mu_);
        db->checkpoint_wanted_ = true;
      }
      db->checkpoint_cv_.notify_one();
    }
    return SQLITE_OK;
  }

  void CheckpointLoop() {
    std::unique_ptr<SqliteConnection> conn;
    std::unique_lock lock(checkpoint_mu_);
    for (;;) {
      checkpoint_cv_.wait(lock, [&] { return checkpoint_wanted_ || stopping_; });
      if (stopping_) return;
      checkpoint_wanted_ = false;
      lock.unlock();
      if (!conn) {
        absl::StatusOr<std::unique_ptr<SqliteConnection>> opened = Connect();
        if (opened.ok()) {
          conn = std::move(*opened);
        } else {
          Log().Warn("checkpoint connection failed", {{"error", Message(opened.status())}});
        }
      }
      if (conn) {
        // PASSIVE copies what no reader still needs and never blocks readers or writers;
        // SQLITE_BUSY (another process is checkpointing) is fine.
        int rc = sqlite3_wal_checkpoint_v2(conn->handle(), nullptr, SQLITE_CHECKPOINT_PASSIVE,
                                           nullptr, nullptr);
        if (rc != SQLITE_OK && rc != SQLITE_BUSY) {
          Log().Warn("checkpoint failed", {{"error", sqlite3_errstr(rc)}});
        }
      }
      lock.lock();
    }
  }

  const std::string path_;
  const SqliteStoreOptions options_;
  std::shared_ptr<std::mutex> writer_lock_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<SqlConnection>> idle_;
  int open_ = 0;

  std::mutex checkpoint_mu_;
  std::condition_variable checkpoint_cv_;
  bool checkpoint_wanted_ = false;
  bool stopping_ = false;
  std::thread checkpointer_;  // last: starts after every member above exists
};

}  // namespace

absl::StatusOr<std::unique_ptr<SqlDatabase>> OpenSqliteDatabase(const std::string& path,
                                                                const SqliteStoreOptions& options) {
  if (sqlite3_threadsafe() == 0) {
    return FailedPrecondition("this SQLite library was built without thread support");
  }
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError("max_connections must be at least 1");
  }
  // SQLite creates a missing file with mode 0644; the database holds key hashes and audit
  // records, so create it 0600 first (the -wal and -shm files copy the file's mode).
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoStatus(errno, fmt::format("open {}", path));
  struct stat st;
  int rc = ::fstat(fd, &st);
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus(err, fmt::format("stat {}", path));
  if (!S_ISREG(st.st_mode)) return FailedPrecondition(fmt::format("{}: not a file", path));

  auto db = std::make_unique<SqliteDatabase>(path, options, WriterLockFor(st.st_dev, st.st_ino));
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteConnection> first, db->Connect());
  db->Seed(std::move(first));
  return db;
}

}  // namespace airlock::store::internal
