#include "netproxy/testing/test_net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/ids.h"
#include "common/status.h"
#include "fmt/format.h"

namespace airlock::netproxy::testing {
namespace {

constexpr std::string_view kNsPrefix = "airlock-test-";

absl::Status Ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  ASSIGN_OR_RETURN(CommandOutput out, RunCommand(argv, {}, std::chrono::seconds(20)));
  if (out.exit_code != 0) {
    return Internal(fmt::format("ip {}: {}", fmt::join(args, " "), out.output));
  }
  return absl::OkStatus();
}

void SetTimeouts(int fd) {
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

}  // namespace

void TestNetwork::RemoveStale() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    std::string name = entry.path().filename();
    if (!name.starts_with(kNsPrefix)) continue;
    // The pid in the name tells whether its test process is still alive.
    int pid = std::atoi(name.c_str() + kNsPrefix.size());
    if (pid > 0 && ::kill(pid, 0) == 0) continue;
    RunCommand({"ip", "netns", "del", name}).IgnoreError();
  }
}

absl::StatusOr<std::unique_ptr<TestNetwork>> TestNetwork::Create() {
  if (geteuid() != 0) return FailedPrecondition("network namespaces need root");
  RemoveStale();
  std::unique_ptr<TestNetwork> net(new TestNetwork());
  net->original_ns_ = UniqueFd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!net->original_ns_) return ErrnoStatus(errno, "open own network namespace");
  if (::unshare(CLONE_NEWNET) != 0) {
    return FailedPrecondition(fmt::format("unshare(CLONE_NEWNET): {}", std::strerror(errno)));
  }
  std::string tag = fmt::format("{}{}-{}", kNsPrefix, ::getpid(), RandomHex(3));
  net->public_ns_ = tag + "-pub";
  net->sandbox_ns_ = tag + "-sb";
  net->sandbox2_ns_ = tag + "-sb2";
  RETURN_IF_ERROR(Ip({"link", "set", "lo", "up"}));
  for (const std::string& ns : {net->public_ns_, net->sandbox_ns_, net->sandbox2_ns_}) {
    RETURN_IF_ERROR(Ip({"netns", "add", ns}));
    RETURN_IF_ERROR(Ip({"-n", ns, "link", "set", "lo", "up"}));
  }
  RETURN_IF_ERROR(Ip(
      {"link", "add", "alp0", "type", "veth", "peer", "name", "alp1", "netns", net->public_ns_}));
  // Host .1 on the proxy side, .10 in the public namespace, for each range.
  for (const char* net_prefix : {"192.0.2", "198.51.100", "203.0.113", "100.64.7"}) {
    RETURN_IF_ERROR(Ip({"addr", "add", fmt::format("{}.1/24", net_prefix), "dev", "alp0"}));
    RETURN_IF_ERROR(Ip({"-n", net->public_ns_, "addr", "add", fmt::format("{}.10/24", net_prefix),
                        "dev", "alp1"}));
  }
  RETURN_IF_ERROR(Ip({"link", "set", "alp0", "up"}));
  RETURN_IF_ERROR(Ip({"-n", net->public_ns_, "link", "set", "alp1", "up"}));
  return net;
}

TestNetwork::~TestNetwork() {
  for (const std::string& ns : {public_ns_, sandbox_ns_, sandbox2_ns_}) {
    if (!ns.empty()) RunCommand({"ip", "netns", "del", ns}).IgnoreError();
  }
  if (original_ns_) ::setns(original_ns_.get(), CLONE_NEWNET);
}

