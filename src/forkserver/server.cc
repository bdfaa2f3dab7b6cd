#include "forkserver/server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <future>
#include <mutex>

#include "command/command.h"
#include "common/logging.h"
#include "common/status.h"
#include "engine/forked_sandbox.h"
#include "engine/native_sandbox.h"
#include "fmt/format.h"
#include "forkserver/internal/zygote_protocol.h"
#include "forkserver/protocol.h"
#include "init/protocol.h"

namespace airlock::forkserver {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Reads `size` bytes before `deadline`: 0, ETIMEDOUT, EPROTO when the client closes midway (-1
// when it closes before the first byte), or recv's errno.
int ReadBefore(int conn, char* data, size_t size, Clock::time_point deadline) {
  size_t got = 0;
  while (got < size) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return ETIMEDOUT;
    struct pollfd p = {conn, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, INT_MAX)));
    if (ready < 0 && errno != EINTR) return errno;
    if (ready <= 0) continue;
    ssize_t n = ::recv(conn, data + got, size - got, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno;
    }
    if (n == 0) return got == 0 ? -1 : EPROTO;
    got += static_cast<size_t>(n);
  }
  return 0;
}

// One request frame (init/protocol.h's framing: u32 type, u32 length, little-endian, then the
// payload), all of it before `deadline`: a client that trickles its bytes cannot hold one of the
// server's request slots for longer. A length over kMaxRequestBytes is EMSGSIZE before any of the
// payload is read or allocated.
int ReadRequest(int conn, Clock::time_point deadline, uint32_t* type, uint32_t* length,
                std::string* payload) {
  char header[init::kFrameHeaderBytes];
  if (int err = ReadBefore(conn, header, sizeof(header), deadline); err != 0) return err;
  init::DecodeFrameHeader(header, type, length);
  if (*length > kMaxRequestBytes) return EMSGSIZE;
  payload->resize(*length);
  int err = ReadBefore(conn, payload->data(), *length, deadline);
  return err == -1 ? EPROTO : err;
}

