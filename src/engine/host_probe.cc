#include "engine/host_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>

#include "common/files.h"
#include "engine/internal/syscalls.h"

namespace airlock::engine {
namespace {

HostFeatures Probe() {
  HostFeatures f;
  struct utsname u;
  if (::uname(&u) == 0) f.kernel = u.release;
  f.running_as_root = ::geteuid() == 0;
  if (auto max = ReadFile("/proc/sys/user/max_user_namespaces"); max.ok()) {
    f.user_namespaces = std::atol(max->c_str()) > 0;
  }
  if (auto unpriv = ReadFile("/proc/sys/kernel/unprivileged_userns_clone");
      unpriv.ok() && !f.running_as_root && std::atoi(unpriv->c_str()) == 0) {
    f.user_namespaces = false;
  }
  // Each call fails with ENOSYS when the kernel lacks it, and with another error otherwise.
  errno = 0;
  ::mount_setattr(-1, "", 0, nullptr, 0);
  f.mount_api = errno != ENOSYS;
  int fd = internal::Openat2(AT_FDCWD, "/", O_PATH | O_CLOEXEC, 0);
  f.openat2 = fd >= 0;
  if (fd >= 0) ::close(fd);
  errno = 0;
  internal::Clone3(nullptr);
  f.clone3 = errno != ENOSYS;
  f.landlock_abi = internal::LandlockAbi();
  f.seccomp = ::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0;
  if (auto meminfo = ReadFile("/proc/meminfo"); meminfo.ok()) {
    size_t pos = meminfo->find("SwapTotal:");
    f.swap_enabled = pos != std::string::npos && std::atol(meminfo->c_str() + pos + 10) > 0;
  }
  return f;
}

}  // namespace

const HostFeatures& ProbeHost() {
  static const HostFeatures features = Probe();
  return features;
}

}  // namespace airlock::engine
