// Sandbox start-up and workload overhead of the native backend, against bwrap and against the
// same command run without a sandbox, alternating in one run so machine noise hits both sides.
//
//   bench/run_bench [--runs N] [--airlock PATH]
//
// Prints medians (and p90) in milliseconds, the ratio to the reference, and a breakdown of
// where a sandbox's start goes (from the engine's own timings). Needs root.
#include <fcntl.h>
#include <grp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "common/files.h"
#include "engine/cgroup.h"
#include "engine/native_sandbox.h"
#include "fmt/format.h"
#include "timing.h"

namespace airlock {
namespace {

using bench::Clock;
using bench::Ms;
using bench::TimeCommand;

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

struct Series {
  std::string name;
  std::vector<double> ms;
};

void Report(const std::string& title, const Series& ours, const Series& ref) {
  double a = Percentile(ours.ms, 0.5), b = Percentile(ref.ms, 0.5);
  std::printf("%-44s %8.2f ms (p90 %7.2f)   %-14s %8.2f ms (p90 %7.2f)   ratio %.2fx\n",
              (title + ": " + ours.name).c_str(), a, Percentile(ours.ms, 0.9), ref.name.c_str(), b,
              Percentile(ref.ms, 0.9), a / b);
}

// Runs `ours` and `ref` alternately, `runs` times each (after a warm-up).
void Compare(const std::string& title, int runs, Series ours, std::function<double()> run_ours,
             Series ref, std::function<double()> run_ref) {
  run_ours();
  run_ref();
  for (int i = 0; i < runs; ++i) {
    double x = run_ours(), y = run_ref();
    if (x < 0 || y < 0) {
      std::printf("%s: a run failed (ours %.1f, reference %.1f)\n", title.c_str(), x, y);
      std::exit(1);
    }
    ours.ms.push_back(x);
    ref.ms.push_back(y);
  }
  Report(title, ours, ref);
}

}  // namespace
}  // namespace airlock

