// The node daemon end to end over loopback HTTP (docs/perf.md, "Node daemon"): time to
// interactive (create -> first command completed) sequential and as a burst, the warm exec round
// trip, memory per idle sandbox at a given density, and the daemon's RSS and open fds over many
// create/exec/destroy cycles. The reference in the same run is the process floor: bwrap running
// `true` with every namespace unshared (what any sandbox start pays at least).
//
//   daemon_bench [--seq N] [--burst N] [--warm N] [--density N] [--cycles N] [--level 1|2]
//                [--warm-pool N] [--airlockd PATH]
//
// With --warm-pool N the daemon keeps N sandboxes of its default template started (airlockd
// --warm-pool); the sequential and burst runs then wait for the pool to be full before each
// sample (time to interactive with a ready pool) and print how many creates it served, and the
// warm exec waits for it too.
//
// Starts its own airlockd (next to this binary's build: bin/airlockd, or PATH, e.g. another
// build's, to compare two builds alternately) on a free loopback port with a fresh data
// directory, and stops it (and every sandbox) at the end.
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/files.h"
#include "http/client.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace airlock {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using verb = boost::beast::http::verb;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Stats {
  double p50 = 0, p99 = 0, max = 0;
};
Stats Percentiles(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
  return {at(0.5), at(0.99), v.back()};
}

pid_t Spawn(const std::vector<std::string>& args, int stdout_fd = -1) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (stdout_fd >= 0) posix_spawn_file_actions_adddup2(&fa, stdout_fd, 1);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

int WaitFor(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

struct Daemon {
  std::string bin, dir, url, key;
  pid_t pid = -1;
  int warm_pool = 0;

  bool Start() {
    char tmpl[] = "/tmp/airlock-daemon-bench-XXXXXX";
    dir = ::mkdtemp(tmpl);
    std::string out = dir + "/key";
    FILE* f = std::fopen(out.c_str(), "w");
    pid_t p = Spawn({bin, "admin", "create-key", "--data-dir", dir + "/data", "--name", "bench"},
                    fileno(f));
    std::fclose(f);
    if (p < 0 || WaitFor(p) != 0) return false;
    std::string text = ReadFile(out).value_or("");
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("ak_", 0) == 0) key = line;
    }
    int port = FreePort();
    url = "http://127.0.0.1:" + std::to_string(port);
    pid = Spawn({bin, "--data-dir", dir + "/data", "--listen", "127.0.0.1:" + std::to_string(port),
                 "--max-sandboxes", "2000", "--workers", "128", "--warm-pool",
                 std::to_string(warm_pool)});
    for (int i = 0; i < 500; ++i) {
      auto c = ClientPtr();
      if (c && c->Send(verb::get, "/healthz").ok()) return !key.empty();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  std::unique_ptr<http::Client> ClientPtr() const {
    auto c = http::Client::Create({.base_url = url, .api_key = key});
    return c.ok() ? *std::move(c) : nullptr;
  }
  void Stop() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      WaitFor(pid);
      pid = -1;
    }
    // The daemon keeps its node's cgroup (airlock/<node>) across restarts; this node ends here.
    // Only empty cgroups go (rmdir), after every sandbox was destroyed.
    std::string node = ReadFile(dir + "/data/node-id", 256).value_or("");
    node = node.substr(0, node.find('\n'));
    if (!node.empty()) {
      DIR* d = ::opendir("/sys/fs/cgroup");
      while (dirent* e = d != nullptr ? ::readdir(d) : nullptr) {
        if (e->d_name[0] == '.') continue;
        ::rmdir((std::string("/sys/fs/cgroup/") + e->d_name + "/airlock/" + node).c_str());
      }
      if (d != nullptr) ::closedir(d);
    }
    (void)RemoveTree(dir);
  }
};

// Returns the sandbox id, or "" (and prints why) on failure.
std::string Create(http::Client& c, const std::string& spec) {
  auto r = c.Send(verb::post, "/v1/sandboxes", spec, "application/json");
  if (!r.ok() || r->status >= 300) {
    std::fprintf(stderr, "create: %s\n", r.ok() ? r->body.c_str() : r.status().ToString().c_str());
    return "";
  }
  return json::parse(r->body).value("id", "");
}

