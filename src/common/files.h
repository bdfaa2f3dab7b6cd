// Small file helpers with Status errors that name the path.
#ifndef AIRLOCK_COMMON_FILES_H_
#define AIRLOCK_COMMON_FILES_H_

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace airlock {

// Reads a whole file; fails with the path in the message. `max_bytes` bounds what is read
// (ResourceExhausted when the file is larger).
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes = 64 << 20);

// Reads the file `path` of the root file system at `root` as a process chrooted there would:
// every symlink, absolute ones included, resolves inside `root` (openat2 RESOLVE_IN_ROOT), so an
// image's etc/passwd -> /etc/shadow reads the image's file, never the host's. FailedPrecondition
// when it is not a regular file (a fifo is never read); errno-based errors otherwise.
absl::StatusOr<std::string> ReadFileInRoot(const std::string& root, const std::string& path,
                                           size_t max_bytes = 1 << 20);

// Writes `data` to `path` via a temporary file in the same directory and rename(2), with `mode`.
absl::Status WriteFileAtomic(const std::string& path, std::string_view data, int mode = 0644);

// Writes all of `data` to `fd`, retrying on EINTR and short writes.
absl::Status WriteAll(int fd, std::string_view data);

// mkdir -p with `mode` for the directories it creates.
absl::Status MakeDirs(const std::string& path, int mode = 0755);

// The open descriptors of process `pid` (0: this process, without the one used to list them),
// ascending, from /proc/PID/fd. Empty when that directory cannot be read (the process is gone).
std::vector<int> OpenFds(pid_t pid = 0);

// rm -rf that never crosses into another mount (it stops at mount points and reports them).
absl::Status RemoveTree(const std::string& path);

}  // namespace airlock

#endif  // AIRLOCK_COMMON_FILES_H_
