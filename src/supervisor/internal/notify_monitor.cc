// The seccomp user-notification monitor.
//
// Why routed calls are answered the way they are (the time-of-check/time-of-use question):
// SECCOMP_USER_NOTIF_FLAG_CONTINUE lets the kernel run the call with whatever its pointer
// arguments point to *when it runs*, which another thread of the program (or another process
// sharing the memory) may have rewritten after this supervisor read them. So a decision here
// never depends on memory the program controls: the verdict comes from the call's number and
// register arguments, which the kernel captured before notifying and which the filter already
// matched; paths and addresses read from the program are reported, never trusted. What a path
// may reach is enforced by Landlock and the mount layout, below any race. (A supervisor that
// wanted to decide on a path would have to copy it and act on the copy itself, opening the file
// and injecting the descriptor with SECCOMP_IOCTL_NOTIF_ADDFD; we do not, because that open
// would run with the supervisor's privileges, outside the sandbox's Landlock domain.)
//
// Pids: a notification names a thread by pid, and that thread may die and its pid be reused at
// any moment. Memory is read through /proc/<pid>/mem opened *before* asking the kernel whether
// the notification is still live (SECCOMP_IOCTL_NOTIF_ID_VALID); a live notification means its
// thread is blocked in it, so the open file is that thread's memory. Answers go by notification
// id, which the kernel checks itself; nothing is ever signalled by pid.
//
// One listener per filter chain: the kernel refuses a second listener in a process whose
// filters already have one (EBUSY), and the profile refuses NEW_LISTENER outright, so code in a
// sandbox with a notify supervisor cannot run a notify supervisor of its own, and ptrace is
// always denied. A nested agent that wants its children supervised asks the platform for a
// sandbox of their own (docs/supervisor.md, "Nested agents").
#include <fcntl.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/status.h"
#include "fmt/format.h"
#include "supervisor/internal/monitor.h"
#include "supervisor/internal/notif_buffers.h"

namespace airlock::supervisor::internal {
namespace {

using Clock = std::chrono::steady_clock;

// How long a process may take from its start to handing over its listener.
constexpr auto kListenerDeadline = std::chrono::seconds(10);

bool IsListener(int fd) {
  char link[64] = {};
  std::string path = fmt::format("/proc/self/fd/{}", fd);
  ssize_t n = ::readlink(path.c_str(), link, sizeof(link) - 1);
  return n > 0 && std::string_view(link, static_cast<size_t>(n)) == "anon_inode:seccomp notify";
}

class NotifyMonitor : public Monitor {
 public:
  explicit NotifyMonitor(SupervisorOptions options)
      : Monitor(std::move(options), "notify"), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~NotifyMonitor() override { Shutdown(); }

  void Begin() { StartThread(); }

 private:
  void Wake() override {
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
  }

  void Run() override;
  absl::StatusOr<UniqueFd> TakeListener(const Target& target);
  void Handle(seccomp_notif& req, seccomp_notif_resp& resp);
  // Waits up to `timeout` on `fd` (and the wake-up eventfd); the revents of fd.
  short WaitFor(int fd, short events, const struct timespec* timeout);

  UniqueFd wake_;
  UniqueFd pidfd_;
  UniqueFd listener_;
  pid_t target_pid_ = -1;
  bool handshake_done_ = false;
};

short NotifyMonitor::WaitFor(int fd, short events, const struct timespec* timeout) {
  struct pollfd p[2] = {{fd, events, 0}, {wake_.get(), POLLIN, 0}};
  int rc = ::ppoll(p, 2, timeout, nullptr);
  return rc > 0 ? p[0].revents : 0;
}

absl::StatusOr<UniqueFd> NotifyMonitor::TakeListener(const Target& target) {
  // The process creates its listener after it starts (when it installs its filter) and then
  // blocks in the handshake until we hold it: poll for it with a short backoff.
  auto deadline = Clock::now() + kListenerDeadline;
  auto delay = std::chrono::microseconds(20);
  for (;;) {
    int fd = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd_.get(), target.listener_fd, 0));
    if (fd >= 0) {
      UniqueFd taken(fd);
      // Before the process has closed what it inherited, that number may be something else.
      if (IsListener(fd)) return taken;
    } else if (errno == ESRCH) {
      return NotFound("the process ended before it installed its filter");
    } else if (errno != EBADF) {
      return ErrnoStatus(errno, "pidfd_getfd");
    }
    if (stopping()) return NotFound("stopped");
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(
          fmt::format("the process did not hand over its seccomp listener "
                      "within {} s",
                      kListenerDeadline.count()));
    }
    struct timespec ts = {0, static_cast<long>(delay.count() * 1000)};
    if (WaitFor(pidfd_.get(), POLLIN, &ts) & POLLIN) {
      return NotFound("the process ended before it installed its filter");
    }
    delay = std::min(delay * 2, std::chrono::microseconds(2000));
  }
}