int main(int argc, char** argv) {
  using namespace airlock;
  int runs = 40;
  std::string airlock_bin = AIRLOCK_BENCH_BIN;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    if (a == "--airlock" && i + 1 < argc) airlock_bin = argv[++i];
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "run_bench needs root\n");
    return 2;
  }
  setgroups(0, nullptr);
  std::printf("runs per side: %d (alternating), medians\n\n", runs);

  // 1. Start-up: `airlock run -- /bin/true` against bwrap with equivalent mounts.
  std::vector<std::string> ours = {airlock_bin, "run", "--level", "2", "--log-dir",
                                   "/tmp/airlock-bench-logs", "--", "/bin/true"};
  std::vector<std::string> bwrap = {"/usr/bin/bwrap", "--unshare-all", "--die-with-parent",
                                    "--new-session", "--ro-bind", "/usr", "/usr", "--symlink",
                                    "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
                                    "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64",
                                    "/lib64", "--ro-bind", "/etc", "/etc", "--proc", "/proc",
                                    "--dev", "/dev", "--tmpfs", "/tmp", "--", "/bin/true"};
  Compare("start /bin/true", runs, {"airlock run", {}}, [&] { return TimeCommand(ours); },
          {"bwrap", {}}, [&] { return TimeCommand(bwrap); });

  // 2. Breakdown of a sandbox's life, from the engine's timings (in-process, no CLI).
  engine::CgroupOptions cg_opts;
  auto cgroups = engine::CgroupDriver::Detect(cg_opts);
  if (!cgroups.ok()) {
    std::fprintf(stderr, "cgroups: %s\n", cgroups.status().ToString().c_str());
    return 1;
  }
  std::vector<std::vector<double>> parts(9);
  const char* names[] = {"prepare (plan, cgroups, seccomp)", "clone + id maps + cgroup",
                         "child setup (mounts, pivot, landlock, caps) + exec init",
                         "init ready", "spawn command", "run /bin/true + drain",
                         "finish (accounting, log)", "destroy", "total"};
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    engine::SandboxOptions o;
    o.cgroups = cgroups->get();
    auto sb = engine::NativeSandbox::Create(o);
    if (!sb.ok()) {
      std::fprintf(stderr, "create: %s\n", sb.status().ToString().c_str());
      return 1;
    }
    auto r = (*sb)->Exec({.argv = {"/bin/true"}}, {});
    if (!r.ok()) return 1;
    (void)(*sb)->Destroy();
    double total = Ms(Clock::now() - t0);
    const engine::Timings& t = (*sb)->timings();
    double v[] = {Ms(t.prepare), Ms(t.clone), Ms(t.setup), Ms(t.init_ready), Ms(t.spawn),
                  Ms(t.run), Ms(t.finish), Ms(t.destroy), total};
    for (int k = 0; k < 9; ++k) parts[k].push_back(v[k]);
  }
  std::printf("\nwhere the time goes (engine in-process, medians):\n");
  for (int k = 0; k < 9; ++k) {
    std::printf("  %-58s %7.3f ms\n", names[k], Percentile(parts[k], 0.5));
  }

  // 3. Overhead on real workloads: the same command sandboxed and not.
  char tmpl[] = "/tmp/airlock-bench-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  (void)WriteFileAtomic(dir + "/hello.c", "#include <stdio.h>\nint main(){puts(\"hi\");}\n");
  std::string git_setup = fmt::format(
      "cd {} && git init -q repo && cd repo && for i in $(seq 200); do echo $i > f$i; done && "
      "git add . && git -c user.email=b@b -c user.name=b commit -qm init && chmod -R a+rX {}",
      dir, dir);
  if (std::system(git_setup.c_str()) != 0) return 1;
  std::printf("\nworkload overhead (sandboxed vs unsandboxed, alternating):\n");
  // The same argv on both sides; git neither takes locks nor rewrites its index.
  setenv("GIT_OPTIONAL_LOCKS", "0", 1);
  struct Workload {
    std::string name;
    std::vector<std::string> argv;
  } workloads[] = {
      {"python3 -c 'import json'", {"/usr/bin/python3", "-c", "import json"}},
      {"gcc -O2 -c hello.c", {"/usr/bin/gcc", "-O2", "-c", dir + "/hello.c", "-o", "/dev/null"}},
      {"git status (200 files)",
       {"/usr/bin/git", "-C", dir + "/repo", "-c", "safe.directory=*", "status", "--porcelain"}},
  };
  // (a) The command inside a running level-2 sandbox (exec round trip included) against the
  // same command started directly: the cost of the sandbox on the work itself.
  engine::SandboxOptions o;
  o.cgroups = cgroups->get();
  o.spec.filesystem.mounts.push_back({dir, dir, spec::MountMode::kReadOnly});
  o.spec.env["GIT_OPTIONAL_LOCKS"] = "0";
  auto sandbox = engine::NativeSandbox::Create(o);
  if (!sandbox.ok()) return 1;
  for (const Workload& w : workloads) {
    Compare(w.name + " (in sandbox)", runs, {"airlock exec", {}},
            [&] {
              auto t0 = Clock::now();
              auto r = (*sandbox)->Exec({.argv = w.argv}, {});
              bool ok = r.ok() && r->classification == Classification::kOk;
              return ok ? Ms(Clock::now() - t0) : -1.0;
            },
            {"unsandboxed", {}}, [&] { return TimeCommand(w.argv); });
  }
  (void)(*sandbox)->Destroy();
  // (b) One-shot: `airlock run` (a whole sandbox per command) against the same command.
  for (const Workload& w : workloads) {
    std::vector<std::string> sandboxed = {airlock_bin, "run", "--level", "2", "--log-dir",
                                          "/tmp/airlock-bench-logs", "--mount",
                                          dir + ":" + dir + ":ro", "--env",
                                          "GIT_OPTIONAL_LOCKS=0", "--"};
    sandboxed.insert(sandboxed.end(), w.argv.begin(), w.argv.end());
    Compare(w.name + " (one-shot)", runs / 2, {"airlock run", {}},
            [&] { return TimeCommand(sandboxed); }, {"unsandboxed", {}},
            [&] { return TimeCommand(w.argv); });
  }
  (void)RemoveTree(dir);
  (void)RemoveTree("/tmp/airlock-bench-logs");
  return 0;
}
