#include "supervisor/connect_observer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/logging.h"
#include "common/status.h"
#include "fmt/format.h"
#include "supervisor/internal/bpf.h"
#include "supervisor/internal/decode.h"
#include "supervisor/internal/notif_buffers.h"
#include "supervisor/policy.h"

namespace airlock::supervisor {
namespace {

constexpr size_t kMaxCgroupText = 4096;

// The kernel refuses an inet address shorter than a sockaddr_in (16 bytes) with EINVAL before it
// looks at it (tcp_v4_connect, __ip4_datagram_connect and udp_sendmsg; IPv6 needs 24), and the
// length is a register the filter reads (its low 32 bits, all the kernel uses): a call with a
// shorter address cannot reach an inet destination and is not routed. Unix sockets connected by
// a short name (airlock-forwarder's) so cost no round trip.
constexpr uint32_t kMinInetAddressLength = sizeof(sockaddr_in);

const Logger& Log() {
  static const Logger& log = GetLogger("supervisor");
  return log;
}

std::string BuildFilter() {
  using internal::BpfProgram;
  BpfProgram b;
  BpfProgram::Label allow = b.NewLabel();
  BpfProgram::Label route = b.NewLabel();
  b.LoadArch();
  b.JumpUnless(BPF_JEQ, NativeAuditArch(), allow);
  b.LoadNr();
  BpfProgram::Label connect = b.NewLabel();
  BpfProgram::Label addressed = b.NewLabel();
  b.JumpIf(BPF_JEQ, static_cast<uint32_t>(SyscallNumber("connect")), connect);
  b.JumpUnless(BPF_JEQ, static_cast<uint32_t>(SyscallNumber("sendto")), allow);
  // sendto with a destination (either half of the pointer set), of an inet address's length.
  b.LoadArgLow(4);
  b.JumpUnless(BPF_JEQ, 0, addressed);
  b.LoadArgHigh(4);
  b.JumpIf(BPF_JEQ, 0, allow);
  b.Bind(addressed);
  b.LoadArgLow(5);
  b.JumpIf(BPF_JGE, kMinInetAddressLength, route);
  b.Jump(allow);
  // connect, with an address of an inet address's length.
  b.Bind(connect);
  b.LoadArgLow(2);
  b.JumpIf(BPF_JGE, kMinInetAddressLength, route);
  b.Bind(allow);
  b.Return(SECCOMP_RET_ALLOW);
  b.Bind(route);
  b.Return(SECCOMP_RET_USER_NOTIF);
  absl::StatusOr<std::string> program = b.Finish();
  // A fixed program of a dozen instructions: Finish cannot refuse it.
  return program.ok() ? *std::move(program) : std::string();
}

// The inet address and port at `address` (len bytes) in the memory behind `mem`, if it is one
// (not unix, netlink, AF_UNSPEC for a datagram socket's disconnect, or unreadable).
std::optional<DirectAttempt> ReadInetAddress(int mem, uint64_t address, uint64_t len) {
  if (address == 0 || mem < 0) return std::nullopt;
  sockaddr_storage ss = {};
  size_t n = static_cast<size_t>(std::min<uint64_t>(len, sizeof(ss)));
  ssize_t got = ::pread(mem, &ss, n, static_cast<off_t>(address));
  if (got <= 0) return std::nullopt;
  std::optional<internal::InetEndpoint> inet =
      internal::DecodeInetSockaddr(&ss, static_cast<size_t>(got));
  if (!inet) return std::nullopt;
  return DirectAttempt{.address = std::move(inet->address), .port = inet->port};
}

std::string ReadAll(int fd, size_t max) {
  std::string out(max, '\0');
  size_t have = 0;
  while (fd >= 0 && have < max) {
    ssize_t n = ::pread(fd, out.data() + have, max - have, static_cast<off_t>(have));
    if (n <= 0) break;
    have += static_cast<size_t>(n);
  }
  out.resize(have);
  return out;
}

}  // namespace

const std::string& ConnectObserverFilter() {
  static const std::string filter = BuildFilter();
  return filter;
}

bool IsLocalAddress(const std::string& address) {
  auto local_v4 = [](uint32_t host_order) { return (host_order >> 24) == 127 || host_order == 0; };
  in_addr v4;
  if (::inet_pton(AF_INET, address.c_str(), &v4) == 1) return local_v4(ntohl(v4.s_addr));
  in6_addr v6;
  if (::inet_pton(AF_INET6, address.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6) || IN6_IS_ADDR_UNSPECIFIED(&v6)) return true;
  uint32_t mapped;
  std::memcpy(&mapped, &v6.s6_addr[12], sizeof(mapped));
  return IN6_IS_ADDR_V4MAPPED(&v6) && local_v4(ntohl(mapped));
}

absl::StatusOr<std::unique_ptr<ConnectObserver>> ConnectObserver::Start(UniqueFd listener,
                                                                        Callback on_attempt) {
  if (!listener) return InvalidArgument("connect observer: no listener");
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) return ErrnoStatus(errno, "connect observer: eventfd");
  ASSIGN_OR_RETURN(internal::NotifBuffers buffers, internal::NotifBuffers::Make(),
                   "connect observer");
  internal::PreferSyncWakeUp(listener.get());
  std::unique_ptr<ConnectObserver> observer(new ConnectObserver(
      std::move(listener), std::move(wake), std::move(buffers), std::move(on_attempt)));
  observer->thread_ = std::thread([raw = observer.get()] { raw->Run(); });
  return observer;
}

