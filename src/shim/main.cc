// airlock-shim: owns one sandbox for airlockd (shim/shim.h, shim/protocol.h).
//
//   airlock-shim --options FILE --socket PATH [--ready-fd N] [--detach]
//
// With --detach it forks at once and the parent exits, so the shim is nobody's child but init's
// (or the nearest subreaper's) and outlives the daemon that started it.
// Reads its options (written by the daemon), binds its socket, builds the sandbox, writes one
// JSON line to the ready descriptor (the hello answer, or {"ok": false, ...}) and serves until
// told to destroy the sandbox or sent SIGTERM. It detaches from the daemon's session so it
// survives the daemon; the sandbox never survives it.
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "common/files.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "fmt/format.h"
#include "shim/protocol.h"
#include "shim/shim.h"

namespace airlock::shim {
namespace {

absl::StatusOr<UniqueFd> Listen(const std::string& path) {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument(
        fmt::format("socket path {} is longer than {} bytes", path, sizeof(addr.sun_path) - 1));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus(errno, "socket");
  ::unlink(path.c_str());
  mode_t old = ::umask(077);
  int rc = ::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr));
  ::umask(old);
  if (rc != 0) return ErrnoStatus(errno, fmt::format("bind {}", path));
  if (::listen(fd.get(), 128) != 0) return ErrnoStatus(errno, fmt::format("listen {}", path));
  return fd;
}

void Ready(int fd, const nlohmann::json& j) {
  if (fd < 0) return;
  std::string line = j.dump() + "\n";
  (void)WriteAll(fd, line);
  ::close(fd);
}

int Main(int argc, char** argv) {
  std::string options_path, socket_path;
  int ready_fd = -1;
  bool detach = false;
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--detach") {
      detach = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "airlock-shim: %s needs a value\n", flag.c_str());
      return 2;
    }
    if (flag == "--options") {
      options_path = argv[i + 1];
    } else if (flag == "--socket") {
      socket_path = argv[i + 1];
    } else if (flag == "--ready-fd") {
      ready_fd = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "airlock-shim: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (options_path.empty() || socket_path.empty()) {
    std::fprintf(stderr,
                 "usage: airlock-shim --options FILE --socket PATH [--ready-fd N] [--detach]\n");
    return 2;
  }
  if (detach) {
    pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("airlock-shim: fork");
      return 1;
    }
    if (pid > 0) return 0;  // the starter reaps us at once; our child carries on
  }
  auto fail = [&](const absl::Status& s) {
    std::fprintf(stderr, "airlock-shim: %s\n", std::string(s.message()).c_str());
    Ready(ready_fd, ErrorResponse(s));
    return 1;
  };
  // Our own session, so signals meant for the daemon's terminal or process group miss us; no
  // core dumps or ptrace by others of our uid; supplementary groups would follow the sandbox.
  ::setsid();
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (::geteuid() == 0 && ::setgroups(0, nullptr) != 0)
    return fail(ErrnoStatus(errno, "setgroups"));
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);  // before any thread: Serve takes them by signalfd

  absl::StatusOr<std::string> text = ReadFile(options_path, 4 << 20);
  if (!text.ok()) return fail(text.status());
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  absl::StatusOr<ShimOptions> options = ShimOptions::FromJson(j);
  if (!options.ok()) return fail(options.status());
  absl::StatusOr<UniqueFd> listener = Listen(socket_path);
  if (!listener.ok()) return fail(listener.status());
  // Beside the socket, so whoever cleans up can find (and verify) us even if we stop answering.
  std::string pid_file = socket_path + ".pid";
  (void)WriteFileAtomic(pid_file, std::to_string(::getpid()), 0600);
  absl::StatusOr<std::unique_ptr<Shim>> shim = Shim::Create(*std::move(options));
  if (!shim.ok()) {
    ::unlink(socket_path.c_str());
    ::unlink(pid_file.c_str());
    return fail(shim.status());
  }
  Ready(ready_fd, (*shim)->Hello());
  absl::Status served = (*shim)->Serve(listener->get());
  ::unlink(socket_path.c_str());
  ::unlink(pid_file.c_str());
  if (!served.ok()) {
    std::fprintf(stderr, "airlock-shim: %s\n", std::string(served.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace airlock::shim

int main(int argc, char** argv) { return airlock::shim::Main(argc, argv); }
