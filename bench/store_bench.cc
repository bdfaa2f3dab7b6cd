// Latency of the SQLite store's hot calls (docs/perf.md, "Store"): CreateSandbox, Transition and
// GetSandbox one at a time, the whole create -> Running -> get sequence a sandbox start costs,
// and CreateSandbox from many threads at once. The reference, measured in the same run, is bare
// SQLite doing the least a create must do (one INSERT of the row and one of its audit event in
// a BEGIN IMMEDIATE transaction, prepared statements), so the figures show what the Store layer
// adds on top of the database.
//
// Each benchmark takes the durability as its argument: 0 = kSyncAtCheckpoint (the default),
// 1 = kSyncEveryCommit. p50/p99 are per call, in microseconds. Run with repetitions and random
// interleaving (docs/perf.md has the command) so that reference and store take turns.
#include <sqlite3.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/files.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace airlock::store {
namespace {

std::string MakeTempDir() {
  char tmpl[] = "/var/tmp/airlock-store-bench-XXXXXX";  // a disk, not tmpfs: fsync must count
  if (::mkdtemp(tmpl) == nullptr) std::abort();
  return tmpl;
}

SqliteDurability DurabilityOf(const benchmark::State& state) {
  return state.range(0) == 0 ? SqliteDurability::kSyncAtCheckpoint
                             : SqliteDurability::kSyncEveryCommit;
}

// One store per benchmark run, in a fresh directory removed at the end.
class BenchStore {
 public:
  explicit BenchStore(SqliteDurability durability) : dir_(MakeTempDir()) {
    SqliteStoreOptions options;
    options.durability = durability;
    auto store = OpenSqliteStore(dir_, options);
    if (!store.ok()) {
      fprintf(stderr, "%s\n", std::string(store.status().message()).c_str());
      std::abort();
    }
    store_ = std::move(*store);
  }
  ~BenchStore() {
    store_.reset();
    (void)RemoveTree(dir_);
  }
  Store& operator*() { return *store_; }
  Store* operator->() { return store_.get(); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::unique_ptr<Store> store_;
};

NewSandbox Request() {
  nlohmann::json spec = {{"level", 2},
                         {"workdir", "/sandbox/workspace"},
                         {"resources", {{"memoryMb", 512}, {"cpus", 1}}},
                         {"network", {{"profile", "none"}}}};
  return NewSandbox{.owner = ApiKeyId("ak-bench0000001"),
                    .spec = std::move(spec),
                    .metadata = {{"team", "bench"}},
                    .ttl = absl::Hours(1),
                    .node = NodeId("node-bench"),
                    .actor = "bench"};
}

void Check(const absl::Status& s) {
  if (!s.ok()) {
    fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    std::abort();
  }
}

// Times each call of `f` and reports p50/p99 in microseconds.
class Latencies {
 public:
  template <typename F>
  void Time(F&& f) {
    auto start = std::chrono::steady_clock::now();
    f();
    samples_.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  void Report(benchmark::State& state) {
    if (samples_.empty()) return;
    std::sort(samples_.begin(), samples_.end());
    auto at = [&](double q) { return samples_[static_cast<size_t>(q * (samples_.size() - 1))]; };
    state.counters["p50_us"] = benchmark::Counter(at(0.5), benchmark::Counter::kAvgThreads);
    state.counters["p99_us"] = benchmark::Counter(at(0.99), benchmark::Counter::kAvgThreads);
  }

 private:
  std::vector<double> samples_;
};

const SandboxState kToRunning[] = {SandboxState::kPreparingImage, SandboxState::kMountingWorkspace,
                                   SandboxState::kStarting, SandboxState::kRunning};

void BM_Create(benchmark::State& state) {
  BenchStore store(DurabilityOf(state));
  Latencies lat;
  for (auto _ : state) lat.Time([&] { Check(store->CreateSandbox(Request()).status()); });
  lat.Report(state);
}

void BM_Transition(benchmark::State& state) {
  BenchStore store(DurabilityOf(state));
  auto created = store->CreateSandbox(Request());
  Check(created.status());
  SandboxId id = created->sandbox.id;
  SandboxState at = SandboxState::kAllocating;
  for (SandboxState next : kToRunning) {
    Check(store->Transition({.id = id, .from = {at}, .to = next, .actor = "bench"}).status());
    at = next;
  }
  Latencies lat;
  for (auto _ : state) {
    SandboxState next =
        at == SandboxState::kRunning ? SandboxState::kPaused : SandboxState::kRunning;
    lat.Time([&] {
      Check(store->Transition({.id = id, .from = {at}, .to = next, .actor = "bench"}).status());
    });
    at = next;
  }
  lat.Report(state);
}

void BM_Get(benchmark::State& state) {
  BenchStore store(DurabilityOf(state));
  std::vector<SandboxId> ids;
  for (int i = 0; i < 1000; ++i) ids.push_back(store->CreateSandbox(Request())->sandbox.id);
  Latencies lat;
  size_t i = 0;
  for (auto _ : state) {
    lat.Time([&] { Check(store->GetSandbox(ids[i++ % ids.size()]).status()); });
  }
  lat.Report(state);
}

// What starting one sandbox costs the store: create, four transitions to Running, one get.
void BM_CreateTransitionGet(benchmark::State& state) {
  BenchStore store(DurabilityOf(state));
  Latencies lat;
  for (auto _ : state) {
    lat.Time([&] {
      auto created = store->CreateSandbox(Request());
      Check(created.status());
      SandboxState at = SandboxState::kAllocating;
      for (SandboxState next : kToRunning) {
        Check(store
                  ->Transition(
                      {.id = created->sandbox.id, .from = {at}, .to = next, .actor = "bench"})
                  .status());
        at = next;
      }
      Check(store->GetSandbox(created->sandbox.id).status());
    });
  }
  lat.Report(state);
}

// Creates from N threads sharing one Store (the daemon's case). Every thread's calls are timed.
BenchStore* shared_store = nullptr;
std::mutex shared_mu;

void BM_CreateConcurrent(benchmark::State& state) {
  if (state.thread_index() == 0) {
    std::lock_guard lock(shared_mu);
    shared_store = new BenchStore(DurabilityOf(state));
  }
  Latencies lat;
  for (auto _ : state) lat.Time([&] { Check((*shared_store)->CreateSandbox(Request()).status()); });
  lat.Report(state);
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    std::lock_guard lock(shared_mu);
    delete shared_store;
    shared_store = nullptr;
  }
}

// The reference: bare SQLite, one INSERT into a table shaped like `sandboxes` and one into an
// append-only log, per BEGIN IMMEDIATE transaction, with prepared statements.
void BM_RawSqliteCreate(benchmark::State& state) {
  std::string dir = MakeTempDir();
  sqlite3* db = nullptr;
  sqlite3_open((dir + "/raw.db").c_str(), &db);
  auto exec = [&](const char* sql) {
    if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) std::abort();
  };
  exec("PRAGMA journal_mode = WAL");
  exec(state.range(0) == 0 ? "PRAGMA synchronous = NORMAL" : "PRAGMA synchronous = FULL");
  exec("CREATE TABLE s (id TEXT PRIMARY KEY, state TEXT, owner TEXT, spec TEXT, created BIGINT)");
  exec("CREATE TABLE e (seq INTEGER PRIMARY KEY AUTOINCREMENT, sandbox TEXT, data TEXT)");
  sqlite3_stmt* insert_s = nullptr;
  sqlite3_stmt* insert_e = nullptr;
  sqlite3_prepare_v2(db, "INSERT INTO s VALUES (?1, 'Allocating', ?2, ?3, ?4)", -1, &insert_s,
                     nullptr);
  sqlite3_prepare_v2(db, "INSERT INTO e (sandbox, data) VALUES (?1, '{}')", -1, &insert_e, nullptr);
  std::string spec = Request().spec.dump();
  Latencies lat;
  for (auto _ : state) {
    lat.Time([&] {
      std::string id = SandboxId::New().value();
      exec("BEGIN IMMEDIATE");
      sqlite3_bind_text(insert_s, 1, id.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(insert_s, 2, "ak-bench0000001", -1, SQLITE_STATIC);
      sqlite3_bind_text(insert_s, 3, spec.c_str(), -1, SQLITE_STATIC);
      sqlite3_bind_int64(insert_s, 4, 1);
      if (sqlite3_step(insert_s) != SQLITE_DONE) std::abort();
      sqlite3_reset(insert_s);
      sqlite3_bind_text(insert_e, 1, id.c_str(), -1, SQLITE_TRANSIENT);
      if (sqlite3_step(insert_e) != SQLITE_DONE) std::abort();
      sqlite3_reset(insert_e);
      exec("COMMIT");
    });
  }
  lat.Report(state);
  sqlite3_finalize(insert_s);
  sqlite3_finalize(insert_e);
  sqlite3_close(db);
  (void)RemoveTree(dir);
}

BENCHMARK(BM_RawSqliteCreate)->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(BM_Create)->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(BM_Transition)->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(BM_Get)->Arg(0)->UseRealTime();
BENCHMARK(BM_CreateTransitionGet)->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(BM_CreateConcurrent)->Arg(0)->Arg(1)->Threads(1)->Threads(4)->Threads(16)->UseRealTime();

}  // namespace
}  // namespace airlock::store

BENCHMARK_MAIN();