int64_t Micros(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

const Logger& Log() {
  static const Logger& logger = GetLogger("forkserver");
  return logger;
}

// Waits until `fd` is readable; false on timeout.
bool WaitReadable(int fd, milliseconds timeout) {
  struct pollfd p = {fd, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (rc < 0 && errno == EINTR);
  return rc > 0;
}

absl::Status Unavailable(const std::string& message) { return absl::UnavailableError(message); }

// Waits for the child behind `pidfd` to end and reaps it; how it ended.
siginfo_t Reap(int pidfd) {
  siginfo_t info = {};
  while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED) != 0 &&
         errno == EINTR) {
  }
  return info;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ForkServer>> ForkServer::Start(ForkServerOptions options) {
  bool known = false;
  for (const char* t : kTemplates) known |= options.template_name == t;
  if (!known) {
    return InvalidArgument(
        fmt::format("template \"{}\" is unknown (known: python, node)", options.template_name));
  }
  if (options.cgroups == nullptr) return InvalidArgument("fork-server options: no cgroup driver");
  RETURN_IF_ERROR(engine::ForkedSandbox::CheckSpec(options.spec), "spec");
  if (options.tools_dir.empty()) options.tools_dir = engine::DefaultToolsDir();
  if (options.zygote_path.empty()) {
    char exe[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    std::string dir = n > 0 ? std::string(exe, static_cast<size_t>(n)) : std::string("/usr/bin/");
    options.zygote_path =
        fmt::format("{}/airlock-zygote-{}", dir.substr(0, dir.rfind('/')), options.template_name);
  }
  if (::access(options.zygote_path.c_str(), X_OK) != 0) {
    return ErrnoStatus(errno, fmt::format("zygote program {}", options.zygote_path));
  }
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (options.socket_path.empty() || options.socket_path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument(fmt::format("--socket \"{}\": empty or longer than {} bytes",
                                       options.socket_path, sizeof(addr.sun_path) - 1));
  }
  std::memcpy(addr.sun_path, options.socket_path.data(), options.socket_path.size());

  std::unique_ptr<ForkServer> server(new ForkServer());
  server->options_ = std::move(options);
  const ForkServerOptions& o = server->options_;
  server->listen_.Reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!server->listen_) return ErrnoStatus(errno, "socket");
  // Bound with no permission at all, then opened up to the mode asked: no moment where anyone
  // else could connect.
  auto bind = [&] {
    mode_t old_umask = ::umask(0777);
    int rc = ::bind(server->listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    int bind_errno = errno;
    ::umask(old_umask);
    return rc == 0 ? 0 : bind_errno;
  };
  int bind_errno = bind();
  if (bind_errno == EADDRINUSE) {
    // The name is taken. A live server answers on it: that one keeps it. A socket nobody listens
    // on is what a killed server left behind: it goes, and the bind is tried once more.
    UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct stat st;
    if (probe && ::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
        errno == ECONNREFUSED && ::lstat(o.socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
      Log().Info("removing a stale fork-server socket", {{"socket", o.socket_path}});
      ::unlink(o.socket_path.c_str());
      bind_errno = bind();
    } else if (probe) {
      return FailedPrecondition(fmt::format(
          "bind {}: the name is in use (another fork-server serves it, or it is not a socket)",
          o.socket_path));
    }
  }
  if (bind_errno != 0) return ErrnoStatus(bind_errno, fmt::format("bind {}", o.socket_path));
  server->bound_ = true;
  auto fail = [&](absl::Status st) {
    ::unlink(o.socket_path.c_str());
    server->bound_ = false;
    return st;
  };
  // The group and mode go to the socket bind made, through a descriptor of the name opened
  // without following a symlink and checked to be a socket: in a directory others may write to,
  // a name swapped for a symlink meanwhile cannot point these changes at another file.
  UniqueFd node(::open(o.socket_path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  struct stat node_stat;
  if (!node || ::fstat(node.get(), &node_stat) != 0) {
    return fail(ErrnoStatus(errno, fmt::format("open {}", o.socket_path)));
  }
  if (!S_ISSOCK(node_stat.st_mode)) {
    return fail(FailedPrecondition(
        fmt::format("{}: not a socket after bind (replaced meanwhile)", o.socket_path)));
  }
  if (o.socket_group &&
      ::fchownat(node.get(), "", static_cast<uid_t>(-1), *o.socket_group, AT_EMPTY_PATH) != 0) {
    return fail(ErrnoStatus(errno, fmt::format("chgrp {}", o.socket_path)));
  }
  if (::chmod(fmt::format("/proc/self/fd/{}", node.get()).c_str(), o.socket_mode) != 0) {
    return fail(ErrnoStatus(errno, fmt::format("chmod {}", o.socket_path)));
  }
  if (::listen(server->listen_.get(), 64) != 0) return fail(ErrnoStatus(errno, "listen"));
  server->stop_event_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  server->wake_event_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!server->stop_event_ || !server->wake_event_) return fail(ErrnoStatus(errno, "eventfd"));

  // The zygote is started by the serving thread: the workers' parent-death signal follows the
  // thread that started their zygote.
  std::promise<absl::Status> started;
  std::future<absl::Status> started_f = started.get_future();
  ForkServer* raw = server.get();
  server->thread_ = std::thread([raw, &started] {
    absl::Status st = raw->StartZygote();
    bool ok = st.ok();
    started.set_value(std::move(st));
    if (ok) raw->ServeLoop();
    raw->Shutdown();
  });
  absl::Status st = started_f.get();
  if (!st.ok()) {
    server->thread_.join();
    server->stopped_ = true;
    return fail(Annotate(st, "start zygote"));
  }
  Log().Info("fork-server ready", {{"socket", o.socket_path},
                                   {"template", o.template_name},
                                   {"zygote_pid", static_cast<int64_t>(server->zygote_pid())}});
  return server;
}

ForkServer::~ForkServer() { Stop(); }

void ForkServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  uint64_t one = 1;
  (void)!::write(stop_event_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  listen_.Reset();
  // Only a name this server bound: a start that failed to bind leaves another server's alone.
  if (bound_) ::unlink(options_.socket_path.c_str());
}

absl::Status ForkServer::StartZygote() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus(errno, "socketpair");
  }
  UniqueFd ours(sv[0]), theirs(sv[1]);
  UniqueFd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!null_fd) return ErrnoStatus(errno, "open /dev/null");
  // Everything the child needs is made before fork: it only makes system calls until exec.
  std::vector<std::string> args = {options_.zygote_path};
  if (!options_.preload.empty()) {
    args.push_back("--preload");
    args.push_back(options_.preload);
  }
  // Libraries that start thread pools at import (OpenBLAS, OpenMP, MKL, numexpr) are held to
  // one thread: the zygote must be single-threaded whenever it forks.
  std::vector<std::string> env = {
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "LANG=C.UTF-8",
      "HOME=/sandbox/home",
      "OPENBLAS_NUM_THREADS=1",
      "OMP_NUM_THREADS=1",
      "MKL_NUM_THREADS=1",
      "NUMEXPR_NUM_THREADS=1",
      "VECLIB_MAXIMUM_THREADS=1",
      "PYTHONDONTWRITEBYTECODE=1",
      "PYTHONNOUSERSITE=1",
  };
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus(errno, "fork zygote");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (::getppid() != parent) _exit(126);
    // The server blocks or ignores signals of its own (airlock forkserver takes SIGINT and
    // SIGTERM through a signalfd); both would pass through exec to the zygote and on to every
    // worker, whose code could then not be stopped by them.
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(null_fd.get(), 0);
    ::dup2(null_fd.get(), 1);
    ::dup2(theirs.get(), internal::kZygoteFd);  // dup2 clears close-on-exec
    ::close_range(internal::kZygoteFd + 1, ~0U, 0);
    ::execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  theirs.Reset();
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd) {
    int e = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return ErrnoStatus(e, "pidfd_open zygote");
  }
  zygote_sock_ = std::move(ours);
  zygote_pidfd_ = std::move(pidfd);
  zygote_pid_ = pid;
  ++zygote_starts_;
  if (!WaitReadable(zygote_sock_.get(), options_.zygote_start_timeout)) {
    StopZygote();
    return absl::DeadlineExceededError(fmt::format("the zygote did not finish its preload in {} ms",
                                                   options_.zygote_start_timeout.count()));
  }
  uint32_t type = 0;
  std::string payload;
  int err = init::ReceiveFrame(zygote_sock_.get(), &type, &payload);
  init::Reader r(payload);
  if (err != 0 || type != static_cast<uint32_t>(internal::ZygoteFrame::kReady) ||
      r.U32() != internal::kZygoteVersion || !r.done()) {
    std::string end = StopZygote();
    return FailedPrecondition(fmt::format(
        "the zygote exited before it was ready ({}; 3: its preload failed, 4: the preload left "
        "threads or pending work; or it is not the zygote of this airlock build; see its stderr)",
        end));
  }
  return absl::OkStatus();
}

