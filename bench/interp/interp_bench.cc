// Benchmarks of the level-0 interpreter (docs/perf.md). The workloads are the .js files beside
// this file, shared with the reference runs of bench/interp/run.sh (quickjs-emscripten under
// Node, native QuickJS, V8).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "interp/interpreter.h"

namespace airlock::interp {
namespace {

std::string Workload(const std::string& name) {
  std::ifstream in(std::string(AIRLOCK_BENCH_DIR) + "/workloads/" + name + ".js");
  std::stringstream s;
  s << in.rdbuf();
  if (s.str().empty()) {
    std::fprintf(stderr, "missing workload %s\n", name.c_str());
    std::abort();
  }
  return s.str();
}

const Interpreter& Interp() {
  static const Interpreter* interp = [] {
    auto created = Interpreter::Create();
    if (!created.ok()) std::abort();
    return created->release();
  }();
  return *interp;
}

std::unique_ptr<Session> NewSession(SessionOptions options = {}) {
  auto s = Interp().NewSession(std::move(options));
  if (!s.ok()) std::abort();
  return std::move(*s);
}

void BM_FreshInterpreter(benchmark::State& state) {
  for (auto _ : state) {
    auto session = NewSession();
    benchmark::DoNotOptimize(session.get());
  }
}
BENCHMARK(BM_FreshInterpreter)->Unit(benchmark::kMillisecond);

void RunWorkload(benchmark::State& state, const std::string& name) {
  const std::string script = Workload(name);
  for (auto _ : state) {
    state.PauseTiming();
    auto session = NewSession();
    state.ResumeTiming();
    auto r = session->Run(script);
    if (!r.ok() || r->outcome != Outcome::kCompleted) {
      state.SkipWithError("workload failed");
      return;
    }
  }
}
void BM_Loop(benchmark::State& state) { RunWorkload(state, "loop"); }
void BM_Json(benchmark::State& state) { RunWorkload(state, "json"); }
void BM_Fib(benchmark::State& state) { RunWorkload(state, "fib"); }
BENCHMARK(BM_Loop)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Json)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Fib)->Unit(benchmark::kMillisecond);

SessionOptions OrchestrationOptions() {
  SessionOptions options;
  ToolInfo plan;
  plan.name = "plan";
  ToolInfo check;
  check.name = "check";
  options.tools = {
      MakeHostFunctionTool(plan,
                           [](const nlohmann::json&) -> absl::StatusOr<nlohmann::json> {
                             return nlohmann::json{{"steps", {"billing", "search", "auth"}}};
                           }),
      MakeHostFunctionTool(check,
                           [](const nlohmann::json& a) -> absl::StatusOr<nlohmann::json> {
                             return nlohmann::json{{"service", a["service"]}, {"status", "ok"}};
                           }),
      MakeHumanApprovalTool()};
  options.hmac_key = std::string(32, 'k');
  return options;
}

std::string PausedSnapshot() {
  auto session = NewSession(OrchestrationOptions());
  auto r = session->Run(Workload("orchestration"));
  if (!r.ok() || r->outcome != Outcome::kPaused) std::abort();
  auto snap = session->Snapshot();
  if (!snap.ok()) std::abort();
  return *snap;
}

// A fresh session per snapshot: the first snapshot of a guest is the one that matters (a second
// one finds every page already faulted in by the first scan).
void BM_Snapshot(benchmark::State& state) {
  size_t bytes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto session = NewSession(OrchestrationOptions());
    auto r = session->Run(Workload("orchestration"));
    if (!r.ok() || r->outcome != Outcome::kPaused) std::abort();
    state.ResumeTiming();
    auto snap = session->Snapshot();
    bytes = snap->size();
    benchmark::DoNotOptimize(snap->data());
  }
  state.counters["snapshot_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Snapshot)->Unit(benchmark::kMillisecond);

void BM_Restore(benchmark::State& state) {
  const std::string snap = PausedSnapshot();
  for (auto _ : state) {
    auto session = Interp().Restore(snap, OrchestrationOptions());
    if (!session.ok()) std::abort();
    benchmark::DoNotOptimize(session->get());
  }
}
BENCHMARK(BM_Restore)->Unit(benchmark::kMillisecond);

void BM_RestoreAndFinish(benchmark::State& state) {
  const std::string snap = PausedSnapshot();
  for (auto _ : state) {
    auto session = Interp().Restore(snap, OrchestrationOptions());
    auto r = (*session)->Resume("call-5", ToolResult::Value(R"({"approved": true})"));
    if (!r.ok() || r->outcome != Outcome::kCompleted) std::abort();
  }
}
BENCHMARK(BM_RestoreAndFinish)->Unit(benchmark::kMillisecond);

int64_t RssBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

// Resident memory of an idle interpreter: the RSS growth of holding 200 fresh sessions.
void BM_IdleMemory(benchmark::State& state) {
  constexpr int kCount = 200;
  double per = 0;
  for (auto _ : state) {
    std::vector<std::unique_ptr<Session>> sessions;
    sessions.reserve(kCount);
    NewSession();  // warm the allocator
    int64_t before = RssBytes();
    for (int i = 0; i < kCount; ++i) sessions.push_back(NewSession());
    per = static_cast<double>(RssBytes() - before) / kCount;
  }
  state.counters["idle_rss_bytes"] = per;
}
BENCHMARK(BM_IdleMemory)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace airlock::interp

BENCHMARK_MAIN();
