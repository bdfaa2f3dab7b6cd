// Sandbox start-up and workload overhead of the native backend (issue 2, docs/perf.md), against
// bwrap and against the same command run without a sandbox. The two sides of every comparison
// run alternately in one run, so load from other processes falls on both; figures are medians
// (and p90) in milliseconds.
//
//   bench/run_bench [--runs N] [--airlock PATH] [--exec-only]
//
// (--exec-only: section 3 alone.)
//
// What it prints, in order:
//   1. start-up: `airlock run --level L -- /bin/true` against bwrap --unshare-all with
//      equivalent read-only mounts, /proc, /dev and a /tmp (levels 2 and 1), in wall time and in
//      CPU time of all their processes (rusage of the waited-for tree; steadier than wall time
//      on a shared machine), and the floor of both processes (`--version`);
//   2. where a start goes: the engine's own timings, in-process (NativeSandbox::Timings), and
//      what the `airlock` process adds around them;
//   3. the exec round trip of a warm sandbox: Exec(/bin/true) on a running sandbox;
//   4. workload overhead, two measures:
//      (a) the command's own run time: airlock-bench-timer forks, execs and waits for it, once
//          inside a running level-2 sandbox (under its seccomp filter, Landlock, namespaces and
//          cgroups) and once outside with the same environment; the ratio is the sandbox's cost
//          on the work itself (goal <= 1.05); (a') the CPU time (user + system) of the
//          command's process tree on both sides, and the median ratio of back-to-back pairs,
//          which scheduling delays on a busy host barely move;
//      (b) the fixed cost per exec: the whole NativeSandbox::Exec call minus the command's own
//          time from (a), i.e. spawn request, cgroup, output drain, accounting, redaction;
//   5. one-shot runs: `airlock run` (a whole sandbox per command) against the command alone.
// Needs root.
#include <fcntl.h>
#include <grp.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/files.h"
#include "engine/cgroup.h"
#include "engine/native_sandbox.h"
#include "fmt/format.h"

extern char** environ;

namespace airlock {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double Ms(std::chrono::microseconds d) { return static_cast<double>(d.count()) / 1000.0; }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}
double Median(const std::vector<double>& v) { return Percentile(v, 0.5); }

struct Spawned {
  double ms = -1;      // wall time from spawn to exit; -1 if it failed
  double cpu_ms = -1;  // user + system CPU of the process and every descendant it waited for
  std::string out;
};

// Runs argv to completion (stdout captured, stderr discarded). `env` null: ours.
Spawned Run(const std::vector<std::string>& argv, char* const* env = nullptr) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return {};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  Spawned r;
  auto t0 = Clock::now();
  pid_t pid;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), env ? env : environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    return {};
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) r.out.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status;
  struct rusage ru = {};
  wait4(pid, &status, 0, &ru);
  double ms = Ms(Clock::now() - t0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    r.ms = ms;
    auto tv_ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
    r.cpu_ms = tv_ms(ru.ru_utime) + tv_ms(ru.ru_stime);
  }
  return r;
}

// The command time airlock-bench-timer printed, in ms; -1 if it did not print one.
// airlock-bench-timer's "<wall ns> <cpu ns>": the wall time in ms, and the CPU time in *cpu_ms.
double TimerMs(const std::string& out, double* cpu_ms = nullptr) {
  char* end = nullptr;
  long long ns = std::strtoll(out.c_str(), &end, 10);
  if (end == out.c_str() || ns <= 0) return -1;
  if (cpu_ms != nullptr) *cpu_ms = static_cast<double>(std::strtoll(end, nullptr, 10)) / 1e6;
  return static_cast<double>(ns) / 1e6;
}

void Row(const std::string& title, const std::string& a_name, const std::vector<double>& a,
         const std::string& b_name, const std::vector<double>& b) {
  std::printf("%-38s %-13s %8.2f (p90 %7.2f)   %-12s %8.2f (p90 %7.2f)   ratio %.2fx\n",
              title.c_str(), a_name.c_str(), Median(a), Percentile(a, 0.9), b_name.c_str(),
              Median(b), Percentile(b, 0.9), Median(a) / Median(b));
}

