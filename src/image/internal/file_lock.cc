#include "image/internal/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>

#include "common/status.h"
#include "fmt/format.h"

namespace airlock::image::internal {

absl::StatusOr<FileLock> FileLock::Acquire(const std::string& path, Mode mode) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return ErrnoStatus(errno, fmt::format("open lock {}", path));
  int op = mode == Mode::kShared ? LOCK_SH : LOCK_EX;
  while (::flock(fd.get(), op) != 0) {
    if (errno != EINTR) return ErrnoStatus(errno, fmt::format("lock {}", path));
  }
  return FileLock(std::move(fd));
}

absl::StatusOr<FileLock> FileLock::TryLock(UniqueFd fd) {
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return absl::UnavailableError("locked by another holder");
    if (errno != EINTR) return ErrnoStatus(errno, "lock");
  }
  return FileLock(std::move(fd));
}

}  // namespace airlock::image::internal
