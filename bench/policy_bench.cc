// Cost of the command policy (src/cmdpolicy) per command, next to what starting the command
// costs anyway: posix_spawn of /bin/true and waiting for it, in the same run. Prints times.
#include <spawn.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "cmdpolicy/policy.h"

extern char** environ;

namespace airlock::cmdpolicy {
namespace {

const Policy& ThePolicy() {
  static const Policy* policy = [] {
    spec::CommandPolicy spec;
    spec.deny = {{"terraform-apply", {"terraform ** apply", "tofu ** apply"}, ""},
                 {"no-force-push", {"git push --force*"}, ""}};
    return new Policy(*Policy::Create(spec));
  }();
  return *policy;
}

// A CI-like script of about 4 KiB: installs into a virtualenv, builds, tests, loops, heredocs.
std::string Script() {
  std::string script = "set -euo pipefail\n";
  while (script.size() < 4096) {
    script +=
        "python3 -m venv .venv && . .venv/bin/activate\n"
        "pip install -r requirements.txt --no-input\n"
        "for f in $(git ls-files '*.py'); do python3 -m py_compile \"$f\"; done\n"
        "npm ci && npm test -- --reporter=dot 2>&1 | tee test.log\n"
        "if [ -f Makefile ]; then make -j4 CC=gcc; fi\n"
        "cat <<EOF > report.md\n# Report $(date)\nEOF\n";
  }
  return script;
}

void BM_CheckArgv(benchmark::State& state) {
  const std::vector<std::string> argv = {"npm", "install", "--save-dev", "typescript@5"};
  for (auto _ : state) benchmark::DoNotOptimize(ThePolicy().Check(argv).allowed);
}
BENCHMARK(BM_CheckArgv);

void BM_CheckWrappedRefusal(benchmark::State& state) {
  const std::vector<std::string> argv = {"env",     "FOO=1",   "timeout", "5", "sudo",
                                         "apt-get", "install", "-y",      "x"};
  for (auto _ : state) benchmark::DoNotOptimize(ThePolicy().Check(argv).allowed);
}
BENCHMARK(BM_CheckWrappedRefusal);

void BM_CheckShellScript4KiB(benchmark::State& state) {
  const std::vector<std::string> argv = {"bash", "-lc", Script()};
  for (auto _ : state) benchmark::DoNotOptimize(ThePolicy().Check(argv).allowed);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * argv[2].size()));
}
BENCHMARK(BM_CheckShellScript4KiB);

// The reference: what running the cheapest command costs.
void BM_SpawnTrue(benchmark::State& state) {
  char arg0[] = "/bin/true";
  char* argv[] = {arg0, nullptr};
  for (auto _ : state) {
    pid_t pid = 0;
    if (posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, environ) != 0) {
      state.SkipWithError("posix_spawn failed");
      break;
    }
    int status = 0;
    waitpid(pid, &status, 0);
  }
}
BENCHMARK(BM_SpawnTrue)->UseRealTime();

}  // namespace
}  // namespace airlock::cmdpolicy

BENCHMARK_MAIN();