// Runs `a` and `b` alternately `runs` times each, after one warm-up of each. A failed run ends
// the benchmark.
void Alternate(const std::string& title, int runs, const std::function<double()>& a,
               std::vector<double>* a_ms, const std::function<double()>& b,
               std::vector<double>* b_ms) {
  a();
  b();
  for (int i = 0; i < runs; ++i) {
    double x = a(), y = b();
    if (x < 0 || y < 0) {
      std::printf("%s: a run failed (ours %.1f, reference %.1f)\n", title.c_str(), x, y);
      std::exit(1);
    }
    a_ms->push_back(x);
    b_ms->push_back(y);
  }
}

std::vector<std::string> Bwrap(const std::vector<std::string>& tail) {
  std::vector<std::string> argv = {"/usr/bin/bwrap",
                                   "--unshare-all",
                                   "--die-with-parent",
                                   "--new-session",
                                   "--ro-bind",
                                   "/usr",
                                   "/usr",
                                   "--symlink",
                                   "usr/bin",
                                   "/bin",
                                   "--symlink",
                                   "usr/sbin",
                                   "/sbin",
                                   "--symlink",
                                   "usr/lib",
                                   "/lib",
                                   "--symlink",
                                   "usr/lib64",
                                   "/lib64",
                                   "--ro-bind",
                                   "/etc",
                                   "/etc",
                                   "--proc",
                                   "/proc",
                                   "--dev",
                                   "/dev",
                                   "--tmpfs",
                                   "/tmp"};
  argv.insert(argv.end(), tail.begin(), tail.end());
  return argv;
}

// Medians of NativeSandbox::Timings over `runs` in-process sandboxes running /bin/true.
struct Breakdown {
  std::vector<std::vector<double>> parts = std::vector<std::vector<double>>(10);
};
constexpr const char* kParts[] = {"prepare (checks, plan, sandbox cgroup)",
                                  "clone + uid/gid maps + release",
                                  "child setup (mounts, pivot, Landlock, caps) + exec init",
                                  "airlock-init ready",
                                  "airlock-init's seccomp filter (sent at launch)",
                                  "spawn /bin/true (request, fork, cgroup join)",
                                  "run /bin/true + drain output",
                                  "finish (usage, cgroup removal, log, report)",
                                  "destroy (init exit, namespaces, cgroups, run dir)",
                                  "total"};

std::optional<Breakdown> EngineBreakdown(engine::CgroupDriver* cgroups, spec::Level level,
                                         int runs) {
  Breakdown b;
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    engine::SandboxOptions o;
    o.cgroups = cgroups;
    o.spec.level = level;
    o.single_command = true;  // as `airlock run` does
    auto sb = engine::NativeSandbox::Create(o);
    if (!sb.ok()) {
      std::fprintf(stderr, "create: %s\n", sb.status().ToString().c_str());
      return std::nullopt;
    }
    auto r = (*sb)->Exec({.argv = {"/bin/true"}}, {});
    if (!r.ok() || r->classification != Classification::kOk) return std::nullopt;
    if (!(*sb)->Destroy().ok()) return std::nullopt;
    double total = Ms(Clock::now() - t0);
    const engine::Timings& t = (*sb)->timings();
    double v[] = {Ms(t.prepare), Ms(t.clone), Ms(t.setup),  Ms(t.init_ready), Ms(t.init_filter),
                  Ms(t.spawn),   Ms(t.run),   Ms(t.finish), Ms(t.destroy),    total};
    for (int k = 0; k < 10; ++k) b.parts[k].push_back(v[k]);
  }
  return b;
}

}  // namespace
}  // namespace airlock

