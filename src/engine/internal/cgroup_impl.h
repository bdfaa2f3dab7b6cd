// Factories of the two cgroup drivers; CgroupDriver::Detect picks one.
#ifndef AIRLOCK_ENGINE_INTERNAL_CGROUP_IMPL_H_
#define AIRLOCK_ENGINE_INTERNAL_CGROUP_IMPL_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/cgroup.h"

namespace airlock::engine::internal {

// `mount` is a cgroup2 mount point; `base` is created below it if missing, with the wanted
// controllers enabled down the path where the hierarchy offers them.
absl::StatusOr<std::unique_ptr<CgroupDriver>> NewCgroupV2Driver(const std::string& mount,
                                                                const std::string& base);

// `mounts` maps each v1 controller name ("memory", "pids", "cpu", "cpuacct", "freezer",
// "blkio") to the mount point of its hierarchy (several names may share one mount).
absl::StatusOr<std::unique_ptr<CgroupDriver>> NewCgroupV1Driver(
    const std::map<std::string, std::string>& mounts, const std::string& base);

}  // namespace airlock::engine::internal

#endif  // AIRLOCK_ENGINE_INTERNAL_CGROUP_IMPL_H_
