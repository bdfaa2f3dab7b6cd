#include "netproxy/forwarder/forwarder.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

namespace airlock::forwarder {
namespace {

constexpr int kPipeBytes = 256 << 10;
constexpr uint64_t kListenTag = 0;
constexpr uint64_t kStopTag = 1;

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// One direction of a connection: src -> pipe -> dst.
struct Flow {
  int src = -1;
  int dst = -1;
  int pipe_r = -1;
  int pipe_w = -1;
  size_t capacity = 0;  // of the pipe
  size_t pending = 0;   // bytes in the pipe
  bool src_eof = false;
  bool done = false;
};

struct Conn;

// The epoll registration of one socket of a connection.
struct Side {
  Conn* conn;
  int fd;
  bool registered = false;
  uint32_t events = 0;  // registered interest
};

struct Conn {
  Flow up;    // client -> proxy
  Flow down;  // proxy -> client
  Side client{this, -1};
  Side proxy{this, -1};
  bool failed = false;
  bool dead = false;  // destroyed after the current batch of events
};

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Moves as much as possible; returns false on a hard error.
bool Pump(Flow& f) {
  while (!f.done) {
    if (f.pending == 0 && !f.src_eof) {
      ssize_t n = ::splice(f.src, nullptr, f.pipe_w, nullptr, f.capacity,
                           SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
      if (n > 0) {
        f.pending += static_cast<size_t>(n);
      } else if (n == 0) {
        f.src_eof = true;
      } else if (errno == EAGAIN) {
        return true;
      } else if (errno != EINTR) {
        return false;
      }
    }
    if (f.pending > 0) {
      ssize_t n =
          ::splice(f.pipe_r, nullptr, f.dst, nullptr, f.pending, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
      if (n > 0) {
        f.pending -= static_cast<size_t>(n);
      } else if (n < 0 && errno == EAGAIN) {
        return true;
      } else if (n < 0 && errno != EINTR) {
        return false;
      }
    }
    if (f.src_eof && f.pending == 0) {
      ::shutdown(f.dst, SHUT_WR);
      f.done = true;
    }
  }
  return true;
}

uint32_t WantedEvents(const Conn& c, int fd) {
  uint32_t events = 0;
  for (const Flow* f : {&c.up, &c.down}) {
    if (f->done) continue;
    if (f->src == fd && f->pending == 0 && !f->src_eof) events |= EPOLLIN;
    if (f->dst == fd && f->pending > 0) events |= EPOLLOUT;
  }
  return events;
}

bool MakePipe(Flow& f) {
  int p[2];
  if (::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) return false;
  f.pipe_r = p[0];
  f.pipe_w = p[1];
  // Fewer splice calls per byte with a bigger pipe; the default size still works.
  int size = ::fcntl(p[1], F_SETPIPE_SZ, kPipeBytes);
  if (size < 0) size = ::fcntl(p[1], F_GETPIPE_SZ);
  f.capacity = size > 0 ? static_cast<size_t>(size) : 4096;
  return true;
}

class Server {
 public:
  Server(const Config& config, int epfd) : config_(config), epfd_(epfd) {}

  void Accept(int listen_fd) {
    while (true) {
      int client = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (client < 0) return;  // EAGAIN, or out of descriptors: retried on the next event
      if (active_ >= config_.max_connections) {
        ::close(client);
        continue;
      }
      int proxy = ConnectProxy();
      if (proxy < 0) {
        ::close(client);
        continue;
      }
      auto conn = std::make_unique<Conn>();
      conn->client.fd = client;
      conn->proxy.fd = proxy;
      conn->up.src = conn->down.dst = client;
      conn->up.dst = conn->down.src = proxy;
      if (!MakePipe(conn->up) || !MakePipe(conn->down)) {
        Destroy(conn.release());
        continue;
      }
      ++active_;
      Conn* c = conn.release();
      Update(c);
    }
  }

  void Handle(Side* side) {
    Conn* c = side->conn;
    if (c->dead) return;
    if (!Pump(c->up) || !Pump(c->down)) c->failed = true;
    if (c->failed || (c->up.done && c->down.done)) {
      --active_;
      c->dead = true;
      graveyard_.push_back(c);
      return;
    }
    Update(c);
  }

  // Frees the connections that ended during the last batch of events, whose pointers that batch
  // may still have held.
  void Bury() {
    for (Conn* c : graveyard_) Destroy(c);
    graveyard_.clear();
  }

 private:
  int ConnectProxy() {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, config_.socket_path.data(), config_.socket_path.size());
    // A unix-socket connect completes at once or fails (EAGAIN when the proxy's backlog is
    // full); it never waits for the peer's accept. The address's exact length (main.cc keeps it
    // short).
    socklen_t len =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + config_.socket_path.size());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  // Level-triggered interest: a socket is in the epoll set only while some flow waits on it, so
  // a hung-up socket nobody waits for cannot wake the loop again and again.
  void Update(Conn* c) {
    for (Side* s : {&c->client, &c->proxy}) {
      uint32_t want = WantedEvents(*c, s->fd);
      epoll_event ev{};
      ev.events = want;
      ev.data.ptr = s;
      if (want == 0) {
        if (s->registered) ::epoll_ctl(epfd_, EPOLL_CTL_DEL, s->fd, nullptr);
        s->registered = false;
      } else if (!s->registered) {
        ::epoll_ctl(epfd_, EPOLL_CTL_ADD, s->fd, &ev);
        s->registered = true;
      } else if (want != s->events) {
        ::epoll_ctl(epfd_, EPOLL_CTL_MOD, s->fd, &ev);
      }
      s->events = want;
    }
  }

  void Destroy(Conn* c) {
    for (Flow* f : {&c->up, &c->down}) {
      CloseFd(f->pipe_r);
      CloseFd(f->pipe_w);
    }
    CloseFd(c->client.fd);  // closing removes the fds from the epoll set
    CloseFd(c->proxy.fd);
    delete c;
  }

  const Config& config_;
  int epfd_;
  size_t active_ = 0;
  std::vector<Conn*> graveyard_;
};
}  // namespace

bool ParseListenAddress(const std::string& text, Config* config, std::string* error) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 >= text.size()) {
    *error = "--listen wants ADDRESS:PORT";
    return false;
  }
  std::string host = text.substr(0, colon);
  char* end = nullptr;
  unsigned long port = std::strtoul(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port == 0 || port > 65535) {
    *error = "--listen: bad port";
    return false;
  }
  std::memset(&config->listen, 0, sizeof(config->listen));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&config->listen);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a6->sin6_addr) != 1 ||
        !IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr)) {
      *error = "--listen: only a loopback address ([::1])";
      return false;
    }
    config->listen_len = sizeof(sockaddr_in6);
    return true;
  }
  auto* a4 = reinterpret_cast<sockaddr_in*>(&config->listen);
  a4->sin_family = AF_INET;
  a4->sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &a4->sin_addr) != 1 ||
      (ntohl(a4->sin_addr.s_addr) >> 24) != 127) {
    *error = "--listen: only a loopback address (127.0.0.0/8)";
    return false;
  }
  config->listen_len = sizeof(sockaddr_in);
  return true;
}

