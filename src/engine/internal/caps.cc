// Capability drop for the sandbox's first process. In its own user namespace it holds every
// capability (over that namespace only); none may survive into airlock-init or a command.
#include <errno.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/internal/plan.h"

namespace airlock::engine::internal {

int DropCapabilities() {
  // The bounding set first: dropping from it needs CAP_SETPCAP, which capset below removes.
  // Capabilities are numbered without gaps: the first the kernel does not know (EINVAL) ends
  // the list.
  for (int cap = 0; cap <= 63; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0) continue;
    if (errno == EINVAL && cap > CAP_LAST_CAP) break;
    if (errno != EINVAL) return errno;
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return errno;
  // No root semantics for any exec, and the setting cannot be undone.
  const int bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                   SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                   SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) return errno;
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capset, &header, data) != 0) return errno;
  return 0;
}

}  // namespace airlock::engine::internal
