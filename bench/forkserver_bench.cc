// The fork-server against a cold interpreter (issue 4, docs/perf.md "Fork-server"): time from
// request to first output of a snippet that uses a preloaded module, in a fresh sandbox either
// way, the two alternated in one run; and the memory of an idle worker next to its zygote's.
//
//   bench/forkserver_bench [--runs N] [--template python|node]
//
//   fork-server: forkserver::Run on a ForkServer (template python with `import numpy`, or node
//                with `require('zlib')`) in this process: request, fork from the zygote, sandbox
//                setup, the snippet, the reply with its output (it arrives with the reply);
//   cold:        NativeSandbox::Create + Exec(python3 -c / node -e SNIPPET) + Destroy, the
//                engine of `airlock run` without the CLI process; "first output" is when its first
//                stdout bytes reached us (ExecOptions::on_output), "total" when Exec returned.
// The goal (>= 10x) is checked against cold's first output, the smaller of its two figures.
// Memory: a worker blocked in a sleep or timer after using the module: its PSS, RSS and private
// pages (/proc/PID/smaps_rollup; what one more idle worker costs is its private part), next to
// the zygote's PSS and RSS. Needs root, and python3-numpy for python.
#include <dirent.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/files.h"
#include "engine/cgroup.h"
#include "engine/native_sandbox.h"
#include "fmt/format.h"
#include "forkserver/client.h"
#include "forkserver/server.h"

namespace airlock {
namespace {

using Clock = std::chrono::steady_clock;

// What is measured for one template.
struct Template {
  const char* name;
  const char* zygote;
  const char* preload;
  const char* snippet;
  const char* output;  // the snippet's stdout
  std::vector<std::string> cold_argv;
  const char* idle;  // uses the module, then waits a minute
};

Template PythonTemplate() {
  const char* snippet = "import numpy\nprint(numpy.arange(10).sum(), flush=True)";
  return {"python",
          AIRLOCK_BENCH_ZYGOTE,
          "import numpy",
          snippet,
          "45\n",
          {"python3", "-c", snippet},
          "import numpy, time\nx = numpy.arange(1000).sum()\ntime.sleep(60)"};
}

Template NodeTemplate() {
  const char* snippet = "console.log(require('zlib').deflateSync(Buffer.alloc(1000)).length)";
  return {"node",
          AIRLOCK_BENCH_NODE_ZYGOTE,
          "require('zlib')",
          snippet,
          "17\n",
          {"node", "-e", snippet},
          "require('zlib').deflateSync(Buffer.alloc(1000)); setTimeout(() => {}, 60000)"};
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

// /proc/PID/smaps_rollup, in KiB.
struct Memory {
  long pss = -1, rss = -1, private_kb = 0;
};
Memory MemoryOf(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/smaps_rollup", pid));
  std::string key;
  long value = 0;
  Memory m;
  while (in >> key) {
    if (key == "Pss:" && in >> value) m.pss = value;
    if (key == "Rss:" && in >> value) m.rss = value;
    if ((key == "Private_Clean:" || key == "Private_Dirty:") && in >> value) m.private_kb += value;
  }
  return m;
}

// Our children other than `except`: the forked workers (CLONE_PARENT makes them ours).
std::vector<pid_t> Children(pid_t except) {
  std::vector<pid_t> out;
  std::ifstream in(fmt::format("/proc/{}/task/{}/children", getpid(), getpid()));
  pid_t p;
  while (in >> p) {
    if (p != except) out.push_back(p);
  }
  // Children of other threads (the server's thread forks the zygote and its workers' parent is
  // that thread).
  DIR* d = opendir("/proc/self/task");
  while (d != nullptr) {
    struct dirent* e = readdir(d);
    if (e == nullptr) break;
    if (e->d_name[0] == '.') continue;
    std::ifstream t(fmt::format("/proc/self/task/{}/children", e->d_name));
    while (t >> p) {
      if (p != except && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    }
  }
  if (d != nullptr) closedir(d);
  return out;
}

int Main(int argc, char** argv) {
  int runs = 20;
  Template t = PythonTemplate();
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0) {
      runs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--template") == 0) {
      std::string name = argv[++i];
      if (name != "python" && name != "node") {
        std::fprintf(stderr, "forkserver_bench: --template %s: python or node\n", name.c_str());
        return 2;
      }
      if (name == "node") t = NodeTemplate();
    }
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "forkserver_bench: needs root\n");
    return 2;
  }
  setgroups(0, nullptr);
  engine::CgroupOptions cg;  // the default base, as airlock run's
  auto cgroups = engine::CgroupDriver::Detect(cg);
  if (!cgroups.ok()) {
    std::fprintf(stderr, "cgroups: %s\n", std::string(cgroups.status().message()).c_str());
    return 1;
  }
  char tmpl[] = "/tmp/airlock-forkserver-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  std::string dir = tmpl;
  spec::SandboxSpec spec;  // the defaults: level 2, network none
  spec.resources.memory_mb = 1024;

