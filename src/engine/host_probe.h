// What the running kernel and host offer, probed once per process.
#ifndef AIRLOCK_ENGINE_HOST_PROBE_H_
#define AIRLOCK_ENGINE_HOST_PROBE_H_

#include <string>

namespace airlock::engine {

struct HostFeatures {
  std::string kernel;  // uname release
  bool user_namespaces = false;
  bool mount_api = false;  // open_tree/move_mount/mount_setattr (Linux 5.12)
  bool openat2 = false;    // Linux 5.6
  bool clone3 = false;     // Linux 5.3 (with CLONE_PIDFD)
  int landlock_abi = 0;    // 0: no Landlock
  bool seccomp = false;
  bool swap_enabled = false;  // the host has swap (then memory limits need swap accounting)
  bool running_as_root = false;
};

const HostFeatures& ProbeHost();

}  // namespace airlock::engine

#endif  // AIRLOCK_ENGINE_HOST_PROBE_H_