absl::Status InNetns(const std::string& netns, const std::function<void()>& fn) {
  UniqueFd fd(::open(fmt::format("/run/netns/{}", netns).c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(errno, fmt::format("open netns {}", netns));
  absl::Status status;
  std::thread t([&] {
    if (::setns(fd.get(), CLONE_NEWNET) != 0) {
      status = ErrnoStatus(errno, fmt::format("setns {}", netns));
      return;
    }
    fn();
  });
  t.join();
  return status;
}

absl::StatusOr<CommandOutput> RunCommand(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& env,
                                         std::chrono::seconds timeout) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  std::vector<std::string> full = {"env"};
  full.insert(full.end(), env.begin(), env.end());
  full.insert(full.end(), argv.begin(), argv.end());
  std::vector<char*> args;
  for (std::string& a : full) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus(errno, "fork");
  if (pid == 0) {
    ::dup2(pipefd[1], 1);
    ::dup2(pipefd[1], 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::setpgid(0, 0);
    ::execvp("env", args.data());
    ::_exit(127);
  }
  ::close(pipefd[1]);
  UniqueFd out(pipefd[0]);
  CommandOutput result;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool killed = false;
  char buf[4096];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !killed) {
      ::kill(-pid, SIGKILL);
      killed = true;
    }
    pollfd p{out.get(), POLLIN, 0};
    int r = ::poll(&p, 1, killed ? 1000 : static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (killed) break;
      continue;
    }
    ssize_t n = ::read(out.get(), buf, sizeof(buf));
    if (n <= 0) break;
    if (result.output.size() < (4 << 20)) result.output.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = !killed && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

ForwarderProcess::ForwarderProcess(const std::string& binary, const std::string& netns,
                                   const std::string& listen, const std::string& socket_path) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return;
  std::vector<std::string> args;
  if (!netns.empty()) args = {"ip", "netns", "exec", netns};
  for (const std::string& a : {binary, std::string("--listen"), listen, std::string("--socket"),
                               socket_path, std::string("--ready-fd"), std::string("3")}) {
    args.push_back(a);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(ready[1], 3);  // dup2 clears close-on-exec on the copy
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(ready[1]);
  pollfd p{ready[0], POLLIN, 0};
  char buf[16] = {};
  if (::poll(&p, 1, 10'000) == 1 && ::read(ready[0], buf, sizeof(buf) - 1) > 0) {
    ready_ = std::string(buf) == "ready\n";
  }
  ::close(ready[0]);
}

ForwarderProcess::~ForwarderProcess() { Stop(); }

int ForwarderProcess::Stop() {
  if (pid_ <= 0) return 0;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

uint16_t FreeLoopbackPort() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), len) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    return 0;
  }
  return ntohs(sa.sin_port);
}

absl::StatusOr<UniqueFd> ConnectTcp(const std::string& address, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, address.c_str(), &sa.sin_addr) != 1) return InvalidArgument(address);
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus(errno, "socket");
  SetTimeouts(fd.get());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return ErrnoStatus(errno, fmt::format("connect {}:{}", address, port));
  }
  return fd;
}

absl::StatusOr<UniqueFd> ConnectUnix(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof(sa.sun_path)) return InvalidArgument(path);
  std::memcpy(sa.sun_path, path.data(), path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus(errno, "socket");
  SetTimeouts(fd.get());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return ErrnoStatus(errno, fmt::format("connect {}", path));
  }
  return fd;
}

absl::Status SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "send");
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

std::string ReadUntil(int fd, std::string_view stop, size_t max) {
  std::string out;
  char buf[8192];
  while (out.size() < max) {
    if (!stop.empty() && out.find(stop) != std::string::npos) break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string PatternBytes(size_t n, uint32_t seed) {
  std::string out(n, '\0');
  uint32_t x = seed | 1;
  for (char& c : out) {
    // xorshift32
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x >> 24);
  }
  return out;
}

absl::StatusOr<std::string> SendHalfCloseAndReadAll(int fd, std::string_view data) {
  absl::Status sent;
  std::thread sender([&] {
    sent = SendAll(fd, data);
    if (sent.ok() && ::shutdown(fd, SHUT_WR) != 0) sent = ErrnoStatus(errno, "shutdown");
  });
  std::string out;
  std::vector<char> buf(1 << 16);
  absl::Status received;
  while (true) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) received = ErrnoStatus(errno, fmt::format("recv after {} bytes", out.size()));
    if (n <= 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
  }
  sender.join();
  RETURN_IF_ERROR(sent);
  RETURN_IF_ERROR(received);
  return out;
}

}  // namespace airlock::netproxy::testing
