#include "engine/cgroup.h"

#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/vfs.h>

#include <map>
#include <sstream>

#include "common/files.h"
#include "common/status.h"
#include "engine/internal/cgroup_files.h"
#include "engine/internal/cgroup_impl.h"
#include "fmt/format.h"

namespace airlock::engine {

const char* ToString(CgroupVersion v) { return v == CgroupVersion::kV1 ? "v1" : "v2"; }

const char* ToString(Controller c) {
  switch (c) {
    case Controller::kMemory:
      return "memory";
    case Controller::kPids:
      return "pids";
    case Controller::kCpu:
      return "cpu";
    case Controller::kFreezer:
      return "freezer";
  }
  return "?";
}

namespace {

struct CgroupMounts {
  std::map<std::string, std::string> v1;  // controller -> mount point
  std::string v2;                         // a cgroup2 mount point, if any
};

// Mount points of cgroup file systems, from /proc/self/mountinfo. Lines look like
// "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu".
absl::StatusOr<CgroupMounts> ReadCgroupMounts() {
  ASSIGN_OR_RETURN(std::string info, ReadFile("/proc/self/mountinfo"));
  CgroupMounts out;
  std::istringstream lines(info);
  std::string line;
  while (std::getline(lines, line)) {
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream pre(line.substr(0, dash));
    std::string id, parent, devno, root, mount_point;
    pre >> id >> parent >> devno >> root >> mount_point;
    std::istringstream post(line.substr(dash + 3));
    std::string fstype, source, super_opts;
    post >> fstype >> source >> super_opts;
    if (root != "/") continue;  // a bind of a sub-tree, not the hierarchy root
    if (fstype == "cgroup2") {
      if (out.v2.empty()) out.v2 = mount_point;
    } else if (fstype == "cgroup") {
      std::istringstream opts(super_opts);
      std::string opt;
      while (std::getline(opts, opt, ',')) {
        if (!out.v1.count(opt)) out.v1[opt] = mount_point;
      }
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CgroupDriver>> CgroupDriver::Detect(const CgroupOptions& options) {
  struct statfs fs;
  bool unified = ::statfs(options.mount_root.c_str(), &fs) == 0 &&
                 static_cast<unsigned long>(fs.f_type) == CGROUP2_SUPER_MAGIC;
  CgroupOptions::Version want = options.version;
  if (want == CgroupOptions::Version::kAuto) {
    want = unified ? CgroupOptions::Version::kV2 : CgroupOptions::Version::kV1;
  }
  if (want == CgroupOptions::Version::kV2) {
    std::string mount = options.mount_root;
    if (!unified) {
      ASSIGN_OR_RETURN(CgroupMounts mounts, ReadCgroupMounts());
      if (mounts.v2.empty()) return FailedPrecondition("no cgroup v2 hierarchy is mounted");
      mount = mounts.v2;
    }
    return internal::NewCgroupV2Driver(mount, options.base);
  }
  if (unified) {
    return FailedPrecondition(
        fmt::format("{} is a cgroup v2 hierarchy; cgroup v1 is not in use", options.mount_root));
  }
  ASSIGN_OR_RETURN(CgroupMounts mounts, ReadCgroupMounts());
  return internal::NewCgroupV1Driver(mounts.v1, options.base);
}

absl::StatusOr<pid_t> PidFromPidfd(int pidfd) {
  ASSIGN_OR_RETURN(std::string info, ReadFile(fmt::format("/proc/self/fdinfo/{}", pidfd)));
  size_t pos = info.find("\nPid:");
  if (pos == std::string::npos) return Internal("fdinfo of the pidfd has no Pid line");
  long pid = std::strtol(info.c_str() + pos + 5, nullptr, 10);
  if (pid <= 0) return NotFound("the process of the pidfd has exited");
  return static_cast<pid_t>(pid);
}

void StopCgroupFreezesForExit() {
  // Taken and never given back: the process ends right after.
  internal::KillFreezeLock().lock();
}

}  // namespace airlock::engine