bool ExecTrue(http::Client& c, const std::string& id) {
  auto r = c.Send(verb::post, "/v1/sandboxes/" + id + "/exec", R"({"argv":["true"]})",
                  "application/json");
  if (!r.ok() || r->status != 200) {
    std::fprintf(stderr, "exec: %s\n", r.ok() ? r->body.c_str() : r.status().ToString().c_str());
    return false;
  }
  return json::parse(r->body).value("exit_code", -1) == 0;
}

void Destroy(http::Client& c, const std::string& id) {
  (void)c.Send(verb::delete_, "/v1/sandboxes/" + id);
}

// A series' value in /metrics (-1 when absent).
double Metric(http::Client& c, const std::string& series) {
  auto r = c.Send(verb::get, "/metrics");
  if (!r.ok()) return -1;
  std::string body = "\n" + r->body;
  size_t at = body.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::atof(body.c_str() + at + series.size() + 2);
}

// Waits (up to a minute) until the warm pool holds `n` sandboxes; returns the ms it took.
double WaitForPool(http::Client& c, int n) {
  auto t0 = Clock::now();
  while (n > 0 && Metric(c, "airlock_warm_pool_ready") < n &&
         Clock::now() - t0 < std::chrono::minutes(1)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Ms(Clock::now() - t0);
}

int64_t StatusKb(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field, 0) == 0) return std::atoll(line.c_str() + std::strlen(field));
  }
  return 0;
}

int64_t PssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Pss:", 0) == 0) return std::atoll(line.c_str() + 4);
  }
  return 0;
}

int CountFds(pid_t pid) {
  int n = 0;
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

// CPU time (user + system) a process has used so far, in ms (clock-tick resolution).
double ProcessCpuMs(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat", 4096).value_or("");
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14 || i == 15) ticks += std::atof(f.c_str());  // utime, stime
  }
  return ticks * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// CPU time of everything in a sandbox's cgroup (airlock-init and its commands), in ms: cgroup v1
// cpuacct.usage, else v2 cpu.stat usage_usec; -1 when neither is there.
double SandboxCpuMs(const std::string& node, const std::string& id) {
  std::string rel = "airlock/" + node + "/" + id;
  if (auto ns = ReadFile("/sys/fs/cgroup/cpuacct/" + rel + "/cpuacct.usage", 64); ns.ok()) {
    return std::atof(ns->c_str()) / 1e6;
  }
  for (const char* root : {"/sys/fs/cgroup/", "/sys/fs/cgroup/unified/"}) {
    std::string text = ReadFile(root + rel + "/cpu.stat", 4096).value_or("");
    if (size_t at = text.find("usage_usec "); at != std::string::npos) {
      return std::atof(text.c_str() + at + 11) / 1e3;
    }
  }
  return -1;
}

// pid -> parent pid, for every process.
std::map<pid_t, pid_t> Parents() {
  std::map<pid_t, pid_t> out;
  DIR* d = ::opendir("/proc");
  while (dirent* e = ::readdir(d)) {
    pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat", 4096).value_or("");
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    out[pid] = std::atoi(stat.c_str() + close + 4);  // ") S ppid"
  }
  ::closedir(d);
  return out;
}

double BwrapTrueMs() {
  auto t0 = Clock::now();
  pid_t p = Spawn({"/usr/bin/bwrap", "--unshare-all", "--die-with-parent",
                   "--ro-bind",      "/usr",          "/usr",
                   "--symlink",      "usr/lib",       "/lib",
                   "--symlink",      "usr/lib64",     "/lib64",
                   "--symlink",      "usr/bin",       "/bin",
                   "--proc",         "/proc",         "--dev",
                   "/dev",           "--tmpfs",       "/tmp",
                   "/usr/bin/true"});
  WaitFor(p);
  return Ms(Clock::now() - t0);
}

void PrintRow(const char* name, const Stats& s, const char* extra = "") {
  std::printf("%-34s p50 %8.2f ms  p99 %8.2f ms  max %8.2f ms  %s\n", name, s.p50, s.p99, s.max,
              extra);
}