int Listen(const Config& config, std::string* error) {
  if (config.socket_path.empty() || config.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    *error = "--socket: empty or too long";
    return -1;
  }
  int fd = ::socket(config.listen.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = Errno("socket");
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&config.listen), config.listen_len) != 0 ||
      ::listen(fd, SOMAXCONN) != 0) {
    *error = Errno("bind/listen");
    ::close(fd);
    return -1;
  }
  return fd;
}

int Run(const Config& config, int listen_fd, int stop_fd, std::string* error) {
  int epfd = ::epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) {
    *error = Errno("epoll_create1");
    return 1;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  ::epoll_ctl(epfd, EPOLL_CTL_ADD, listen_fd, &ev);
  ev.data.u64 = kStopTag;
  if (stop_fd >= 0) ::epoll_ctl(epfd, EPOLL_CTL_ADD, stop_fd, &ev);
  Server server(config, epfd);
  epoll_event events[128];
  while (true) {
    int n = ::epoll_wait(epfd, events, 128, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = Errno("epoll_wait");
      ::close(epfd);
      return 1;
    }
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kStopTag) {
        ::close(epfd);
        return 0;
      }
      if (tag == kListenTag) {
        server.Accept(listen_fd);
      } else {
        server.Handle(static_cast<Side*>(events[i].data.ptr));
      }
    }
    server.Bury();
  }
}

}  // namespace airlock::forwarder
