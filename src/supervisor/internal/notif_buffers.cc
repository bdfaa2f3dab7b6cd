#include "supervisor/internal/notif_buffers.h"

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

}  // namespace airlock::supervisor::internal