std::string ForkServer::StopZygote() {
  zygote_sock_.Reset();  // the zygote exits at EOF
  std::string end = "not running";
  if (zygote_pidfd_) {
    if (!WaitReadable(zygote_pidfd_.get(), milliseconds(500))) {
      ::syscall(SYS_pidfd_send_signal, zygote_pidfd_.get(), SIGKILL, nullptr, 0);
    }
    siginfo_t info = Reap(zygote_pidfd_.get());
    end = info.si_code == CLD_EXITED ? fmt::format("exit status {}", info.si_status)
                                     : fmt::format("killed by signal {}", info.si_status);
    zygote_pidfd_.Reset();
  }
  zygote_pid_ = -1;
  return end;
}

bool ForkServer::ZygoteAlive() {
  return zygote_pidfd_ && zygote_sock_ && !WaitReadable(zygote_pidfd_.get(), milliseconds(0));
}

void ForkServer::Wake() {
  uint64_t one = 1;
  (void)!::write(wake_event_.get(), &one, sizeof(one));
}

absl::Status ForkServer::ReplaceDeadZygote() {
  std::lock_guard zlock(zygote_mu_);
  if (ZygoteAlive()) return absl::OkStatus();
  Log().Warn("zygote gone; starting a new one", {});
  StopZygote();
  return StartZygote();
}