int main(int argc, char** argv) {
  using namespace airlock;
  int runs = 40;
  std::string airlock_bin = AIRLOCK_BENCH_BIN;
  bool exec_only = false;  // only section 3, the warm exec round trip
  const std::string timer = AIRLOCK_BENCH_TIMER;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    if (a == "--airlock" && i + 1 < argc) airlock_bin = argv[++i];
    if (a == "--exec-only") exec_only = true;
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "run_bench needs root\n");
    return 2;
  }
  setgroups(0, nullptr);
  const std::string log_dir = "/tmp/airlock-bench-logs";
  std::printf("runs per side: %d (alternating), medians and p90 in ms\n", runs);

  engine::CgroupOptions cg_opts;
  auto cgroups = engine::CgroupDriver::Detect(cg_opts);
  if (!cgroups.ok()) {
    std::fprintf(stderr, "cgroups: %s\n", cgroups.status().ToString().c_str());
    return 1;
  }
  // 1. Start-up.
  if (!exec_only) {
    std::printf("\n1. start-up of /bin/true\n");
    std::vector<double> run_ms[3], bwrap_ms[3], version_ms, bwrap_version_ms;
    for (int level : {2, 1}) {
      std::vector<std::string> ours = {airlock_bin, "run",   "--level", std::to_string(level),
                                       "--log-dir", log_dir, "--",      "/bin/true"};
      std::vector<std::string> ref = Bwrap({"--", "/bin/true"});
      // CPU time is steadier than wall time on a shared machine: both are printed.
      std::vector<double> ours_cpu, ref_cpu;
      // (Alternate's warm-up run of each side is the first call: not counted.)
      auto timed = [](const std::vector<std::string>& cmd, std::vector<double>* cpu, int* calls) {
        Spawned r = Run(cmd);
        if (r.ms >= 0 && (*calls)++ > 0) cpu->push_back(r.cpu_ms);
        return r.ms;
      };
      int ours_calls = 0, ref_calls = 0;
      Alternate(
          "start", runs, [&] { return timed(ours, &ours_cpu, &ours_calls); }, &run_ms[level],
          [&] { return timed(ref, &ref_cpu, &ref_calls); }, &bwrap_ms[level]);
      Row(fmt::format("level {}: airlock run -- /bin/true", level), "airlock run", run_ms[level],
          "bwrap", bwrap_ms[level]);
      Row("  CPU of all its processes", "airlock run", ours_cpu, "bwrap", ref_cpu);
    }
    Alternate(
        "process floor", runs,
        [&] {
          return Run({airlock_bin, "--version"}).ms;
        },
        &version_ms,
        [&] {
          return Run({"/usr/bin/bwrap", "--version"}).ms;
        },
        &bwrap_version_ms);
    Row("process start + exit (--version)", "airlock", version_ms, "bwrap", bwrap_version_ms);

    // 2. Breakdown.
    for (int level : {2, 1}) {
      auto b = EngineBreakdown(cgroups->get(),
                               level == 2 ? spec::Level::kHardened : spec::Level::kBasic, runs);
      if (!b) return 1;
      std::printf("\n2. where a level-%d start goes (engine in-process, cgroup %s, medians)\n",
                  level, engine::ToString((*cgroups)->version()));
      for (int k = 0; k < 10; ++k) {
        std::printf("  %-58s %7.3f ms\n", kParts[k], Median(b->parts[k]));
      }
      double engine_total = Median(b->parts[9]);
      double process = Median(version_ms);
      std::printf("  %-58s %7.3f ms\n", "+ airlock process start and exit (--version)", process);
      std::printf("  %-58s %7.3f ms\n", "+ the rest of airlock run (flags, spec, cgroup driver,",
                  Median(run_ms[level]) - engine_total - process);
      std::printf("  %-58s\n", "  host probe, log dir, result; median differences)");
    }
  }

  // Workload data: a C file and a git checkout of 200 files, readable by the sandbox user, and
  // a copy of the checkout in the sandbox's workspace. Each side runs `git status` in its own
  // checkout, whose index records the files' owners as that side sees them: the sandbox sees
  // the host's files as another uid, and with a foreign index git would re-read and hash every
  // file on every run (core.checkStat), measuring git's reaction to the owner, not the sandbox.
  // The files are dated an hour back so that no entry is "racily clean" (as new as the index),
  // which git would also re-read every time, and nothing changes their status (their ctime)
  // after the host's index records it.
  char tmpl[] = "/tmp/airlock-bench-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  (void)WriteFileAtomic(dir + "/hello.c", "#include <stdio.h>\nint main(){puts(\"hi\");}\n");
  std::string git_setup = fmt::format(
      "cd {} && mkdir home && git init -q repo && cd repo && for i in $(seq 200); do echo $i > "
      "f$i; done && touch -d '1 hour ago' f* && chmod -R a+rX {} && git add . && "
      "git -c user.email=b@b -c user.name=b commit -qm init && git update-index -q --refresh && "
      "mkdir ../ws && cp -a ../repo ../ws/repo",
      dir, dir);
  if (std::system(git_setup.c_str()) != 0) return 1;
  const std::string sandbox_repo = "/sandbox/workspace/repo";
  struct Workload {
    std::string name;
    std::vector<std::string> argv;
    std::vector<std::string> sandbox_argv;  // when it differs from argv
    const std::vector<std::string>& InSandbox() const {
      return sandbox_argv.empty() ? argv : sandbox_argv;
    }
  } workloads[] = {
      {"python3 -c 'import json'", {"/usr/bin/python3", "-c", "import json"}, {}},
      {"gcc -O2 -c hello.c",
       {"/usr/bin/gcc", "-O2", "-c", dir + "/hello.c", "-o", "/dev/null"},
       {}},
      {"git status (200 files)",
       {"/usr/bin/git", "-C", dir + "/repo", "-c", "safe.directory=*", "status", "--porcelain"},
       {"/usr/bin/git", "-C", sandbox_repo, "-c", "safe.directory=*", "status", "--porcelain"}},
  };

  engine::SandboxOptions o;
  o.cgroups = cgroups->get();
  o.spec.filesystem.mounts.push_back({dir, dir, spec::MountMode::kReadOnly});
  o.spec.filesystem.workspace = dir + "/ws";
  o.spec.filesystem.mounts.push_back(
      {timer, "/opt/airlock-bench/timer", spec::MountMode::kReadOnly});
  // Git neither takes locks nor rewrites its index, so both sides do the same work.
  o.spec.env["GIT_OPTIONAL_LOCKS"] = "0";
  auto sandbox = engine::NativeSandbox::Create(o);
  if (!sandbox.ok()) {
    std::fprintf(stderr, "create: %s\n", sandbox.status().ToString().c_str());
    return 1;
  }
  // The sandbox's checkout gets an index written from inside (the outside one was written by
  // its commit), as when an agent checks out a repository in its sandbox.
  {
    auto r = (*sandbox)->Exec({.argv = {"/usr/bin/git", "-C", sandbox_repo, "-c",
                                        "safe.directory=*", "update-index", "--refresh"},
                               .env = {{"GIT_OPTIONAL_LOCKS", "1"}}},
                              {});
    if (!r.ok() || r->classification != Classification::kOk) {
      std::fprintf(stderr, "git update-index in the sandbox failed\n");
      return 1;
    }
  }

  // 3. Exec round trip of a warm sandbox.
  std::vector<double> rt, spawn, run, finish;
  for (int i = 0; i <= runs; ++i) {
    auto t0 = Clock::now();
    auto r = (*sandbox)->Exec({.argv = {"/bin/true"}}, {});
    if (!r.ok() || r->classification != Classification::kOk) return 1;
    if (i == 0) continue;  // warm-up
    rt.push_back(Ms(Clock::now() - t0));
    const engine::Timings& t = (*sandbox)->timings();
    spawn.push_back(Ms(t.spawn));
    run.push_back(Ms(t.run));
    finish.push_back(Ms(t.finish));
  }
  std::printf("\n3. exec round trip of /bin/true in a warm level-2 sandbox\n");
  std::printf("  %-40s %7.3f ms (p90 %7.3f)\n", "Exec(/bin/true)", Median(rt), Percentile(rt, 0.9));
  std::printf("  %-40s %7.3f ms\n", "  spawn (request, fork, cgroup join)", Median(spawn));
  std::printf("  %-40s %7.3f ms\n", "  run + exit report + drain", Median(run));
  std::printf("  %-40s %7.3f ms\n", "  finish (usage, cgroup, log, report)", Median(finish));
  if (exec_only) return 0;

  // 4. Workload overhead.
  std::string env_home = "HOME=" + dir + "/home";
  std::vector<std::string> env_strings = {
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      env_home,
      "TMPDIR=/tmp",
      "LANG=C.UTF-8",
      "CI=true",
      "AGENT_SANDBOX=true",
      "GIT_OPTIONAL_LOCKS=0"};
  std::vector<char*> env;
  for (std::string& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  std::printf(
      "\n4. workload overhead in a running level-2 sandbox\n"
      "   (a) the command's own time (airlock-bench-timer: fork, exec, exit, wait), in the\n"
      "       sandbox vs outside it; (a') the CPU time of its process tree, and the median of\n"
      "       the ratios of back-to-back pairs; (b) the rest of each Exec call (its fixed cost)\n");
  for (const Workload& w : workloads) {
    std::vector<std::string> in_argv = {"/opt/airlock-bench/timer"};
    in_argv.insert(in_argv.end(), w.InSandbox().begin(), w.InSandbox().end());
    std::vector<std::string> out_argv = {timer};
    out_argv.insert(out_argv.end(), w.argv.begin(), w.argv.end());
    std::vector<double> inside, outside, fixed, cpu_in, cpu_out;
    Alternate(
        w.name, runs,
        [&] {
          auto t0 = Clock::now();
          auto r = (*sandbox)->Exec({.argv = in_argv}, {});
          double exec_ms = Ms(Clock::now() - t0);
          if (!r.ok() || r->classification != Classification::kOk) return -1.0;
          double cpu = 0;
          double own = TimerMs(r->stdout_preview, &cpu);
          if (own > 0) fixed.push_back(exec_ms - own);
          cpu_in.push_back(cpu);
          return own;
        },
        &inside,
        [&] {
          double cpu = 0;
          double own = TimerMs(Run(out_argv, env.data()).out, &cpu);
          cpu_out.push_back(cpu);
          return own;
        },
        &outside);
    Row("(a) " + w.name, "in sandbox", inside, "outside", outside);
    // The warm-up runs are the first of each list; the pairs after it ran back to back.
    std::vector<double> pair_ratio;
    for (size_t i = 1; i < cpu_in.size() && i < cpu_out.size(); ++i) {
      if (cpu_out[i] > 0) pair_ratio.push_back(cpu_in[i] / cpu_out[i]);
    }
    std::printf("%-38s %-13s %8.2f (p90 %7.2f)   %-12s %8.2f (p90 %7.2f)   pairs %.3fx\n",
                "(a')  its CPU time (user + system)", "in sandbox", Median(cpu_in),
                Percentile(cpu_in, 0.9), "outside", Median(cpu_out), Percentile(cpu_out, 0.9),
                Median(pair_ratio));
    std::printf("%-38s %-13s %8.2f (p90 %7.2f)\n", "(b)   fixed cost of that Exec", "",
                Median(fixed), Percentile(fixed, 0.9));
  }
  (void)(*sandbox)->Destroy();

  // 5. One-shot: a whole sandbox per command.
  std::printf("\n5. one-shot: airlock run (a fresh level-2 sandbox) vs the command alone\n");
  for (const Workload& w : workloads) {
    std::vector<std::string> sandboxed = {
        airlock_bin,   "run",       "--level", "2",
        "--log-dir",   log_dir,     "--mount", dir + ":" + dir + ":ro",
        "--workspace", dir + "/ws", "--env",   "GIT_OPTIONAL_LOCKS=0",
        "--"};
    sandboxed.insert(sandboxed.end(), w.InSandbox().begin(), w.InSandbox().end());
    std::vector<double> a, b;
    Alternate(
        w.name, runs / 2, [&] { return Run(sandboxed).ms; }, &a,
        [&] { return Run(w.argv, env.data()).ms; }, &b);
    Row(w.name, "airlock run", a, "alone", b);
  }
  (void)RemoveTree(dir);
  (void)RemoveTree(log_dir);
  return 0;
}
