// Throughput of secret redaction on a 32 MiB build-and-test log: one-shot Scan and Redact, and
// the streaming form fed 64 KiB chunks (as the command wrapper does). Prints MB/s.
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "re2/re2.h"
#include "re2/set.h"
#include "redact/internal/detectors.h"
#include "redact/redactor.h"

namespace airlock {
namespace {

const std::vector<std::string>& Secrets() {
  static const auto* secrets = new std::vector<std::string>{
      "lease-7f3a9c1e5b2d4f60", "db-password-Zq8vR2pLw", "ci-token-4e1b7d9a0c3f",
      "s3-upload-key-9x8y7z6w", "registry-auth-Q2w3E4r5"};
  return *secrets;
}

// Compiler, make, test-runner and package-manager lines, with a secret in about one line in
// 2000 (explicit values, tokens, credential assignments, a private key now and then).
const std::string& Log() {
  static const std::string* log = [] {
    auto* text = new std::string;
    std::mt19937 rng(1);
    const char* lines[] = {
        "[ 42%] Building CXX object src/engine/CMakeFiles/airlock_engine.dir/mounts.cc.o\n",
        "src/engine/mounts.cc:118:23: warning: unused variable 'flags' [-Wunused-variable]\n",
        "make[2]: Leaving directory '/sandbox/workspace/build'\n",
        "test_parser.py::test_roundtrip[case-17] PASSED                        [ 63%]\n",
        "npm WARN deprecated inflight@1.0.6: This module is not supported, and leaks memory.\n",
        "Downloading https://repo.maven.apache.org/maven2/org/slf4j/slf4j-api/2.0.9/slf4j.jar\n",
        "    at org.junit.runners.ParentRunner.runLeaf(ParentRunner.java:366)\n",
        "2024-05-01T10:22:33.123Z INFO  request_id=123e4567-e89b-12d3-a456-426614174000 ok\n",
        "HEAD is now at 3f786850e387550fdab836ed7e6dc881de23001b fix: flaky test\n",
        "Collecting numpy==1.26.4 (from -r requirements.txt (line 3)) Using cached numpy.whl\n",
    };
    const char* secrets[] = {
        "export AWS_ACCESS_KEY_ID=AKIA"
        "IOSFODNN7EXAMPLE\n",
        "Authorization: Bearer ya29.a0AfH6SMBxQ7-kLk9Zq8vR2pLw\n",
        "password=Xk9#mQ2vLp user=admin\n",
        "remote: using ghp_"
        "u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8d\n",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0t\n"
        "-----END RSA PRIVATE KEY-----\n",
    };
    while (text->size() < (32u << 20)) {
      uint32_t r = rng();
      if (r % 2000 == 0) {
        text->append(secrets[(r / 2000) % 5]);
      } else if (r % 2000 == 1) {
        text->append("connecting with " + Secrets()[(r / 2000) % 5] + "\n");
      } else {
        text->append(lines[r % 10]);
      }
    }
    return text;
  }();
  return *log;
}

const Redactor& TheRedactor() {
  static const Redactor* r = new Redactor(*Redactor::Create(Secrets()));
  return *r;
}

void BM_Scan(benchmark::State& state) {
  const std::string& log = Log();
  size_t findings = 0;
  for (auto _ : state) {
    findings = TheRedactor().Scan(log).size();
    benchmark::DoNotOptimize(findings);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * log.size()));
  state.counters["findings"] = static_cast<double>(findings);
}
BENCHMARK(BM_Scan)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Redact(benchmark::State& state) {
  const std::string& log = Log();
  for (auto _ : state) {
    std::string out = TheRedactor().Redact(log);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * log.size()));
}
BENCHMARK(BM_Redact)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Stream64KiB(benchmark::State& state) {
  const std::string_view log = Log();
  std::string out;
  for (auto _ : state) {
    StreamRedactor stream(TheRedactor());
    for (size_t pos = 0; pos < log.size(); pos += 65536) {
      out.clear();
      stream.Write(log.substr(pos, 65536), &out);
    }
    out.clear();
    stream.Finish(&out);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * log.size()));
}
BENCHMARK(BM_Stream64KiB)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_RedactNoExplicitValues(benchmark::State& state) {
  static const Redactor* r = new Redactor(*Redactor::Create({}));
  const std::string& log = Log();
  for (auto _ : state) {
    std::string out = r->Redact(log);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * log.size()));
}
BENCHMARK(BM_RedactNoExplicitValues)->Unit(benchmark::kMillisecond)->UseRealTime();

// What a process's first redaction pays once: compiling the detectors' prefilter set, from the
// exact patterns (arg 0, as before LoosePattern) or from their loosened forms (arg 1, as now).
void BM_CompileDetectorSet(benchmark::State& state) {
  RE2::Options options;
  options.set_encoding(RE2::Options::EncodingLatin1);
  options.set_log_errors(false);
  for (auto _ : state) {
    RE2::Set set(options, RE2::UNANCHORED);
    for (const redact_internal::DetectorSpec& spec : redact_internal::DetectorSpecs()) {
      std::string pattern =
          state.range(0) ? redact_internal::LoosePattern(spec.pattern) : spec.pattern;
      if (set.Add(pattern, nullptr) < 0) state.SkipWithError("pattern");
    }
    if (!set.Compile()) state.SkipWithError("compile");
    std::vector<int> hits;
    benchmark::DoNotOptimize(set.Match("/bin/true", &hits));
  }
}
BENCHMARK(BM_CompileDetectorSet)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace airlock

BENCHMARK_MAIN();
