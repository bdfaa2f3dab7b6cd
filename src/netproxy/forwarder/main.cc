// airlock-forwarder --listen 127.0.0.1:PORT --socket PATH [--max-connections N] [--ready-fd FD]
//
// Runs inside a sandbox: hands every TCP connection on the loopback address to the egress proxy's
// unix socket. Exits 0 on SIGTERM/SIGINT/SIGHUP or when its parent dies; 1 on a fatal error;
// 2 on bad flags. With --ready-fd it writes "ready\n" to FD once listening and closes it.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "netproxy/forwarder/forwarder.h"

namespace {

int Usage(const char* msg) {
  std::fprintf(stderr,
               "airlock-forwarder: %s\nusage: airlock-forwarder --listen 127.0.0.1:PORT "
               "--socket PATH [--max-connections N] [--ready-fd FD]\n",
               msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  airlock::forwarder::Config config;
  bool have_listen = false;
  int ready_fd = -1;
  std::string error;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) return Usage(("missing value for " + flag).c_str());
    std::string value = argv[++i];
    if (flag == "--listen") {
      if (!airlock::forwarder::ParseListenAddress(value, &config, &error)) {
        return Usage(error.c_str());
      }
      have_listen = true;
    } else if (flag == "--socket") {
      config.socket_path = value;
    } else if (flag == "--max-connections") {
      config.max_connections = std::strtoul(value.c_str(), nullptr, 10);
      if (config.max_connections == 0) return Usage("--max-connections must be > 0");
    } else if (flag == "--ready-fd") {
      ready_fd = std::atoi(value.c_str());
    } else {
      return Usage(("unknown flag " + flag).c_str());
    }
  }
  if (!have_listen || config.socket_path.empty()) return Usage("--listen and --socket are needed");

  // Die with the parent (the sandbox's init); the getppid check closes the race where the parent
  // died before prctl.
  pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) return 0;

  // splice(2) to a socket whose peer is gone raises SIGPIPE; the error return is enough.
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop_signals, sig);
  sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
  int stop_fd = signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (stop_fd < 0) {
    std::fprintf(stderr, "airlock-forwarder: signalfd: %s\n", std::strerror(errno));
    return 1;
  }

  // Connect by the socket's name from its own directory: an address shorter than any inet
  // address, which the sandbox's connect observer lets through without a round trip to the host
  // (supervisor/connect_observer.h). Every connection the forwarder hands over pays one less.
  if (size_t slash = config.socket_path.rfind('/');
      slash != std::string::npos && slash + 1 < config.socket_path.size()) {
    std::string dir = slash == 0 ? "/" : config.socket_path.substr(0, slash);
    if (chdir(dir.c_str()) != 0) {
      std::fprintf(stderr, "airlock-forwarder: cannot enter %s: %s\n", dir.c_str(),
                   std::strerror(errno));
      return 1;
    }
    config.socket_path = config.socket_path.substr(slash + 1);
  }
  int listen_fd = airlock::forwarder::Listen(config, &error);
  if (listen_fd < 0) {
    std::fprintf(stderr, "airlock-forwarder: %s\n", error.c_str());
    return 1;
  }
  if (ready_fd >= 0) {
    static constexpr char kReady[] = "ready\n";
    ssize_t ignored = write(ready_fd, kReady, sizeof(kReady) - 1);
    (void)ignored;
    close(ready_fd);
  }
  int rc = airlock::forwarder::Run(config, listen_fd, stop_fd, &error);
  if (rc != 0) std::fprintf(stderr, "airlock-forwarder: %s\n", error.c_str());
  return rc;
}
