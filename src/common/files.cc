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
#include <functional>

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

// One directory on the way down from the root being removed.
struct RemovalFrame {
  ino_t ino = 0;
  std::string name;                  // in its parent ("" for the root)
  std::vector<std::string> subdirs;  // its subdirectories still to remove
};

// "root/a/b/name", for messages only.
std::string Shown(const std::string& root, const std::vector<RemovalFrame>& frames,
                  std::string_view name = {}) {
  std::string out = root;
  for (size_t i = 1; i < frames.size(); ++i) out += "/" + frames[i].name;
  if (!name.empty()) out += fmt::format("/{}", name);
  return out;
}

// Unlinks every entry of `dir` that is not a directory and returns the names of those that are.
absl::StatusOr<std::vector<std::string>> UnlinkFilesIn(int dir, absl::Status* first_error,
                                                       const std::function<std::string()>& shown) {
  int dup_fd = ::dup(dir);
  if (dup_fd < 0) return ErrnoStatus(errno, "dup");
  DIR* d = ::fdopendir(dup_fd);
  if (d == nullptr) {
    ::close(dup_fd);
    return ErrnoStatus(errno, fmt::format("opendir {}", shown()));
  }
  ::rewinddir(d);
  std::vector<std::string> subdirs;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view n(e->d_name);
    if (n == "." || n == "..") continue;
    if (e->d_type == DT_DIR) {
      subdirs.emplace_back(n);
    } else if (::unlinkat(dir, e->d_name, 0) != 0 && errno != ENOENT) {
      if (errno == EISDIR) {  // d_type unknown to this file system
        subdirs.emplace_back(n);
      } else {
        first_error->Update(ErrnoStatus(errno, fmt::format("unlink {}/{}", shown(), n)));
      }
    }
  }
  ::closedir(d);
  return subdirs;
}

}  // namespace

// Depth first with one directory open at a time: the way back up is "..", checked against the
// inode recorded on the way down, so memory grows with the number of directories waiting, not
// with the square of the depth, and no depth runs the stack or the descriptors out (a sandbox
// chooses the shape of its workspace).
absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, fmt::format("stat {}", path));
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, fmt::format("unlink {}", path));
    }
    return absl::OkStatus();
  }
  const dev_t dev = st.st_dev;
  UniqueFd cur(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!cur) return ErrnoStatus(errno, fmt::format("open {}", path));
  std::vector<RemovalFrame> frames;
  absl::Status first_error;
  auto shown = [&] { return Shown(path, frames); };
  frames.push_back({st.st_ino, "", {}});
  ASSIGN_OR_RETURN(frames.back().subdirs, UnlinkFilesIn(cur.get(), &first_error, shown));
  for (;;) {
    RemovalFrame& top = frames.back();
    if (!top.subdirs.empty()) {
      std::string name = std::move(top.subdirs.back());
      top.subdirs.pop_back();
      struct stat sub;
      if (::fstatat(cur.get(), name.c_str(), &sub, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT) {
          first_error.Update(ErrnoStatus(errno, fmt::format("stat {}", Shown(path, frames, name))));
        }
        continue;
      }
      if (!S_ISDIR(sub.st_mode)) {  // replaced meanwhile
        if (::unlinkat(cur.get(), name.c_str(), 0) != 0 && errno != ENOENT) {
          first_error.Update(
              ErrnoStatus(errno, fmt::format("unlink {}", Shown(path, frames, name))));
        }
        continue;
      }
      if (sub.st_dev != dev) {
        first_error.Update(FailedPrecondition(
            fmt::format("remove {}: is a mount point", Shown(path, frames, name))));
        continue;
      }
      UniqueFd child(
          ::openat(cur.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!child) {
        first_error.Update(ErrnoStatus(errno, fmt::format("open {}", Shown(path, frames, name))));
        continue;
      }
      frames.push_back({sub.st_ino, std::move(name), {}});
      absl::StatusOr<std::vector<std::string>> subdirs =
          UnlinkFilesIn(child.get(), &first_error, shown);
      if (!subdirs.ok()) {
        first_error.Update(subdirs.status());
        frames.pop_back();
        continue;
      }
      frames.back().subdirs = *std::move(subdirs);
      cur = std::move(child);
      continue;
    }
    // `top` is empty (or holds what could not be removed): remove it from its parent.
    if (frames.size() == 1) break;
    UniqueFd parent(::openat(cur.get(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    struct stat pst;
    if (!parent || ::fstat(parent.get(), &pst) != 0 || pst.st_dev != dev ||
        pst.st_ino != frames[frames.size() - 2].ino) {
      return first_error.ok()
                 ? Internal(fmt::format("remove {}: the tree moved while it was removed", shown()))
                 : first_error;
    }
    if (::unlinkat(parent.get(), top.name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
      first_error.Update(ErrnoStatus(errno, fmt::format("rmdir {}", shown())));
    }
    frames.pop_back();
    cur = std::move(parent);
  }
  cur.Reset();
  if (!first_error.ok()) return first_error;
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, fmt::format("rmdir {}", path));
  }
  return absl::OkStatus();
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
