// Small file helpers with Status errors that name the path.
#ifndef AIRLOCK_COMMON_FILES_H_
#define AIRLOCK_COMMON_FILES_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace airlock {

// Reads a whole file; fails with the path in the message. `max_bytes` bounds what is read
// (ResourceExhausted when the file is larger).
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes = 64 << 20);

// Writes `data` to `path` via a temporary file in the same directory and rename(2), with `mode`.
absl::Status WriteFileAtomic(const std::string& path, std::string_view data, int mode = 0644);

// Writes all of `data` to `fd`, retrying on EINTR and short writes.
absl::Status WriteAll(int fd, std::string_view data);

// mkdir -p with `mode` for the directories it creates.
absl::Status MakeDirs(const std::string& path, int mode = 0755);

// rm -rf that never crosses into another mount (it stops at mount points and reports them).
absl::Status RemoveTree(const std::string& path);

}  // namespace airlock

#endif  // AIRLOCK_COMMON_FILES_H_