void ForkServer::ServeLoop() {
  // A zygote that dies while idle is replaced at once, not by the next request (which would
  // then wait for the preload); at most once a second, so one that dies at every start does not
  // spin.
  constexpr milliseconds kMinRestartInterval{1000};
  auto next_restart = std::chrono::steady_clock::now();
  for (;;) {
    bool room;
    {
      std::lock_guard lock(mu_);
      room = active_ < options_.max_concurrent;
    }
    int zygote_fd = -1;
    {
      std::lock_guard zlock(zygote_mu_);
      if (zygote_pidfd_) zygote_fd = zygote_pidfd_.get();
    }
    int timeout_ms = -1;
    if (auto now = std::chrono::steady_clock::now(); zygote_fd >= 0 && now < next_restart) {
      timeout_ms = static_cast<int>(
          std::chrono::duration_cast<milliseconds>(next_restart - now).count() + 1);
      zygote_fd = -1;
    }
    struct pollfd p[4] = {{stop_event_.get(), POLLIN, 0},
                          {wake_event_.get(), POLLIN, 0},
                          {room ? listen_.get() : -1, POLLIN, 0},
                          {zygote_fd, POLLIN, 0}};
    if (::poll(p, 4, timeout_ms) < 0) {
      if (errno == EINTR) continue;
      Log().Error("poll", {{"error", std::strerror(errno)}});
      return;
    }
    if (p[0].revents) return;
    if (p[3].revents) {
      // Here, on this thread: the zygote's and its workers' parent-death signal follow it.
      if (absl::Status st = ReplaceDeadZygote(); !st.ok()) {
        Log().Error("zygote restart failed", {{"error", Message(st)}});
      }
      next_restart = std::chrono::steady_clock::now() + kMinRestartInterval;
    }
    if (p[1].revents) {
      uint64_t n;
      (void)!::read(wake_event_.get(), &n, sizeof(n));
      bool restart;
      {
        std::lock_guard lock(mu_);
        restart = restart_requested_;
      }
      if (restart) {
        // Here, on this thread: the zygote's and its workers' parent-death signal follow it.
        absl::Status st = ReplaceDeadZygote();
        std::lock_guard lock(mu_);
        restart_requested_ = false;
        restart_status_ = st;
        ++restart_generation_;
        cv_.notify_all();
      }
    }
    if (room && (p[2].revents & POLLIN)) {
      int conn = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      {
        std::lock_guard lock(mu_);
        ++active_;
      }
      std::thread([this, conn] {
        ServeConnection(conn);
        ::close(conn);
        std::lock_guard lock(mu_);
        --active_;
        cv_.notify_all();
        Wake();  // there may be room to accept again
      }).detach();
    }
  }
}

void ForkServer::Shutdown() {
  std::unique_lock lock(mu_);
  stopping_ = true;
  for (engine::ForkedSandbox* sb : running_) sb->Kill();
  cv_.notify_all();
  cv_.wait(lock, [this] { return active_ == 0; });
  next_.reset();
  lock.unlock();
  std::lock_guard zlock(zygote_mu_);
  StopZygote();
}

absl::Status ForkServer::EnsureZygote() {
  {
    std::lock_guard zlock(zygote_mu_);
    if (ZygoteAlive()) return absl::OkStatus();
  }
  std::unique_lock lock(mu_);
  uint64_t generation = restart_generation_;
  restart_requested_ = true;
  Wake();
  cv_.wait(lock, [&] { return restart_generation_ != generation || stopping_; });
  if (stopping_) return Unavailable("the fork-server is stopping");
  return restart_status_;
}

