// The cost of the syscall policy and supervisor on syscall-heavy work, against the same command
// run without a sandbox, and ptrace's full audit against `strace -f -c` on the same work.
//
//   bench/supervisor_bench [--rounds N] [--loop N] [--variants SUBSTRING,...]
//
// --variants keeps only the variants whose name contains one of the substrings (and always the
// unsandboxed reference), e.g. `--variants "filter only"` for many rounds of one comparison.
//
// Workloads: `find /usr -type f` and a stat/open/read/fstat/close loop (syscall_workload). Each
// mechanism is measured twice: alone (the program on the host under the engine's profile and
// the policy filter, with the supervisor when there is one: supervisor/testing/launch.h) and in
// a level-2 sandbox, which adds its own costs (Landlock on every path walk, namespaces). For
// each workload, every round runs every variant once, in an order that rotates from round to
// round; a variant's ratio is the median over rounds of (its time / the unsandboxed time of the
// same round). Sandboxes are created once per variant (creation is not timed); a run inside one
// is Exec's wall time, spawn and output drain included. Needs root.
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
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "engine/cgroup.h"
#include "engine/native_sandbox.h"
// The engine's own profile, to measure the filters alone outside a sandbox.
#include "engine/internal/seccomp.h"
#include "fmt/format.h"
#include "supervisor/testing/launch.h"
#include "timing.h"

namespace airlock {
namespace {

using bench::Clock;
using bench::Ms;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Calls rare in both workloads: a supervisor that watches only these costs little more than
// the filter.
const std::vector<std::string> kHandful = {"execve",   "execveat",  "connect", "bind",
                                           "unlinkat", "renameat2", "mkdirat"};

struct Variant {
  std::string name;
  std::string goal;  // "" when the variant has none
  double limit = 0;  // goal as a ratio to the unsandboxed run
  enum class Where { kHost, kHostPolicy, kSandbox } where = Where::kHost;
  std::function<void(spec::SandboxSpec&)> configure;  // the policy (kHostPolicy, kSandbox)
  std::vector<std::string> host_prefix;               // kHost: a wrapper (strace)
  std::unique_ptr<engine::NativeSandbox> sandbox;
  std::shared_ptr<const supervisor::SyscallPolicy> policy;  // kHostPolicy
  int64_t seen = 0;  // calls the supervisor handled in the last run
};

void Supervise(spec::SandboxSpec& s, spec::SupervisorMode mode, bool every_call) {
  s.runtime = spec::Runtime::kTraced;
  s.process.supervisor = mode;
  std::string route = mode == spec::SupervisorMode::kPtrace ? "trace" : "notify";
  if (every_call) {
    s.process.syscall_default_action = route;
  } else {
    s.process.syscalls = {{kHandful, {}, route}};
  }
}

void FilterOnly(spec::SandboxSpec& s) { s.process.syscalls = {{kHandful, {}, "allow"}}; }

// The least a routed call can cost: one round trip between two processes (a one-byte pipe
// ping-pong), median over batches, in microseconds. Every call a supervisor sees costs at least
// this, whatever the supervisor does with it.
double ProcessRoundTripUs() {
  int ping[2], pong[2];
  if (::pipe(ping) != 0 || ::pipe(pong) != 0) return 0;
  constexpr int kBatch = 20000, kBatches = 5;
  pid_t child = ::fork();
  if (child == 0) {
    ::close(ping[1]);  // so that the parent's close ends the loop
    ::close(pong[0]);
    char c;
    while (::read(ping[0], &c, 1) == 1 && ::write(pong[1], &c, 1) == 1) {
    }
    _exit(0);
  }
  std::vector<double> us;
  char c = 0;
  for (int b = 0; b < kBatches; ++b) {
    auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) {
      if (::write(ping[1], &c, 1) != 1 || ::read(pong[0], &c, 1) != 1) return 0;
    }
    us.push_back(Ms(Clock::now() - t0) * 1000 / kBatch);
  }
  for (int fd : {ping[0], ping[1], pong[0], pong[1]}) ::close(fd);
  ::waitpid(child, nullptr, 0);
  return Median(us);
}

}  // namespace
}  // namespace airlock

