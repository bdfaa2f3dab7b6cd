// Throughput of the artifact release gate (src/artifact) on a 256 MiB text artifact read in
// 64 KiB chunks (sniff, SHA-256, streaming secret scan), next to its parts in the same run: the
// streaming scan alone (StreamRedactor with no output) and streaming redaction with output (the
// command wrapper's path). Prints MB/s.
#include <algorithm>
#include <memory>
#include <random>
#include <string>

#include "artifact/gate.h"
#include "benchmark/benchmark.h"
#include "redact/redactor.h"

namespace airlock::artifact {
namespace {

// An HTML-and-JSON test report, no secrets: what an artifact usually is.
const std::string& Report() {
  static const std::string* text = [] {
    auto* out = new std::string;
    std::mt19937 rng(7);
    const char* rows[] = {
        "<tr><td>tests/test_parser.py::test_roundtrip[case-17]</td><td>passed</td></tr>\n",
        "{\"name\": \"api.items.list\", \"duration_ms\": 12.4, \"status\": \"ok\", \"n\": 3}\n",
        "<tr class=\"fail\"><td>src/engine/mounts_test.cc:118</td><td>Expected 3, got 4</td>\n",
        "  at org.junit.runners.ParentRunner.runLeaf(ParentRunner.java:366)\n",
        "coverage: src/spec/validate.cc 94.1% (812/863 lines), branches 88.0%\n",
    };
    while (out->size() < (256u << 20)) out->append(rows[rng() % 5]);
    return out;
  }();
  return *text;
}

const Redactor& TheRedactor() {
  static const Redactor* r = new Redactor(*Redactor::Create({"lease-7f3a9c1e5b2d4f60"}));
  return *r;
}

void BM_GateInspect(benchmark::State& state) {
  const std::string& text = Report();
  spec::Artifacts spec;
  spec.max_size_mb = 1024;
  ReleaseGate gate = *ReleaseGate::Create(spec, TheRedactor());
  Candidate file;
  file.path = "/sandbox/artifacts/report.html";
  file.size = text.size();
  file.mode = 0100644;
  file.open = [&]() -> absl::StatusOr<std::unique_ptr<ContentReader>> {
    return std::make_unique<StringReader>(text);
  };
  for (auto _ : state) {
    absl::StatusOr<Collection> c = gate.Inspect({file});
    if (!c.ok() || c->files[0].outcome != Outcome::kReleased) {
      state.SkipWithError("the report was not released");
      break;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_GateInspect)->Unit(benchmark::kMillisecond)->UseRealTime();

void Stream(benchmark::State& state, bool produce) {
  const std::string_view text = Report();
  std::string out;
  for (auto _ : state) {
    StreamRedactor stream(TheRedactor());
    for (size_t pos = 0; pos < text.size(); pos += 65536) {
      out.clear();
      stream.Write(text.substr(pos, 65536), produce ? &out : nullptr);
    }
    stream.Finish(produce ? &out : nullptr);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}

void BM_StreamScanOnly(benchmark::State& state) { Stream(state, false); }
BENCHMARK(BM_StreamScanOnly)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_StreamRedact(benchmark::State& state) { Stream(state, true); }
BENCHMARK(BM_StreamRedact)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace airlock::artifact

BENCHMARK_MAIN();
