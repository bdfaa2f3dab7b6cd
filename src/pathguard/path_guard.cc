#include "pathguard/path_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "common/status.h"
#include "fmt/format.h"

namespace airlock {
namespace {

// openat2 fails with EAGAIN when a rename or mount raced with the resolution of a ".." that a
// symlink target contained; the documented answer is to retry.
constexpr int kOpenat2Attempts = 16;

int Openat2(int dirfd, const char* path, uint64_t flags, uint64_t resolve) {
  struct open_how how = {};
  how.flags = flags;
  how.resolve = resolve;
  for (int attempt = 1;; ++attempt) {
    int fd = static_cast<int>(::syscall(SYS_openat2, dirfd, path, &how, sizeof(how)));
    if (fd >= 0 || !(errno == EINTR || (errno == EAGAIN && attempt < kOpenat2Attempts))) {
      return fd;
    }
  }
}

bool IsSymlinkAt(int dirfd, const char* name) {
  struct stat st;
  return ::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
}

// Whether directory `name` in `dirfd` (lstat `st`) is the root of a mount. A device change
// catches other file systems; statx's mount-root flag (Linux 5.8+) also catches bind mounts of
// the same file system, which keep the device number.
bool IsMountPoint(int dirfd, const char* name, const struct stat& st, dev_t parent_dev) {
  if (st.st_dev != parent_dev) return true;
  struct statx stx;
  if (::statx(dirfd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_TYPE, &stx) != 0) {
    return false;
  }
  return (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) != 0 &&
         (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
}

// The error for a failed resolution of `shown`, with the escape cases named as such.
absl::Status ResolveError(int err, std::string_view shown) {
  switch (err) {
    case EXDEV:
      return PermissionDenied(fmt::format("path {} escapes the root", shown));
    case ELOOP:
      return PermissionDenied(
          fmt::format("path {}: a symlink on the way is not allowed (or loops)", shown));
    case ENOENT:
      return NotFound(fmt::format("path {}: no such file or directory", shown));
    case ENOTDIR:
      return InvalidArgument(fmt::format("path {}: a component is not a directory", shown));
    case ENXIO:  // a FIFO without a reader, opened for writing without blocking
      return InvalidArgument(fmt::format("path {}: not a regular file", shown));
    default:
      return ErrnoStatus(err, fmt::format("path {}", shown));
  }
}

std::string Join(const std::vector<std::string>& parts, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) {
    if (i) out += '/';
    out += parts[i];
  }
  return out.empty() ? "." : out;
}

}  // namespace

absl::StatusOr<PathGuard> PathGuard::Open(const std::string& root, ResolveMode mode,
                                          SymlinkPolicy symlinks) {
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(errno, fmt::format("open root {}", root));
  if (mode == ResolveMode::kAuto) {
    int probe = Openat2(fd.get(), ".", O_PATH | O_CLOEXEC, RESOLVE_BENEATH);
    mode = probe >= 0 ? ResolveMode::kOpenat2 : ResolveMode::kComponentWalk;
    if (probe >= 0) ::close(probe);
  }
  return PathGuard(std::move(fd), mode, symlinks);
}

absl::StatusOr<std::vector<std::string>> PathGuard::Split(std::string_view path) {
  if (path.size() > kMaxPathBytes) {
    return InvalidArgument(
        fmt::format("path is {} bytes; the limit is {}", path.size(), kMaxPathBytes));
  }
  if (path.find('\0') != std::string_view::npos) return InvalidArgument("path contains a NUL byte");
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    std::string_view part = path.substr(pos, slash == std::string_view::npos ? slash : slash - pos);
    pos = slash == std::string_view::npos ? path.size() + 1 : slash + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      return InvalidArgument(fmt::format("path {}: \"..\" is not allowed", path));
    }
    if (part.size() > 255) return InvalidArgument(fmt::format("path {}: a name is too long", path));
    parts.emplace_back(part);
  }
  return parts;
}