int main(int argc, char** argv) {
  using namespace airlock;
  int rounds = 7;
  long loop = 100000;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    if (a == "--loop" && i + 1 < argc) loop = std::atol(argv[++i]);
    if (a == "--variants" && i + 1 < argc) only = absl::StrSplit(argv[++i], ',');
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "supervisor_bench needs root\n");
    return 2;
  }
  setgroups(0, nullptr);
  auto cgroups = engine::CgroupDriver::Detect({});
  if (!cgroups.ok()) {
    std::fprintf(stderr, "cgroups: %s\n", cgroups.status().ToString().c_str());
    return 1;
  }

  using spec::SupervisorMode;
  using Where = Variant::Where;
  auto notify = [](spec::SandboxSpec& s) { Supervise(s, SupervisorMode::kNotify, false); };
  auto ptrace = [](spec::SandboxSpec& s) { Supervise(s, SupervisorMode::kPtrace, false); };
  auto ptrace_all = [](spec::SandboxSpec& s) { Supervise(s, SupervisorMode::kPtrace, true); };
  auto notify_all = [](spec::SandboxSpec& s) { Supervise(s, SupervisorMode::kNotify, true); };
  std::vector<Variant> variants;
  variants.push_back({"unsandboxed", "", 0, Where::kHost});
  variants.push_back({"strace -f -c",
                      "",
                      0,
                      Where::kHost,
                      nullptr,
                      {"/usr/bin/strace", "-f", "-c", "-o", "/dev/null"}});
  // The mechanisms alone: the program on the host under the filters (and supervisor).
  variants.push_back({"filter only", "<= 1.05x", 1.05, Where::kHostPolicy, FilterOnly});
  variants.push_back({"notify, a handful", "<= 1.2x", 1.2, Where::kHostPolicy, notify});
  variants.push_back({"ptrace, pre-filter", "<= 1.5x", 1.5, Where::kHostPolicy, ptrace});
  variants.push_back(
      {"ptrace, every call", "<= 2x, < strace", 2.0, Where::kHostPolicy, ptrace_all});
  variants.push_back({"notify, every call", "", 0, Where::kHostPolicy, notify_all});
  // The same in a level-2 sandbox (namespaces, Landlock, cgroups as well).
  variants.push_back({"sandbox, no policy", "", 0, Where::kSandbox, [](spec::SandboxSpec&) {}});
  variants.push_back({"sandbox + filter only", "<= 1.05x", 1.05, Where::kSandbox, FilterOnly});
  variants.push_back({"sandbox + notify, a handful", "<= 1.2x", 1.2, Where::kSandbox, notify});
  variants.push_back({"sandbox + ptrace, pre-filter", "<= 1.5x", 1.5, Where::kSandbox, ptrace});
  variants.push_back(
      {"sandbox + ptrace, every call", "<= 2x, < strace", 2.0, Where::kSandbox, ptrace_all});

  if (!only.empty()) {
    auto wanted = [&](const std::string& name) {
      for (const std::string& o : only) {
        if (!o.empty() && name.find(o) != std::string::npos) return true;
      }
      return false;
    };
    // strace stays with an "every call" variant: their goal is to beat it.
    const bool every_call = std::any_of(variants.begin(), variants.end(), [&](const Variant& v) {
      return wanted(v.name) && v.name.find("every call") != std::string::npos;
    });
    std::erase_if(variants, [&](const Variant& v) {
      return v.name != "unsandboxed" && !wanted(v.name) &&
             !(every_call && v.name == "strace -f -c");
    });
  }

  auto profile = engine::internal::BuildSeccompFilter();
  if (!profile.ok()) return 1;
  for (Variant& v : variants) {
    if (v.where == Where::kHost) continue;
    engine::SandboxOptions o;
    o.cgroups = cgroups->get();
    o.spec.resources.command_timeout_seconds = 600;
    o.spec.resources.memory_mb = 1024;
    o.spec.filesystem.mounts.push_back(
        {AIRLOCK_BENCH_WORKLOAD, "/opt/syscall_workload", spec::MountMode::kReadOnly});
    v.configure(o.spec);
    if (v.where == Where::kHostPolicy) {
      auto policy =
          supervisor::SyscallPolicy::Compile(o.spec.process, engine::internal::TreatmentOf);
      if (!policy.ok()) return 1;
      v.policy = std::make_shared<const supervisor::SyscallPolicy>(*std::move(policy));
      continue;
    }
    auto sb = engine::NativeSandbox::Create(std::move(o));
    if (!sb.ok()) {
      std::fprintf(stderr, "%s: %s\n", v.name.c_str(), sb.status().ToString().c_str());
      return 1;
    }
    v.sandbox = std::move(*sb);
  }

  struct Workload {
    std::string name;
    std::vector<std::string> host;     // argv on the host
    std::vector<std::string> sandbox;  // argv in a sandbox
  };
  std::string loop_arg = std::to_string(loop);
  std::vector<Workload> workloads = {
      {"find /usr -type f",
       {"/bin/sh", "-c", "find /usr -type f > /dev/null 2>&1; exit 0"},
       {"/bin/sh", "-c", "find /usr -type f > /dev/null 2>&1; exit 0"}},
      {fmt::format("stat/open loop x{}", loop),
       {AIRLOCK_BENCH_WORKLOAD, loop_arg},
       {"/opt/syscall_workload", loop_arg}},
  };

  std::printf("%d rounds, every variant once per round in rotating order; medians\n", rounds);
  const double round_trip_us = ProcessRoundTripUs();
  std::printf("process round trip (pipe ping-pong): %.2f us\n", round_trip_us);
  for (const Workload& w : workloads) {
    std::map<std::string, std::vector<double>> ms, ratio;
    auto run = [&](Variant& v) -> double {
      if (v.where == Where::kHostPolicy) {
        auto t0 = Clock::now();
        auto r = supervisor::testing::RunUnderPolicy(*profile, v.policy, w.host);
        if (!r.ok() || r->exit_code != 0) {
          std::fprintf(stderr, "%s: %s\n", v.name.c_str(),
                       r.ok() ? "failed" : r.status().ToString().c_str());
          return -1;
        }
        v.seen = r->report.seen;
        return Ms(Clock::now() - t0);
      }
      if (v.where == Where::kHost) {
        std::vector<std::string> cmd = v.host_prefix;
        cmd.insert(cmd.end(), w.host.begin(), w.host.end());
        return bench::TimeCommand(cmd);
      }
      auto t0 = Clock::now();
      auto r = v.sandbox->Exec({.argv = w.sandbox}, {});
      if (!r.ok() || r->classification != Classification::kOk) {
        std::fprintf(stderr, "%s: %s\n", v.name.c_str(),
                     r.ok() ? r->stderr_preview.c_str() : r.status().ToString().c_str());
        return -1;
      }
      v.seen = r->syscalls.seen;
      return Ms(Clock::now() - t0);
    };
    for (Variant& v : variants) run(v);  // warm-up: page cache, first-run costs
    for (int round = 0; round < rounds; ++round) {
      std::map<std::string, double> t;
      for (size_t k = 0; k < variants.size(); ++k) {
        Variant& v = variants[(k + static_cast<size_t>(round)) % variants.size()];
        double x = run(v);
        if (x < 0) return 1;
        t[v.name] = x;
      }
      for (const auto& [name, x] : t) {
        ms[name].push_back(x);
        ratio[name].push_back(x / t["unsandboxed"]);
      }
    }
    std::printf("\n%s\n", w.name.c_str());
    std::printf("  %-30s %10s %8s %12s  %-17s %s\n", "variant", "median ms", "ratio", "calls seen",
                "goal", "");
    double strace = Median(ms["strace -f -c"]);
    for (const Variant& v : variants) {
      double r = Median(ratio[v.name]);
      std::string verdict;
      if (v.limit > 0) {
        bool met = r <= v.limit;
        if (v.name.find("every call") != std::string::npos)
          met = met && Median(ms[v.name]) < strace;
        verdict = met ? "met" : "MISSED";
      }
      std::printf("  %-30s %10.1f %7.2fx %12s  %-17s %s\n", v.name.c_str(), Median(ms[v.name]), r,
                  v.seen ? std::to_string(v.seen).c_str() : "-", v.goal.c_str(), verdict.c_str());
    }
    // Supervising every call cannot beat (calls x round trip) on top of the plain run.
    for (const Variant& v : variants) {
      if (v.name == "ptrace, every call" && v.seen > 0) {
        double base = Median(ms["unsandboxed"]);
        std::printf("  floor for routing every call: %lld calls x %.2f us = +%.0f ms (%.2fx)\n",
                    static_cast<long long>(v.seen), round_trip_us,
                    static_cast<double>(v.seen) * round_trip_us / 1000,
                    1 + static_cast<double>(v.seen) * round_trip_us / 1000 / base);
      }
    }
  }
  for (Variant& v : variants) {
    if (v.sandbox) (void)v.sandbox->Destroy();
  }
  return 0;
}
