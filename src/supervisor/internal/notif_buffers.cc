#include "supervisor/internal/notif_buffers.h"

#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/status.h"

namespace airlock::supervisor::internal {

absl::StatusOr<NotifBuffers> NotifBuffers::Make() {
  struct seccomp_notif_sizes sizes = {};
  if (::syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) {
    return ErrnoStatus(errno, "SECCOMP_GET_NOTIF_SIZES");
  }
  NotifBuffers b;
  b.req_.resize(std::max<size_t>(sizes.seccomp_notif, sizeof(seccomp_notif)));
  b.resp_.resize(std::max<size_t>(sizes.seccomp_notif_resp, sizeof(seccomp_notif_resp)));
  return b;
}

void PreferSyncWakeUp(int listener) {
  // SECCOMP_IOCTL_NOTIF_SET_FLAGS and SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP, which Debian 12's
  // headers predate. The flags go by value.
  constexpr unsigned long kSetFlags = _IOW('!', 4, uint64_t);
  constexpr unsigned long kSyncWakeUp = 1;
  (void)::ioctl(listener, kSetFlags, kSyncWakeUp);
}

}  // namespace airlock::supervisor::internal