void NotifyMonitor::Run() {
  std::optional<Target> target = WaitForTarget();
  if (!target) return;
  pidfd_.Reset(::fcntl(target->pidfd, F_DUPFD_CLOEXEC, 0));
  if (!pidfd_ || !wake_) {
    Attached(ErrnoStatus(errno, "supervisor: duplicate the process's pidfd"));
    return;
  }
  target_pid_ = target->pid;
  // The process may start now: its listener comes once it runs.
  Attached(absl::OkStatus());
  absl::StatusOr<UniqueFd> listener = TakeListener(*target);
  if (!listener.ok()) {
    if (listener.status().code() != absl::StatusCode::kNotFound) {
      Fail(std::string(Message(listener.status())));
    }
    return;
  }
  listener_ = std::move(*listener);
  PreferSyncWakeUp(listener_.get());

  absl::StatusOr<NotifBuffers> buffers = NotifBuffers::Make();
  if (!buffers.ok()) {
    Fail(std::string(Message(buffers.status())));
    return;
  }
  for (;;) {
    short revents = WaitFor(listener_.get(), POLLIN, nullptr);
    if (stopping()) return;
    if (revents & POLLIN) {
      seccomp_notif* req = buffers->FreshRequest();
      if (::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_RECV, req) != 0) {
        if (errno == ENOENT || errno == EINTR) continue;  // its thread died meanwhile
        Fail(fmt::format("SECCOMP_IOCTL_NOTIF_RECV: {}", std::strerror(errno)));
        return;
      }
      Handle(*req, *buffers->FreshResponse(req->id));
    } else if (revents & (POLLHUP | POLLERR)) {
      return;  // no process uses the filter any more
    }
  }
}

void NotifyMonitor::Handle(seccomp_notif& req, seccomp_notif_resp& resp) {
  if (!handshake_done_ && static_cast<pid_t>(req.pid) == target_pid_) {
    // airlock-init's own code between taking the listener and the exec (init/protocol.h).
    Verdict v = policy().Evaluate(req.data, /*handshake=*/true);
    if (v.kind == Verdict::Kind::kHandshake && v.phase == init::kHandshakeDone) {
      handshake_done_ = true;
    }
    resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
  } else {
    std::optional<ProcMemReader> mem;
    if (ReadsMemory(req.data.nr)) {
      UniqueFd fd(::open(fmt::format("/proc/{}/mem", req.pid).c_str(), O_RDONLY | O_CLOEXEC));
      uint64_t id = req.id;
      if (::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_ID_VALID, &id) != 0) return;  // it died
      if (fd) mem.emplace(std::move(fd));
    }
    Decision d = Decide(req.data, mem ? &*mem : nullptr);
    switch (d.what) {
      case Decision::What::kContinue:
        resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        break;
      case Decision::What::kFail:
      case Decision::What::kKill:  // being killed; the call must not run meanwhile
        resp.error = -d.err;
        break;
    }
  }
  // ENOENT: the thread died (killed) before the answer; nothing to do.
  (void)::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_SEND, &resp);
}

}  // namespace

std::unique_ptr<Supervisor> StartNotifyMonitor(SupervisorOptions options) {
  auto m = std::make_unique<NotifyMonitor>(std::move(options));
  m->Begin();
  return m;
}

}  // namespace airlock::supervisor::internal
