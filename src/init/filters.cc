#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "init/protocol.h"

namespace airlock::init {
namespace {

// The new filter's listener fd (with a listener), 0, or -errno.
long Install(std::string_view program, unsigned flags) {
  struct sock_fprog prog;
  prog.len = static_cast<unsigned short>(program.size() / sizeof(struct sock_filter));
  prog.filter = reinterpret_cast<struct sock_filter*>(const_cast<char*>(program.data()));
  long rc = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
  return rc < 0 ? -errno : rc;
}

// Installs a filter with a user-notification listener. Waiting for the answer, a caller ignores
// signals other than a kill once its call has been received (Linux 5.19; older kernels refuse
// the flag and get the filter without it): a signal would otherwise restart the call, which the
// listener then receives, decides and counts a second time, or end it with EINTR.
long InstallWithListener(std::string_view program) {
  long fd =
      Install(program, SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV);
  if (fd == -EINVAL) fd = Install(program, SECCOMP_FILTER_FLAG_NEW_LISTENER);
  return fd;
}

}  // namespace

int InstallFilters(std::string_view profile, std::string_view policy, PolicyListener listener,
                   int listener_fd) {
  if (listener == PolicyListener::kNone) {
    // The profile first: it allows installing further filters, and the policy filter may not
    // (a rule may deny seccomp itself).
    for (std::string_view program : {profile, policy}) {
      if (program.empty()) continue;
      if (long rc = Install(program, 0); rc < 0) return static_cast<int>(-rc);
    }
    return 0;
  }
  // The policy filter with its listener first: the profile refuses SECCOMP_FILTER_FLAG_NEW_LISTENER
  // to everything it filters, us included once it is installed.
  long fd = InstallWithListener(policy);
  if (fd < 0) return static_cast<int>(-fd);
  if (fd != listener_fd) return EBADF;
  // Blocks until the supervisor has taken the listener and answered: from here on, a call the
  // policy routes to the listener needs someone to answer it.
  ::syscall(SYS_getppid, kHandshakeMagic, kHandshakeListenerReady);
  if (!profile.empty()) {
    if (long rc = Install(profile, 0); rc < 0) return static_cast<int>(-rc);
  }
  ::syscall(SYS_getppid, kHandshakeMagic, kHandshakeDone);
  return 0;
}

int InstallSelfFilters(std::string_view profile, std::string_view observer, int* listener) {
  *listener = -1;
  if (!observer.empty()) {
    // The observer with its listener first: the profile refuses new listeners once installed.
    long fd = InstallWithListener(observer);
    if (fd < 0) return static_cast<int>(-fd);
    *listener = static_cast<int>(fd);
  }
  if (long rc = Install(profile, 0); rc < 0) {
    if (*listener >= 0) ::close(*listener);
    *listener = -1;
    return static_cast<int>(-rc);
  }
  return 0;
}

}  // namespace airlock::init
