// File helpers shared by the cgroup v1 and v2 drivers. Errors name the file.
#ifndef AIRLOCK_ENGINE_INTERNAL_CGROUP_FILES_H_
#define AIRLOCK_ENGINE_INTERNAL_CGROUP_FILES_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace airlock::engine::internal {

// Reads a (small) cgroup file, trailing whitespace removed.
absl::StatusOr<std::string> ReadCgroupFile(const std::string& path);
// Writes `value` to a cgroup file in a single write(2), as the kernel expects.
absl::Status WriteCgroupFile(const std::string& path, std::string_view value);

// The integer in a file holding one ("max" counts as `max_value`). nullopt when the file is absent.
absl::StatusOr<std::optional<int64_t>> ReadCgroupInt(const std::string& path,
                                                     int64_t max_value = 0);

// The value of "key N" in a flat keyed file (memory.events, cpu.stat, ...); nullopt when
// the file or key is absent.
std::optional<int64_t> ReadKeyedValue(const std::string& path, std::string_view key);

// Pids listed in a cgroup.procs file of `dir` and of every directory below it.
absl::StatusOr<std::vector<pid_t>> ReadProcsRecursive(const std::string& dir);

// Held shared by a kill from the moment it freezes a cgroup until it thaws it, and exclusively
// by StopCgroupFreezesForExit.
std::shared_mutex& KillFreezeLock();

// SIGKILL to `pid` if it is a member of cgroup `name` (a path below a hierarchy's root, as
// /proc/PID/cgroup shows it) or of a cgroup below it, never to another process: a pid read from
// cgroup.procs may have exited and been reused by a host process since. The pid is held by a
// pidfd, its membership read, and the signal sent through the pidfd only if the process was
// still alive after that read (so the read was of it, not of a successor). OK when the process
// was signalled, is gone or is not a member; an error when it could not be decided (no
// descriptor left for a pidfd, its /proc file unreadable while it lives).
absl::Status KillIfMember(pid_t pid, std::string_view name);

// Names of the subdirectories of `dir`.
absl::StatusOr<std::vector<std::string>> ListSubdirs(const std::string& dir);

// rmdir of `dir` and every subdirectory, deepest first. NotFound counts as success.
absl::Status RemoveCgroupDir(const std::string& dir);

// Polls `done` every millisecond or so until it returns true or `timeout` passes.
bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout);

// Rejects names that are not a single path component of [A-Za-z0-9._-].
absl::Status CheckCgroupName(std::string_view name);

}  // namespace airlock::engine::internal

#endif  // AIRLOCK_ENGINE_INTERNAL_CGROUP_FILES_H_
