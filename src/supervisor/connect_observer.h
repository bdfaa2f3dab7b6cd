// The network observer of a sandbox without a syscall supervisor: it sees the direct attempts to
// leave the sandbox that the kernel refuses (a socket connected or sent to an address outside
// the sandbox's loopback, by a tool that ignores the proxy variables), so that they are reported
// like the proxy's refusals (netproxy::BlockedNetworkEgress, rule "direct-connect").
//
// It decides nothing. The sandbox's network namespace has only loopback, so the kernel refuses
// such a call (ENETUNREACH) whatever the observer says. The observer reads the address, reports
// the attempt, and answers SECCOMP_USER_NOTIF_FLAG_CONTINUE. Since nothing depends on its
// reading, a thread that rewrites the address after it was read (time of check, time of use)
// changes a report, never an outcome.
//
//   // airlock-init installs ConnectObserverFilter() with SECCOMP_FILTER_FLAG_NEW_LISTENER and
//   // hands the listener over (init/protocol.h, kFilterSelf):
//   ASSIGN_OR_RETURN(auto observer, ConnectObserver::Start(std::move(listener), on_attempt));
//
// The filter routes connect and sendto with an address (args[4] != 0) of at least an inet
// address's length (16 bytes; the kernel refuses shorter inet addresses) to the listener, and
// allows everything else (the sandbox's profile decides it). sendmsg and sendmmsg carry their
// address inside a struct the filter cannot read; routing every one of them would put a round
// trip on each message of every unix socket, so a datagram sent with sendmsg to an outside
// address is refused (ENETUNREACH) without a report.
//
// Pids are handled as the notify supervisor does (internal/notify_monitor.cc): /proc/<pid>/mem
// and /proc/<pid>/cgroup are opened before SECCOMP_IOCTL_NOTIF_ID_VALID says the notification is
// live, so they are the calling thread's. If the observer goes away, routed calls fail (ENOSYS):
// nothing leaves unobserved, and nothing could leave anyway.
#ifndef AIRLOCK_SUPERVISOR_CONNECT_OBSERVER_H_
#define AIRLOCK_SUPERVISOR_CONNECT_OBSERVER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace airlock::supervisor {
namespace internal {
class NotifBuffers;
}

// One refused attempt to reach an address outside the sandbox.
struct DirectAttempt {
  std::string syscall;  // "connect" or "sendto"
  std::string address;  // "192.0.2.1", "2001:db8::1"
  uint16_t port = 0;
  // The calling process's /proc/<pid>/cgroup (up to 4 KiB; "" when it could not be read), for
  // the caller to tell which command made the call.
  std::string cgroups;
  std::chrono::system_clock::time_point time;  // when the call was received
};

// The observer's seccomp filter for the native architecture (struct sock_filter[]). Calls of a
// foreign architecture are allowed here; the profile refuses them.
const std::string& ConnectObserverFilter();

// Whether `address` (as DirectAttempt.address) stays in the sandbox: loopback (127.0.0.0/8, ::1)
// or unspecified (0.0.0.0, ::, which Linux connects over loopback), IPv4-mapped or not.
bool IsLocalAddress(const std::string& address);

class ConnectObserver {
 public:
  // Called on the observer's thread while the caller waits for the answer; keep it short.
  using Callback = std::function<void(const DirectAttempt&)>;

  // Starts the thread that answers `listener` (the filter's user-notification listener).
  static absl::StatusOr<std::unique_ptr<ConnectObserver>> Start(UniqueFd listener,
                                                                Callback on_attempt);
  // Stops the thread and closes the listener.
  ~ConnectObserver();

  ConnectObserver(const ConnectObserver&) = delete;
  ConnectObserver& operator=(const ConnectObserver&) = delete;

 private:
  ConnectObserver(UniqueFd listener, UniqueFd wake, internal::NotifBuffers buffers,
                  Callback on_attempt);
  void Run();

  UniqueFd listener_;
  UniqueFd wake_;
  std::unique_ptr<internal::NotifBuffers> buffers_;
  Callback on_attempt_;
  std::thread thread_;
};

}  // namespace airlock::supervisor

#endif  // AIRLOCK_SUPERVISOR_CONNECT_OBSERVER_H_
