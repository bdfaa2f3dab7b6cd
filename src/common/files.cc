#include "common/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "common/ids.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "fmt/format.h"

namespace airlock {

namespace {

absl::StatusOr<std::string> ReadAll(int fd, const std::string& shown, size_t max_bytes) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, fmt::format("read {}", shown));
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      return ResourceExhausted(fmt::format("read {}: larger than {} bytes", shown, max_bytes));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(errno, fmt::format("open {}", path));
  return ReadAll(fd.get(), path, max_bytes);
}

absl::StatusOr<std::string> ReadFileInRoot(const std::string& root, const std::string& path,
                                           size_t max_bytes) {
  const std::string shown = fmt::format("{} in {}", path, root);
  UniqueFd dir(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return ErrnoStatus(errno, fmt::format("open {}", root));
  struct open_how how = {};
  how.flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;  // a fifo must not block the open
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, dir.get(), path.c_str(), &how, sizeof(how))));
  if (!fd) return ErrnoStatus(errno, fmt::format("open {}", shown));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, fmt::format("stat {}", shown));
  if (!S_ISREG(st.st_mode)) return FailedPrecondition(fmt::format("{}: not a regular file", shown));
  return ReadAll(fd.get(), shown, max_bytes);
}

absl::Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "write");
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomic(const std::string& path, std::string_view data, int mode) {
  std::string tmp = fmt::format("{}.tmp-{}", path, RandomHex(4));
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!fd) return ErrnoStatus(errno, fmt::format("create {}", tmp));
  absl::Status s = WriteAll(fd.get(), data);
  if (s.ok() && ::fchmod(fd.get(), static_cast<mode_t>(mode)) != 0) {
    s = ErrnoStatus(errno, fmt::format("chmod {}", tmp));
  }
  fd.Reset();
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoStatus(errno, fmt::format("rename {} to {}", tmp, path));
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return Annotate(s, fmt::format("write {}", path));
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& path, int mode) {
  if (path.empty()) return absl::InvalidArgumentError("mkdir: empty path");
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), static_cast<mode_t>(mode)) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, fmt::format("mkdir {}", prefix));
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, fmt::format("stat {}", path));
  if (!S_ISDIR(st.st_mode)) return FailedPrecondition(fmt::format("{}: not a directory", path));
  return absl::OkStatus();
}

namespace {

absl::Status RemoveAt(int parent_fd, const char* name, dev_t dev, const std::string& shown) {
  struct stat st;
  if (::fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, fmt::format("stat {}", shown));
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(parent_fd, name, 0) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, fmt::format("unlink {}", shown));
    }
    return absl::OkStatus();
  }
  if (st.st_dev != dev) {
    return FailedPrecondition(fmt::format("remove {}: is a mount point", shown));
  }
  UniqueFd dir(::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return ErrnoStatus(errno, fmt::format("open {}", shown));
  int dup_fd = ::dup(dir.get());
  if (dup_fd < 0) return ErrnoStatus(errno, "dup");
  DIR* d = ::fdopendir(dup_fd);
  if (d == nullptr) {
    ::close(dup_fd);
    return ErrnoStatus(errno, fmt::format("opendir {}", shown));
  }
  absl::Status status;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view n(e->d_name);
    if (n == "." || n == "..") continue;
    status.Update(RemoveAt(dir.get(), e->d_name, dev, fmt::format("{}/{}", shown, n)));
  }
  ::closedir(d);
  if (!status.ok()) return status;
  if (::unlinkat(parent_fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, fmt::format("rmdir {}", shown));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, fmt::format("stat {}", path));
  }
  return RemoveAt(AT_FDCWD, path.c_str(), st.st_dev, path);
}

std::vector<int> OpenFds(pid_t pid) {
  std::vector<int> fds;
  std::string path = pid == 0 ? "/proc/self/fd" : fmt::format("/proc/{}/fd", pid);
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return fds;
  while (const struct dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') fds.push_back(std::atoi(e->d_name));
  }
  if (pid == 0) std::erase(fds, ::dirfd(dir));
  ::closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fds;
}

}  // namespace airlock