absl::StatusOr<UniqueFd> PathGuard::Resolve(const std::vector<std::string>& parts, size_t count,
                                            int flags, std::string_view shown) const {
  if (mode_ == ResolveMode::kOpenat2) {
    std::string rel = Join(parts, count);
    uint64_t resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    if (symlinks_ == SymlinkPolicy::kRefuse) resolve |= RESOLVE_NO_SYMLINKS;
    int fd = Openat2(root_.get(), rel.c_str(), static_cast<uint64_t>(flags | O_CLOEXEC), resolve);
    if (fd < 0) return ResolveError(errno, shown);
    return UniqueFd(fd);
  }
  // One component at a time, refusing every symlink.
  UniqueFd dir(::fcntl(root_.get(), F_DUPFD_CLOEXEC, 0));
  if (!dir) return ErrnoStatus(errno, "dup");
  if (count == 0) {
    UniqueFd fd(::openat(root_.get(), ".", flags | O_CLOEXEC));
    if (!fd) return ResolveError(errno, shown);
    return fd;
  }
  for (size_t i = 0; i + 1 < count; ++i) {
    UniqueFd next(
        ::openat(dir.get(), parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next) {
      int err = errno;
      if (err == ENOTDIR && IsSymlinkAt(dir.get(), parts[i].c_str())) {
        err = ELOOP;  // a symlink on the way, not a file
      }
      return ResolveError(err, shown);
    }
    dir = std::move(next);
  }
  UniqueFd fd(::openat(dir.get(), parts[count - 1].c_str(), flags | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    int err = errno;
    // With O_DIRECTORY a final symlink fails with ENOTDIR: it is a refused symlink all the same.
    if (err == ENOTDIR && IsSymlinkAt(dir.get(), parts[count - 1].c_str())) err = ELOOP;
    return ResolveError(err, shown);
  }
  if (flags & O_PATH) {
    // O_PATH|O_NOFOLLOW opens a symlink itself instead of failing: refuse it here.
    struct stat st;
    if (::fstat(fd.get(), &st) == 0 && S_ISLNK(st.st_mode)) return ResolveError(ELOOP, shown);
  }
  return fd;
}

namespace {

// Takes away the O_NONBLOCK a file was opened with to check it.
absl::Status MakeBlocking(int fd, std::string_view path) {
  if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    return ErrnoStatus(errno, fmt::format("fcntl {}", path));
  }
  return absl::OkStatus();
}

// OK for a regular file or a directory, which then loses the O_NONBLOCK it was opened with unless
// the caller asked for it.
absl::Status RegularOrDirectory(int fd, std::string_view path, bool keep_nonblock) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, fmt::format("stat {}", path));
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return InvalidArgument(fmt::format("path {}: not a regular file or a directory", path));
  }
  return keep_nonblock ? absl::OkStatus() : MakeBlocking(fd, path);
}

}  // namespace

absl::StatusOr<UniqueFd> PathGuard::OpenPath(std::string_view path, int flags) const {
  if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {
    return InvalidArgument("PathGuard::OpenPath does not create files; use CreateFile");
  }
  ASSIGN_OR_RETURN(std::vector<std::string> parts, Split(path));
  // openat2 refuses O_PATH with any flag but O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC.
  if ((flags & O_PATH) != 0) return Resolve(parts, parts.size(), flags, path);
  // Opened without blocking (a FIFO with no writer would hold the open, or its first read, for
  // ever), then held to a file or a directory.
  ASSIGN_OR_RETURN(UniqueFd fd, Resolve(parts, parts.size(), flags | O_NOCTTY | O_NONBLOCK, path));
  RETURN_IF_ERROR(RegularOrDirectory(fd.get(), path, (flags & O_NONBLOCK) != 0));
  return fd;
}

absl::StatusOr<PathGuard::Parent> PathGuard::OpenParent(std::string_view path) const {
  ASSIGN_OR_RETURN(std::vector<std::string> parts, Split(path));
  if (parts.empty()) return InvalidArgument(fmt::format("path {}: the root has no parent", path));
  ASSIGN_OR_RETURN(UniqueFd dir, Resolve(parts, parts.size() - 1, O_RDONLY | O_DIRECTORY, path));
  return Parent{std::move(dir), parts.back()};
}

absl::StatusOr<UniqueFd> PathGuard::CreateFile(std::string_view path, mode_t mode,
                                               bool exclusive) const {
  ASSIGN_OR_RETURN(Parent p, OpenParent(path));
  // Without blocking: a FIFO planted at the path would hold the open until a reader came (with
  // O_NONBLOCK it fails with ENXIO instead).
  int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK |
              (exclusive ? O_EXCL : O_TRUNC);
  UniqueFd fd(::openat(p.dir.get(), p.name.c_str(), flags, mode));
  if (!fd) return ResolveError(errno, path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, fmt::format("stat {}", path));
  if (!S_ISREG(st.st_mode))
    return InvalidArgument(fmt::format("path {}: not a regular file", path));
  RETURN_IF_ERROR(MakeBlocking(fd.get(), path));
  return fd;
}