ConnectObserver::ConnectObserver(UniqueFd listener, UniqueFd wake, internal::NotifBuffers buffers,
                                 Callback on_attempt)
    : listener_(std::move(listener)),
      wake_(std::move(wake)),
      buffers_(std::make_unique<internal::NotifBuffers>(std::move(buffers))),
      on_attempt_(std::move(on_attempt)) {}

ConnectObserver::~ConnectObserver() {
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

void ConnectObserver::Run() {
  // However the thread ends, the listener closes with it: routed calls then fail (ENOSYS) instead
  // of waiting for an answer that would never come.
  struct CloseListener {
    UniqueFd& fd;
    ~CloseListener() { fd.Reset(); }
  } close_listener{listener_};
  const int connect_nr = SyscallNumber("connect");
  for (;;) {
    struct pollfd p[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents & POLLIN) return;
    if (p[0].revents & (POLLHUP | POLLERR) && !(p[0].revents & POLLIN)) return;  // no users left
    if (!(p[0].revents & POLLIN)) continue;
    seccomp_notif* req = buffers_->FreshRequest();
    if (::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_RECV, req) != 0) {
      if (errno == ENOENT || errno == EINTR) continue;  // its thread died meanwhile
      Log().Error("connect observer: SECCOMP_IOCTL_NOTIF_RECV", {{"error", std::strerror(errno)}});
      return;
    }
    const bool connect = req->data.nr == connect_nr;
    const auto when = std::chrono::system_clock::now();
    // Each /proc file is opened before a validity check: if the notification is still live
    // afterwards, the file is the calling thread's, not that of a process that took its pid since.
    // The cgroup is opened only for an attempt to report (most connects are to loopback or unix).
    auto live = [&] {
      uint64_t id = req->id;
      return ::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
    };
    auto open_proc = [&](const char* file) {
      return UniqueFd(
          ::open(fmt::format("/proc/{}/{}", req->pid, file).c_str(), O_RDONLY | O_CLOEXEC));
    };
    UniqueFd mem = open_proc("mem");
    std::optional<DirectAttempt> attempt;
    if (live()) {
      attempt = connect ? ReadInetAddress(mem.get(), req->data.args[1], req->data.args[2])
                        : ReadInetAddress(mem.get(), req->data.args[4], req->data.args[5]);
      if (attempt && IsLocalAddress(attempt->address)) attempt.reset();
    }
    if (attempt) {
      UniqueFd cgroup = open_proc("cgroup");
      if (live()) attempt->cgroups = ReadAll(cgroup.get(), kMaxCgroupText);
      attempt->syscall = connect ? "connect" : "sendto";
      attempt->time = when;
      // Reported before the answer: by the time the call returns, and so before its command can
      // end and collect its events, the event is recorded.
      on_attempt_(*attempt);
    }
    seccomp_notif_resp* resp = buffers_->FreshResponse(req->id);
    resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    // ENOENT: the thread died (killed) before the answer; nothing to do.
    (void)::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_SEND, resp);
  }
}

}  // namespace airlock::supervisor