void ForkServer::ServeConnection(int conn) {
  // The reply's send gets a deadline of its own.
  struct timeval tv = {10, 0};
  ::setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  uint32_t type = 0, length = 0;
  std::string payload;
  const Clock::time_point deadline = Clock::now() + options_.request_timeout;
  int err = ReadRequest(conn, deadline, &type, &length, &payload);
  absl::StatusOr<std::string> reply;
  std::unique_ptr<engine::ForkedSandbox> used;
  if (err == EMSGSIZE) {
    reply = InvalidArgument(
        fmt::format("request: {} bytes, more than the limit of {}", length, kMaxRequestBytes));
  } else if (err != 0) {
    return;  // the client went away, was too slow or sent a broken frame: nobody to answer
  } else if (type != static_cast<uint32_t>(FrameType::kRun)) {
    reply = InvalidArgument(fmt::format("request: frame type {} is not run (1)", type));
  } else {
    reply = Run(payload, &used);
  }
  // The worker may have run for a while: the reply gets its own send deadline.
  if (reply.ok()) {
    init::SendFrame(conn, static_cast<uint32_t>(FrameType::kResult), *reply);
  } else {
    Log().Info("request refused", {{"error", Message(reply.status())}});
    init::SendFrame(conn, static_cast<uint32_t>(FrameType::kError), EncodeError(reply.status()));
  }
  if (err == EMSGSIZE) {
    // The client is still sending the payload and reads the answer once it has: closing now
    // would fail its send (EPIPE) and lose the answer. Its bytes are read and dropped, within the
    // request's deadline.
    char sink[64 << 10];
    for (uint64_t left = length; left > 0;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, sizeof(sink)));
      if (ReadBefore(conn, sink, n, deadline) != 0) break;
      left -= n;
    }
  }
  AfterReply(std::move(used));
}

absl::StatusOr<engine::ForkedWorker> ForkServer::Fork(const engine::WorkerLaunch& launch,
                                                      const std::string& code, bool* lost) {
  if (launch.fds.size() > static_cast<size_t>(init::kMaxFds)) {
    return Internal(fmt::format("worker plan has {} descriptors, more than {}", launch.fds.size(),
                                init::kMaxFds));
  }
  std::string frame = internal::EncodeForkRequest({launch.plan, launch.env, code});
  // One fork at a time: the zygote answers requests in order.
  std::lock_guard zlock(zygote_mu_);
  // A worker cloned while one of the zygote's helper threads ran comes back to be discarded
  // (EAGAIN): it is killed and reaped here and the same request sent again, 8 attempts in all.
  constexpr int kMaxAttempts = 8;
  for (int attempt = 1;; ++attempt) {
    if (!zygote_sock_) {
      *lost = true;
      return Unavailable("the zygote is gone; a new one is started for the next request");
    }
    if (init::SendFrame(zygote_sock_.get(), static_cast<uint32_t>(internal::ZygoteFrame::kFork),
                        frame, launch.fds.data(), static_cast<int>(launch.fds.size())) != 0) {
      *lost = true;
      return Unavailable("the zygote is gone; a new one is started for the next request");
    }
    uint32_t type = 0;
    std::string payload;
    int fds[init::kMaxFds];
    int nfds = 0;
    int err = WaitReadable(zygote_sock_.get(), milliseconds(30000))
                  ? init::ReceiveFrame(zygote_sock_.get(), &type, &payload, fds, &nfds)
                  : ETIMEDOUT;
    std::vector<UniqueFd> received;
    for (int i = 0; i < nfds; ++i) received.emplace_back(fds[i]);
    internal::ForkReply reply;
    if (err != 0 || type != static_cast<uint32_t>(internal::ZygoteFrame::kForked) ||
        !internal::DecodeForkReply(payload, &reply)) {
      *lost = true;
      zygote_sock_.Reset();  // out of step with us: ZygoteAlive is false until it is replaced
      return Unavailable(
          "the zygote died or did not answer while forking; a new one is started for the next "
          "request");
    }
    if (reply.err == EAGAIN) {
      if (received.size() != 1) return Internal("zygote: a discarded worker without a pidfd");
      // It is blocked before its release; the kill makes the wait short whatever the zygote did.
      (void)::syscall(SYS_pidfd_send_signal, received[0].get(), SIGKILL, nullptr, 0);
      Reap(received[0].get());
      Log().Debug("worker discarded", {{"attempt", attempt}, {"reason", reply.message}});
      if (attempt < kMaxAttempts) continue;
      return Unavailable(fmt::format("zygote: {} forks in a row ran into a busy helper thread ({})",
                                     attempt, reply.message));
    }
    if (reply.err != 0) return FailedPrecondition(fmt::format("zygote: {}", reply.message));
    if (received.size() != 1 || reply.pid <= 0) return Internal("zygote: reply without a pidfd");
    return engine::ForkedWorker{reply.pid, std::move(received[0])};
  }
}