absl::Status PathGuard::Mkdir(std::string_view path, mode_t mode, bool parents) const {
  ASSIGN_OR_RETURN(std::vector<std::string> parts, Split(path));
  if (parts.empty()) return parents ? absl::OkStatus() : FailedPrecondition("the root exists");
  for (size_t i = parents ? 1 : parts.size(); i <= parts.size(); ++i) {
    absl::StatusOr<UniqueFd> existing = Resolve(parts, i, O_PATH | O_DIRECTORY, path);
    if (existing.ok()) {
      if (i == parts.size() && !parents) {
        return absl::AlreadyExistsError(fmt::format("path {}: already exists", path));
      }
      continue;
    }
    if (existing.status().code() != absl::StatusCode::kNotFound) return existing.status();
    ASSIGN_OR_RETURN(UniqueFd dir, Resolve(parts, i - 1, O_RDONLY | O_DIRECTORY, path));
    if (::mkdirat(dir.get(), parts[i - 1].c_str(), mode) != 0 && errno != EEXIST) {
      return ResolveError(errno, path);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<struct stat> PathGuard::Stat(std::string_view path) const {
  ASSIGN_OR_RETURN(std::vector<std::string> parts, Split(path));
  struct stat st;
  if (parts.empty()) {
    if (::fstat(root_.get(), &st) != 0) return ErrnoStatus(errno, "stat root");
    return st;
  }
  ASSIGN_OR_RETURN(Parent p, OpenParent(path));
  if (::fstatat(p.dir.get(), p.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return ResolveError(errno, path);
  }
  return st;
}

namespace {

constexpr size_t kMaxEntries = 100000;

absl::StatusOr<std::vector<PathGuard::Entry>> ListFd(int dirfd, std::string_view shown) {
  int dup_fd = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return ErrnoStatus(errno, "dup");
  DIR* d = ::fdopendir(dup_fd);
  if (d == nullptr) {
    ::close(dup_fd);
    return ErrnoStatus(errno, fmt::format("list {}", shown));
  }
  std::vector<PathGuard::Entry> out;
  absl::Status status;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view n(e->d_name);
    if (n == "." || n == "..") continue;
    if (out.size() >= kMaxEntries) {
      status = ResourceExhausted(fmt::format("list {}: more than {} entries", shown, kMaxEntries));
      break;
    }
    PathGuard::Entry entry{std::string(n), {}};
    if (::fstatat(dirfd, e->d_name, &entry.st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // raced away
    out.push_back(std::move(entry));
  }
  ::closedir(d);
  if (!status.ok()) return status;
  return out;
}

// Removes everything inside `dirfd`, staying on device `dev` and never following symlinks.
absl::Status EmptyDir(int dirfd, dev_t dev, std::string_view shown, int depth) {
  if (depth > 256) return FailedPrecondition(fmt::format("remove {}: tree too deep", shown));
  ASSIGN_OR_RETURN(std::vector<PathGuard::Entry> entries, ListFd(dirfd, shown));
  for (const PathGuard::Entry& e : entries) {
    if (S_ISDIR(e.st.st_mode)) {
      if (IsMountPoint(dirfd, e.name.c_str(), e.st, dev)) {
        return FailedPrecondition(fmt::format("remove {}/{}: is a mount point", shown, e.name));
      }
      UniqueFd sub(
          ::openat(dirfd, e.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) return ErrnoStatus(errno, fmt::format("open {}/{}", shown, e.name));
      RETURN_IF_ERROR(EmptyDir(sub.get(), dev, fmt::format("{}/{}", shown, e.name), depth + 1));
      if (::unlinkat(dirfd, e.name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
        return ErrnoStatus(errno, fmt::format("rmdir {}/{}", shown, e.name));
      }
    } else if (::unlinkat(dirfd, e.name.c_str(), 0) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, fmt::format("unlink {}/{}", shown, e.name));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<PathGuard::Entry>> PathGuard::List(std::string_view path) const {
  ASSIGN_OR_RETURN(UniqueFd dir, OpenPath(path, O_RDONLY | O_DIRECTORY));
  return ListFd(dir.get(), path);
}

absl::Status PathGuard::Remove(std::string_view path, bool recursive) const {
  ASSIGN_OR_RETURN(Parent p, OpenParent(path));
  struct stat st;
  if (::fstatat(p.dir.get(), p.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return ResolveError(errno, path);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(p.dir.get(), p.name.c_str(), 0) != 0) return ResolveError(errno, path);
    return absl::OkStatus();
  }
  struct stat parent_st;
  if (::fstat(p.dir.get(), &parent_st) != 0) {
    return ErrnoStatus(errno, fmt::format("remove {}: stat the parent", path));
  }
  if (IsMountPoint(p.dir.get(), p.name.c_str(), st, parent_st.st_dev)) {
    return FailedPrecondition(fmt::format("remove {}: is a mount point", path));
  }
  if (recursive) {
    UniqueFd dir(
        ::openat(p.dir.get(), p.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) return ResolveError(errno, path);
    RETURN_IF_ERROR(EmptyDir(dir.get(), st.st_dev, path, 0));
  }
  if (::unlinkat(p.dir.get(), p.name.c_str(), AT_REMOVEDIR) != 0) {
    if (errno == ENOTEMPTY || errno == EEXIST) {
      return FailedPrecondition(fmt::format("remove {}: directory not empty", path));
    }
    return ResolveError(errno, path);
  }
  return absl::OkStatus();
}

}  // namespace airlock