  forkserver::ForkServerOptions options;
  options.template_name = t.name;
  options.preload = t.preload;
  options.zygote_path = t.zygote;
  options.socket_path = dir + "/fs.sock";
  options.spec = spec;
  options.cgroups = cgroups->get();
  options.run_dir_base = dir + "/run";
  auto t_zygote = Clock::now();
  auto server = forkserver::ForkServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "fork-server: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  double zygote_ms = Ms(Clock::now() - t_zygote);

  std::vector<double> fs_ms, cold_first_ms, cold_total_ms;
  for (int i = 0; i < runs + 1; ++i) {  // the first round warms caches and is not counted
    auto t0 = Clock::now();
    auto r = forkserver::Run(options.socket_path, {.template_name = t.name, .code = t.snippet});
    double fs = Ms(Clock::now() - t0);
    if (!r.ok() || r->stdout_preview != t.output) {
      std::fprintf(stderr, "fork-server run failed: %s\n",
                   r.ok() ? r->stderr_preview.c_str() : std::string(r.status().message()).c_str());
      return 1;
    }
    engine::SandboxOptions sb;
    sb.spec = spec;
    sb.cgroups = cgroups->get();
    sb.run_dir_base = dir + "/run";
    std::optional<double> first;
    auto t1 = Clock::now();
    engine::ExecOptions exec;
    exec.on_output = [&](OutputCapture::Stream s, std::string_view) {
      if (s == OutputCapture::kStdout && !first) first = Ms(Clock::now() - t1);
    };
    auto sandbox = engine::NativeSandbox::Create(sb);
    if (!sandbox.ok()) {
      std::fprintf(stderr, "cold: %s\n", std::string(sandbox.status().message()).c_str());
      return 1;
    }
    auto c = (*sandbox)->Exec({.argv = t.cold_argv}, exec);
    double cold_total = Ms(Clock::now() - t1);
    (void)(*sandbox)->Destroy();
    if (!c.ok() || c->stdout_preview != t.output || !first) {
      std::fprintf(stderr, "cold run failed: %s\n",
                   c.ok() ? c->stderr_preview.c_str() : std::string(c.status().message()).c_str());
      return 1;
    }
    if (i == 0) continue;
    fs_ms.push_back(fs);
    cold_first_ms.push_back(*first);
    cold_total_ms.push_back(cold_total);
  }
  double fs_med = Percentile(fs_ms, 0.5), cold_med = Percentile(cold_first_ms, 0.5);
  std::printf("fork-server vs cold %s in a fresh sandbox, snippet: %s\n", t.cold_argv[0].c_str(),
              t.snippet);
  std::printf("runs: %d alternated (after one warm-up round); zygote start (preload %s): %.1f ms\n",
              runs, t.preload, zygote_ms);
  std::printf("%-34s %10s %10s\n", "", "median ms", "p99 ms");
  std::printf("%-34s %10.1f %10.1f\n", "fork-server request -> reply", fs_med,
              Percentile(fs_ms, 0.99));
  std::printf("%-34s %10.1f %10.1f\n", "cold: request -> first output", cold_med,
              Percentile(cold_first_ms, 0.99));
  std::printf("%-34s %10.1f %10.1f\n", "cold: request -> result", Percentile(cold_total_ms, 0.5),
              Percentile(cold_total_ms, 0.99));
  std::printf("speed-up (cold first output / fork-server): %.1fx (goal >= 10x)\n",
              cold_med / fs_med);

  // An idle worker: the module used, blocked in a sleep or timer. The request runs on a thread; we
  // find the worker among our children and read its memory once it said ready.
  pid_t zygote = (*server)->zygote_pid();
  std::atomic<bool> done{false};
  std::thread client([&] {
    (void)forkserver::Run(
        options.socket_path,
        {.template_name = t.name, .code = t.idle, .timeout = std::chrono::seconds(120)});
    done = true;
  });
  pid_t worker = -1;
  for (int i = 0; i < 200 && worker < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::vector<pid_t> kids = Children(zygote);
    if (!kids.empty()) worker = kids[0];
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // into its sleep
  if (worker > 0) {
    Memory w = MemoryOf(worker);
    Memory z = MemoryOf(zygote);
    std::printf(
        "idle worker (module used, waiting): PSS %.1f MiB, RSS %.1f MiB, private %.1f MiB\n",
        w.pss / 1024.0, w.rss / 1024.0, w.private_kb / 1024.0);
    std::printf("zygote (preload %s): PSS %.1f MiB, RSS %.1f MiB\n", t.preload, z.pss / 1024.0,
                z.rss / 1024.0);
    kill(worker, SIGKILL);
  } else {
    std::printf("idle worker: not found\n");
  }
  client.join();
  (*server)->Stop();
  (void)RemoveTree(dir);
  return done ? 0 : 1;
}

}  // namespace
}  // namespace airlock

int main(int argc, char** argv) { return airlock::Main(argc, argv); }