absl::StatusOr<std::string> ForkServer::Run(const std::string& payload,
                                            std::unique_ptr<engine::ForkedSandbox>* used) {
  ASSIGN_OR_RETURN(RunRequest request, DecodeRunRequest(payload));
  if (request.template_name != options_.template_name) {
    return InvalidArgument(
        fmt::format("request.template: \"{}\" is not served here (this "
                    "fork-server serves \"{}\")",
                    request.template_name, options_.template_name));
  }
  CommandSpec command;
  command.argv = {options_.template_name, "<code>"};
  command.timeout = request.timeout;
  // A zygote found dead before it forked (killed between two requests, or while this one was
  // sent) is replaced and the request tried once more: nothing of it ran yet.
  auto t0 = Clock::now();
  std::unique_ptr<engine::ForkedSandbox> sb;
  for (int attempt = 0;; ++attempt) {
    RETURN_IF_ERROR(EnsureZygote(), "restart zygote");
    {
      std::lock_guard lock(mu_);
      sb = std::move(next_);
    }
    if (!sb) {
      ASSIGN_OR_RETURN(sb, PrepareSandbox(), "prepare worker sandbox");
    }
    bool zygote_lost = false;
    absl::Status started = sb->Start(command, [&](const engine::WorkerLaunch& launch) {
      return Fork(launch, request.code, &zygote_lost);
    });
    if (zygote_lost) {
      (void)sb->Destroy();
      if (attempt == 0) continue;
    }
    RETURN_IF_ERROR(started, "start worker");
    break;
  }
  auto t1 = Clock::now();
  {
    std::lock_guard lock(mu_);
    if (stopping_) sb->Kill();
    running_.insert(sb.get());
  }
  absl::StatusOr<CommandResult> result = sb->Wait();
  {
    std::lock_guard lock(mu_);
    running_.erase(sb.get());
  }
  auto t2 = Clock::now();
  *used = std::move(sb);  // removed once the reply is out (AfterReply)
  RETURN_IF_ERROR(result.status(), "run worker");
  Log().Debug("request served", {{"start_us", Micros(t1 - t0)}, {"run_us", Micros(t2 - t1)}});
  return ToJson(*result).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<std::unique_ptr<engine::ForkedSandbox>> ForkServer::PrepareSandbox() {
  engine::SandboxOptions sandbox;
  sandbox.spec = options_.spec;
  sandbox.tools_dir = options_.tools_dir;
  sandbox.run_dir_base = options_.run_dir_base;
  sandbox.cgroups = options_.cgroups;
  sandbox.allow_degraded = options_.allow_degraded;
  return engine::ForkedSandbox::Prepare(std::move(sandbox));
}

void ForkServer::AfterReply(std::unique_ptr<engine::ForkedSandbox> used) {
  if (used) {
    if (absl::Status st = used->Destroy(); !st.ok()) {
      Log().Warn("remove worker sandbox", {{"error", Message(st)}});
    }
  }
  // The next request's sandbox (plan, cgroup) is made while no one waits for it.
  {
    std::lock_guard lock(mu_);
    if (next_ || stopping_) return;
  }
  absl::StatusOr<std::unique_ptr<engine::ForkedSandbox>> next = PrepareSandbox();
  if (!next.ok()) {
    Log().Warn("prepare the next worker sandbox", {{"error", Message(next.status())}});
    return;
  }
  std::lock_guard lock(mu_);
  if (!next_ && !stopping_) next_ = *std::move(next);  // else ours is destroyed on return
}

}  // namespace airlock::forkserver
