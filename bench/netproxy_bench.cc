// Egress proxy figures against a direct loopback connection, measured in the same run:
//   1. a 1 GiB download: direct, through the proxy (CONNECT and plain HTTP, TCP and unix-socket
//      listeners) and through airlock-forwarder + proxy (the path a sandbox uses);
//   2. the latency a new connection pays (connect + CONNECT + one request), median of N;
//   3. 1,000 concurrent tunnels held open: process memory and descriptors per connection.
// Each download also reports the CPU time all of its threads used per GiB (this process and the
// forwarder, kernel time included), which says what a path costs whatever the machine's load.
// Everything runs on 127.0.0.1 in this process (plus the forwarder process). Goals from the
// issue: throughput >= 80% of direct, added latency <= 0.5 ms median, bounded memory.
//
// Usage: netproxy_bench [--bytes N] [--download-rounds N] [--latency-rounds N] [--connections N]
//                       [--forwarder PATH] [--paths SUBSTRING,...]
// --paths keeps "direct" and the paths whose names contain one of the substrings (for profiling).
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/ids.h"
#include "fmt/format.h"
#include "netproxy/egress_proxy.h"
#include "netproxy/testing/test_net.h"
#include "netproxy/testing/test_servers.h"

namespace airlock::netproxy {
namespace {

using Clock = std::chrono::steady_clock;
using testing::ConnectTcp;
using testing::ConnectUnix;
using testing::ReadUntil;
using testing::SendAll;
using testing::TestServer;

struct Target {
  std::string name;
  std::string tcp_address;  // connect here (TCP), or
  uint16_t tcp_port = 0;
  std::string unix_path;  // here (unix socket)
  bool connect = false;   // send CONNECT first
  bool absolute = false;  // plain HTTP absolute-form request
};

UniqueFd Open(const Target& t) {
  absl::StatusOr<UniqueFd> fd =
      t.unix_path.empty() ? ConnectTcp(t.tcp_address, t.tcp_port) : ConnectUnix(t.unix_path);
  if (!fd.ok()) {
    std::fprintf(stderr, "%s: %s\n", t.name.c_str(), std::string(fd.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(fd);
}

// Opens a connection to the origin through `t` and sends GET `path`; returns the socket with the
// response head consumed and the body bytes already read in *prefix.
UniqueFd Request(const Target& t, uint16_t origin_port, const std::string& path,
                 size_t* prefix_body) {
  UniqueFd fd = Open(t);
  std::string origin = fmt::format("origin.test:{}", origin_port);
  if (t.connect) {
    (void)SendAll(fd.get(), fmt::format("CONNECT {} HTTP/1.1\r\n\r\n", origin));
    std::string head = ReadUntil(fd.get(), "\r\n\r\n");
    if (!head.starts_with("HTTP/1.1 200")) {
      std::fprintf(stderr, "%s: CONNECT refused: %s\n", t.name.c_str(), head.c_str());
      std::exit(1);
    }
  }
  std::string target = t.absolute ? fmt::format("http://{}{}", origin, path) : path;
  (void)SendAll(fd.get(), fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\n\r\n", target, origin));
  std::string head = ReadUntil(fd.get(), "\r\n\r\n");
  *prefix_body = head.size() - (head.find("\r\n\r\n") + 4);
  return fd;
}

double Seconds(const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; }

// CPU seconds used so far by this process (client, origin and proxy threads, and the softirq work
// the kernel charges to them) plus the forwarder process.
double CpuSeconds(pid_t forwarder) {
  rusage self{};
  ::getrusage(RUSAGE_SELF, &self);
  double cpu = Seconds(self.ru_utime) + Seconds(self.ru_stime);
  std::ifstream stat(fmt::format("/proc/{}/stat", forwarder));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields 14 and 15 (utime, stime) follow the ")" that ends the command name.
  size_t close = text.rfind(')');
  if (close == std::string::npos) return cpu;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 13; ++i) rest >> field;
  double utime = 0, stime = 0;
  rest >> utime >> stime;
  return cpu + (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct DownloadResult {
  double mib_per_s;
  double cpu_s_per_gib;  // all threads of the path, wherever they ran
};

DownloadResult Download(const Target& t, uint16_t origin_port, size_t bytes, pid_t forwarder) {
  size_t got = 0;
  double cpu0 = CpuSeconds(forwarder);
  auto start = Clock::now();
  UniqueFd fd = Request(t, origin_port, fmt::format("/bytes/{}", bytes), &got);
  static std::vector<char> buf(1 << 20);
  while (got < bytes) {
    ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (got != bytes) {
    std::fprintf(stderr, "%s: short download %zu of %zu\n", t.name.c_str(), got, bytes);
    std::exit(1);
  }
  double cpu = CpuSeconds(forwarder) - cpu0;
  return {static_cast<double>(bytes) / secs / (1 << 20),
          cpu / (static_cast<double>(bytes) / (1 << 30))};
}

double ConnectMs(const Target& t, uint16_t origin_port) {
  auto start = Clock::now();
  size_t prefix = 0;
  UniqueFd fd = Request(t, origin_port, "/hello", &prefix);
  if (prefix < 18) ReadUntil(fd.get(), "\n");
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int64_t StatusKb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(key)) return std::atoll(line.c_str() + std::strlen(key));
  }
  return 0;
}

struct HoldResult {
  double rss_kb_per_conn;
  double fds_per_conn;
};

// Opens `n` connections through `t` to the echo server, exchanges a message on each, and reports
// this process's growth per connection while they are all open.
HoldResult Hold(const Target& t, uint16_t echo_port, int n) {
  int64_t rss0 = StatusKb("VmRSS:");
  size_t fds0 = OpenFds().size();
  std::vector<UniqueFd> fds;
  fds.reserve(n);
  for (int i = 0; i < n; ++i) {
    UniqueFd fd = Open(t);
    if (t.connect) {
      (void)SendAll(fd.get(), fmt::format("CONNECT echo.test:{} HTTP/1.1\r\n\r\n", echo_port));
      if (!ReadUntil(fd.get(), "\r\n\r\n").starts_with("HTTP/1.1 200")) std::exit(1);
    }
    fds.push_back(std::move(fd));
  }
  for (int i = 0; i < n; ++i) (void)SendAll(fds[i].get(), fmt::format("{}|", i));
  for (int i = 0; i < n; ++i) ReadUntil(fds[i].get(), "|");
  HoldResult r{static_cast<double>(StatusKb("VmRSS:") - rss0) / n,
               static_cast<double>(OpenFds().size() - fds0) / n};
  return r;
}

const char* Verdict(bool ok) { return ok ? "meets goal" : "MISSES goal"; }

}  // namespace
}  // namespace airlock::netproxy

int main(int argc, char** argv) {
  using namespace airlock;
  using namespace airlock::netproxy;
  size_t bytes = size_t{1} << 30;
  int rounds = 2000;
  int download_rounds = 5;
  int connections = 1000;
  std::string forwarder = AIRLOCK_FORWARDER_PATH;
  std::string paths;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--bytes") bytes = std::stoull(argv[i + 1]);
    if (flag == "--latency-rounds") rounds = std::atoi(argv[i + 1]);
    if (flag == "--download-rounds") download_rounds = std::atoi(argv[i + 1]);
    if (flag == "--connections") connections = std::atoi(argv[i + 1]);
    if (flag == "--forwarder") forwarder = argv[i + 1];
    if (flag == "--paths") paths = argv[i + 1];
  }

  auto origin = *TestServer::Start({TestServer::Kind::kHttp, "127.0.0.1", 0, "", "origin", ""});
  auto echo = *TestServer::Start({TestServer::Kind::kEcho, "127.0.0.1", 0, "", "echo", ""});
  EgressProxy::Options options;
  options.hosts = {{"origin.test", {"127.0.0.1"}}, {"echo.test", {"127.0.0.1"}}};
  options.resolution = NameResolution::kHostsOnly;
  options.max_connections_per_sandbox = static_cast<size_t>(connections) + 16;
  auto proxy = *EgressProxy::Start(options);
  spec::Network n;
  n.profile = spec::NetworkProfile::kDependencyEgress;
  n.allow_hosts = {fmt::format("origin.test:{}", origin->port()),
                   fmt::format("echo.test:{}", echo->port())};
  OperatorPolicy op;
  op.open_private_cidrs = {"127.0.0.1/32"};
  SandboxId id("sb-bench");
  std::string dir = fmt::format("/tmp/airlock-bench-{}", RandomHex(4));
  std::filesystem::create_directories(dir);
  std::string socket = dir + "/egress.sock";
  if (!proxy->AddSandbox(id, *Policy::Compile(n, op), socket).ok()) return 1;
  uint16_t proxy_port = *proxy->AddSandboxTcp(id, *Policy::Compile(n, op), "127.0.0.1:0");
  uint16_t fwd_port = testing::FreeLoopbackPort();
  testing::ForwarderProcess fwd(forwarder, "", fmt::format("127.0.0.1:{}", fwd_port), socket);
  if (!fwd.ready()) return 1;

  std::vector<Target> targets = {
      {"direct", "127.0.0.1", origin->port(), "", false, false},
      {"proxy CONNECT (tcp listener)", "127.0.0.1", proxy_port, "", true, false},
      {"proxy CONNECT (unix socket)", "", 0, socket, true, false},
      {"proxy plain HTTP (unix socket)", "", 0, socket, false, true},
      {"forwarder + proxy CONNECT", "127.0.0.1", fwd_port, "", true, false},
      {"forwarder + proxy plain HTTP", "127.0.0.1", fwd_port, "", false, true},
  };
  if (!paths.empty()) {
    std::vector<Target> kept = {targets[0]};
    for (size_t i = 1; i < targets.size(); ++i) {
      std::istringstream list(paths);
      for (std::string want; std::getline(list, want, ',');) {
        if (!want.empty() && targets[i].name.find(want) != std::string::npos) {
          kept.push_back(targets[i]);
          break;
        }
      }
    }
    targets = std::move(kept);
  }

  std::printf("egress proxy benchmark (1 proxy I/O thread, %ld cores)\n\n",
              sysconf(_SC_NPROCESSORS_ONLN));
  // Rounds interleave the paths so that load from other processes on the machine falls on all of
  // them alike; each path's share is the median of its per-round ratios to that round's direct.
  std::printf(
      "1. download of %zu MiB, %d interleaved rounds (median MiB/s, median share of "
      "direct, median CPU seconds per GiB of all the path's threads)\n",
      bytes >> 20, download_rounds);
  std::vector<std::vector<double>> mbs(targets.size()), share(targets.size()), cpu(targets.size());
  for (int r = 0; r < download_rounds; ++r) {
    double direct = 0;
    for (size_t i = 0; i < targets.size(); ++i) {
      DownloadResult v = Download(targets[i], origin->port(), bytes, fwd.pid());
      if (i == 0) direct = v.mib_per_s;
      mbs[i].push_back(v.mib_per_s);
      share[i].push_back(v.mib_per_s / direct * 100);
      cpu[i].push_back(v.cpu_s_per_gib);
    }
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    double pct = Median(share[i]);
    std::printf("   %-32s %8.0f MiB/s  %5.1f%%  %5.2f CPU s/GiB  %s\n", targets[i].name.c_str(),
                Median(mbs[i]), pct, Median(cpu[i]), i == 0 ? "" : Verdict(pct >= 80));
  }

  std::printf(
      "\n2. new connection + one small request, %d interleaved rounds (median ms, added "
      "over direct)\n",
      rounds);
  std::vector<std::vector<double>> ms(targets.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < targets.size(); ++i) {
      ms[i].push_back(ConnectMs(targets[i], origin->port()));
    }
  }
  double direct_ms = Median(ms[0]);
  for (size_t i = 0; i < targets.size(); ++i) {
    double m = Median(ms[i]);
    std::printf("   %-32s %7.3f ms  +%6.3f ms  %s\n", targets[i].name.c_str(), m, m - direct_ms,
                i == 0 ? "" : Verdict(m - direct_ms <= 0.5));
  }

  std::printf("\n3. %d concurrent connections held open (this process: client + servers + proxy)\n",
              connections);
  Target direct_echo{"direct", "127.0.0.1", echo->port(), "", false, false};
  Target proxied_echo{"proxy CONNECT (unix socket)", "", 0, socket, true, false};
  HoldResult d = Hold(direct_echo, echo->port(), connections);
  HoldResult p = Hold(proxied_echo, echo->port(), connections);
  std::printf("   direct:  %6.1f KiB RSS and %.1f fds per connection\n", d.rss_kb_per_conn,
              d.fds_per_conn);
  std::printf("   proxied: %6.1f KiB RSS and %.1f fds per connection\n", p.rss_kb_per_conn,
              p.fds_per_conn);
  std::printf(
      "   proxy's share: %.1f KiB RSS per connection (user space; worst case bounded by "
      "2 pipes of %zu KiB, or 2 x %zu KiB buffers + 2 x %zu KiB head buffers); active=%lu\n",
      p.rss_kb_per_conn - d.rss_kb_per_conn, options.buffer_bytes >> 10, options.buffer_bytes >> 10,
      std::max(options.buffer_bytes, options.max_header_bytes) >> 10,
      static_cast<unsigned long>(proxy->Stats(id)->active_connections));
  std::filesystem::remove_all(dir);
  return 0;
}
