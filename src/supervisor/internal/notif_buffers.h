// The buffers of one seccomp user notification and its answer, sized as the running kernel
// says (SECCOMP_GET_NOTIF_SIZES): its structures may be larger than the ones we were compiled
// with. Shared by the notify monitor and the connect observer, with PreferSyncWakeUp.
#ifndef AIRLOCK_SUPERVISOR_INTERNAL_NOTIF_BUFFERS_H_
#define AIRLOCK_SUPERVISOR_INTERNAL_NOTIF_BUFFERS_H_

#include <linux/seccomp.h>

#include <cstring>
#include <vector>

#include "absl/status/statusor.h"

namespace airlock::supervisor::internal {

class NotifBuffers {
 public:
  static absl::StatusOr<NotifBuffers> Make();

  // Zeroed, ready for SECCOMP_IOCTL_NOTIF_RECV.
  seccomp_notif* FreshRequest() {
    std::memset(req_.data(), 0, req_.size());
    return reinterpret_cast<seccomp_notif*>(req_.data());
  }
  // Zeroed, with the id of the request it answers.
  seccomp_notif_resp* FreshResponse(uint64_t id) {
    std::memset(resp_.data(), 0, resp_.size());
    auto* resp = reinterpret_cast<seccomp_notif_resp*>(resp_.data());
    resp->id = id;
    return resp;
  }

 private:
  std::vector<char> req_;
  std::vector<char> resp_;
};

// Asks that the callers of `listener` and its answerer hand the CPU to each other
// (SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP, Linux 6.6): a routed call then costs a switch on one CPU
// instead of a wake-up of the answering thread on another, which on a host with idle (halted)
// virtual CPUs is most of the call's cost. Older kernels refuse it, and everything works the same
// without it, only slower.
void PreferSyncWakeUp(int listener);

}  // namespace airlock::supervisor::internal

#endif  // AIRLOCK_SUPERVISOR_INTERNAL_NOTIF_BUFFERS_H_
