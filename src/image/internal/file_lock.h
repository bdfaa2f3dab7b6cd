// flock(2) locks on files or directories: they order processes as well as threads (each
// FileLock has its own open file description) and vanish with their holder.
#ifndef AIRLOCK_IMAGE_INTERNAL_FILE_LOCK_H_
#define AIRLOCK_IMAGE_INTERNAL_FILE_LOCK_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace airlock::image::internal {

class FileLock {
 public:
  enum class Mode { kShared, kExclusive };

  // Opens (creating a regular file when missing) and locks `path`, waiting for other holders.
  static absl::StatusOr<FileLock> Acquire(const std::string& path, Mode mode);
  // Locks an open descriptor without waiting; Unavailable when someone else holds it.
  static absl::StatusOr<FileLock> TryLock(UniqueFd fd);

  FileLock(FileLock&&) = default;
  FileLock& operator=(FileLock&&) = default;

 private:
  explicit FileLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;  // closing it releases the lock
};

}  // namespace airlock::image::internal

#endif  // AIRLOCK_IMAGE_INTERNAL_FILE_LOCK_H_