int Main(int argc, char** argv) {
  int seq = 100, burst = 100, warm = 300, density = 500, cycles = 2000, level = 2, pool = 0;
  std::string airlockd = AIRLOCK_BENCH_AIRLOCKD;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (a == "--airlockd")
      airlockd = argv[i + 1];
    else if (a == "--seq")
      seq = v;
    else if (a == "--burst")
      burst = v;
    else if (a == "--warm")
      warm = v;
    else if (a == "--density")
      density = v;
    else if (a == "--cycles")
      cycles = v;
    else if (a == "--level")
      level = v;
    else if (a == "--warm-pool")
      pool = v;
    else {
      std::fprintf(stderr, "daemon_bench: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const std::string spec = R"({"spec":{"level":)" + std::to_string(level) + "}}";
  Daemon d;
  d.bin = airlockd;
  d.warm_pool = pool;
  if (!d.Start()) {
    std::fprintf(stderr, "daemon_bench: airlockd did not start\n");
    d.Stop();
    return 1;
  }
  auto client = d.ClientPtr();
  std::printf("airlockd %s, level %d, %u cpus, warm pool %d\n", d.url.c_str(), level,
              std::thread::hardware_concurrency(), pool);
  const std::string hits = R"(airlock_warm_pool_claims_total{result="hit"})";

  // 1. Time to interactive, sequential, alternating with the bwrap floor.
  std::vector<double> tti, floor;
  int failures = 0;
  for (int i = 0; i < seq; ++i) {
    floor.push_back(BwrapTrueMs());
    WaitForPool(*client, pool);
    auto t0 = Clock::now();
    std::string id = Create(*client, spec);
    bool ok = !id.empty() && ExecTrue(*client, id);
    tti.push_back(Ms(Clock::now() - t0));
    failures += !ok;
    if (!id.empty()) Destroy(*client, id);
  }
  Stats s_tti = Percentiles(tti), s_floor = Percentiles(floor);
  char extra[128];
  std::snprintf(extra, sizeof extra, "(%d runs, %d failed; %.1fx the floor at p50)", seq, failures,
                s_tti.p50 / s_floor.p50);
  PrintRow("time to interactive, sequential", s_tti, extra);
  PrintRow("floor: bwrap true (same run)", s_floor);
  if (pool > 0) std::printf("  served by the warm pool: %.0f\n", Metric(*client, hits));

  // 2. Burst: `burst` clients at once, each create -> exec true.
  if (burst > 0) {
    double before = Metric(*client, hits);
    if (pool > 0) std::printf("  the pool refilled in %.0f ms\n", WaitForPool(*client, pool));
    std::vector<double> times(burst);
    std::vector<std::string> ids(burst);
    std::atomic<int> ok{0}, ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int i = 0; i < burst; ++i) {
      threads.emplace_back([&, i] {
        auto c = d.ClientPtr();
        ++ready;
        while (!go) std::this_thread::yield();
        auto t0 = Clock::now();
        ids[i] = c ? Create(*c, spec) : "";
        bool good = !ids[i].empty() && ExecTrue(*c, ids[i]);
        times[i] = Ms(Clock::now() - t0);
        ok += good;
      });
    }
    while (ready < burst) std::this_thread::yield();
    auto t0 = Clock::now();
    go = true;
    for (auto& t : threads) t.join();
    double wall = Ms(Clock::now() - t0);
    std::snprintf(extra, sizeof extra, "(%d/%d succeeded, %.0f ms for all)", ok.load(), burst,
                  wall);
    PrintRow("time to interactive, burst", Percentiles(times), extra);
    if (pool > 0) std::printf("  served by the warm pool: %.0f\n", Metric(*client, hits) - before);
    for (const auto& id : ids) {
      if (!id.empty()) Destroy(*client, id);
    }
  }

  // 3. Warm exec round trip, and the CPU time each exec costs (less noisy than wall time on a
  // shared host): the daemon's, the sandbox's shim's, and the sandbox's (airlock-init, `true`).
  // With a pool, after it has refilled: its restarts would otherwise run beside the execs.
  {
    std::string id = Create(*client, spec);
    if (pool > 0 && warm > 0) {  // the burst's and this create's
      std::printf("  the pool refilled in %.0f ms\n", WaitForPool(*client, pool));
    }
    std::string node = ReadFile(d.dir + "/data/node-id", 256).value_or("");
    node = node.substr(0, node.find('\n'));
    pid_t shim = std::atoi(
        ReadFile(d.dir + "/data/sandboxes/" + id + "/shim.sock.pid", 64).value_or("0").c_str());
    double daemon_cpu = ProcessCpuMs(d.pid), shim_cpu = ProcessCpuMs(shim);
    double sandbox_cpu = SandboxCpuMs(node, id);
    std::vector<double> times;
    for (int i = 0; i < warm && !id.empty(); ++i) {
      auto t0 = Clock::now();
      if (!ExecTrue(*client, id)) break;
      times.push_back(Ms(Clock::now() - t0));
    }
    std::snprintf(extra, sizeof extra, "(%zu runs)", times.size());
    PrintRow("warm exec round trip (true)", Percentiles(times), extra);
    double n = std::max<double>(1, static_cast<double>(times.size()));
    std::printf("  CPU per exec: airlockd %.3f ms, its shim %.3f ms, in the sandbox %.3f ms\n",
                (ProcessCpuMs(d.pid) - daemon_cpu) / n, (ProcessCpuMs(shim) - shim_cpu) / n,
                (SandboxCpuMs(node, id) - sandbox_cpu) / n);
    if (!id.empty()) Destroy(*client, id);
  }

  // 4. Density: `density` idle sandboxes at once; memory of each one's processes (its shim and
  // everything under it: airlock-init and, on the egress path, its forwarder), as PSS.
  {
    std::vector<std::string> ids;
    auto t0 = Clock::now();
    for (int i = 0; i < density; ++i) {
      std::string id = Create(*client, spec);
      if (id.empty()) break;
      ids.push_back(id);
    }
    double create_s = Ms(Clock::now() - t0) / 1000;
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::map<pid_t, pid_t> parents = Parents();
    std::map<pid_t, std::vector<pid_t>> children;
    for (auto [pid, ppid] : parents) children[ppid].push_back(pid);
    int64_t pss_total = 0, rss_total = 0;
    size_t processes = 0;
    for (const auto& id : ids) {
      pid_t shim = std::atoi(
          ReadFile(d.dir + "/data/sandboxes/" + id + "/shim.sock.pid", 64).value_or("0").c_str());
      std::vector<pid_t> todo = {shim};
      while (!todo.empty() && shim > 0) {
        pid_t p = todo.back();
        todo.pop_back();
        pss_total += PssKb(p);
        rss_total += StatusKb(p, "VmRSS:");
        ++processes;
        for (pid_t c : children[p]) todo.push_back(c);
      }
    }
    size_t n = std::max<size_t>(ids.size(), 1);
    std::printf("density: %zu idle sandboxes (created in %.1f s), %zu processes\n", ids.size(),
                create_s, processes);
    std::printf("  memory per idle sandbox: PSS %.2f MiB, RSS %.2f MiB (shim + init)\n",
                pss_total / 1024.0 / n, rss_total / 1024.0 / n);
    std::printf("  airlockd RSS with them: %.1f MiB, fds %d\n", StatusKb(d.pid, "VmRSS:") / 1024.0,
                CountFds(d.pid));
    for (const auto& id : ids) Destroy(*client, id);
  }

  // 5. The daemon's RSS and fds over create/exec/destroy cycles.
  {
    std::printf("cycles (create, exec true, destroy): airlockd RSS and fds\n");
    int64_t first_rss = 0;
    int first_fds = 0;
    for (int i = 0; i <= cycles; ++i) {
      if (i % std::max(1, cycles / 10) == 0) {
        int64_t rss = StatusKb(d.pid, "VmRSS:");
        int fds = CountFds(d.pid);
        if (i == 0) first_rss = rss, first_fds = fds;
        std::printf("  after %6d: RSS %7.1f MiB (%+.1f)  fds %4d (%+d)\n", i, rss / 1024.0,
                    (rss - first_rss) / 1024.0, fds, fds - first_fds);
        std::fflush(stdout);
      }
      if (i == cycles) break;
      std::string id = Create(*client, spec);
      if (id.empty()) continue;
      ExecTrue(*client, id);
      Destroy(*client, id);
    }
  }
  d.Stop();
  return 0;
}

}  // namespace
}  // namespace airlock

int main(int argc, char** argv) { return airlock::Main(argc, argv); }
