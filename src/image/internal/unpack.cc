#include "image/internal/unpack.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "common/status.h"
#include "fmt/format.h"

namespace airlock::image::internal {
namespace {

constexpr size_t kReadBlock = 1 << 20;
constexpr int64_t kReportBytes = 8 << 20;
constexpr int64_t kReportEntries = 4096;
constexpr int kMaxDepth = 256;
constexpr std::string_view kWhiteout = ".wh.";
constexpr std::string_view kOpaque = ".wh..wh..opq";

using ArchivePtr = std::unique_ptr<archive, decltype(&archive_read_free)>;

std::string_view Basename(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string Dirname(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? "" : std::string(path.substr(0, slash));
}

std::string Join(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : fmt::format("{}/{}", dir, name);
}

std::string ArchiveError(archive* a) {
  const char* msg = archive_error_string(a);
  return msg != nullptr ? msg : "unknown libarchive error";
}

absl::Status PwriteAll(int fd, const char* data, size_t size, off_t offset) {
  while (size > 0) {
    ssize_t n = ::pwrite(fd, data, size, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "write");
    }
    data += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> CleanEntryPath(std::string_view raw) {
  if (raw.size() > PathGuard::kMaxPathBytes) {
    return InvalidArgument(
        fmt::format("the name is {} bytes; the limit is {}", raw.size(), PathGuard::kMaxPathBytes));
  }
  if (raw.find('\0') != std::string_view::npos) return InvalidArgument("the name has a NUL byte");
  if (!raw.empty() && raw.front() == '/') {
    return PermissionDenied("an absolute name is not allowed (entries are relative to the root)");
  }
  std::string out;
  size_t pos = 0;
  while (pos <= raw.size()) {
    size_t slash = raw.find('/', pos);
    std::string_view part =
        raw.substr(pos, slash == std::string_view::npos ? std::string_view::npos : slash - pos);
    pos = slash == std::string_view::npos ? raw.size() + 1 : slash + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") return PermissionDenied("\"..\" in a name is not allowed");
    if (part.size() > NAME_MAX) return InvalidArgument("a name component is too long");
    if (!out.empty()) out += '/';
    out += part;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Unpacker>> Unpacker::Create(const std::string& root,
                                                           UnpackOptions options) {
  ASSIGN_OR_RETURN(PathGuard guard,
                   PathGuard::Open(root, ResolveMode::kAuto, SymlinkPolicy::kRefuse));
  return std::unique_ptr<Unpacker>(new Unpacker(std::move(guard), std::move(options)));
}

absl::Status Unpacker::Apply(int fd, std::string_view name) {
  ArchivePtr a(archive_read_new(), archive_read_free);
  if (!a) return Internal("archive_read_new failed");
  // Only filters libarchive implements itself: filter_all would run external programs (lrzip,
  // lzop...) for some formats, on untrusted input.
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_zstd(a.get());
  archive_read_support_filter_xz(a.get());
  archive_read_support_filter_bzip2(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_empty(a.get());
  if (archive_read_open_fd(a.get(), fd, kReadBlock) != ARCHIVE_OK) {
    return InvalidArgument(fmt::format("{}: {}", name, ArchiveError(a.get())));
  }
  written_.clear();
  counters_.input_bytes = 0;
  for (;;) {
    archive_entry* e = nullptr;
    int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      return InvalidArgument(fmt::format("{}: read the archive: {}", name, ArchiveError(a.get())));
    }
    counters_.input_bytes = archive_filter_bytes(a.get(), -1);
    if (++counters_.entries > options_.max_entries) {
      return ResourceExhausted(
          fmt::format("{}: more than {} archive entries (the import's entry limit)", name,
                      options_.max_entries));
    }
    const char* raw = archive_entry_pathname(e);
    if (raw == nullptr) raw = archive_entry_pathname_utf8(e);
    if (raw == nullptr) return InvalidArgument(fmt::format("{}: an entry has no name", name));
    absl::Status status = [&]() -> absl::Status {
      ASSIGN_OR_RETURN(std::string path, CleanEntryPath(raw));
      return ApplyEntry(a.get(), e, path);
    }();
    if (!status.ok()) return Annotate(status, fmt::format("{}: entry {:?}", name, raw));
    Report(false);
  }
  counters_.input_bytes = archive_filter_bytes(a.get(), -1);
  Report(true);
  return absl::OkStatus();
}

absl::Status Unpacker::ApplyEntry(archive* a, archive_entry* e, const std::string& path) {
  if (path.empty()) return absl::OkStatus();  // the root keeps its own mode and owner
  std::string_view base = Basename(path);
  if (options_.whiteouts && base.substr(0, kWhiteout.size()) == kWhiteout) {
    std::string dir = Dirname(path);
    if (base == kOpaque) return MakeOpaque(dir);
    if (base.substr(0, 2 * kWhiteout.size()) == ".wh..wh.") {
      return absl::OkStatus();  // other AUFS bookkeeping names carry nothing
    }
    std::string_view victim = base.substr(kWhiteout.size());
    if (victim.empty() || victim == "." || victim == "..") {
      return InvalidArgument("a whiteout that names no entry");
    }
    return RemoveAt(Join(dir, victim));
  }
  const char* hardlink = archive_entry_hardlink(e);
  mode_t type = archive_entry_filetype(e);
  if (hardlink == nullptr && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
    // Device nodes, fifos and sockets: a sandbox gets its own /dev, and nothing else needs them.
    ++counters_.skipped;
    return absl::OkStatus();
  }
  MarkWritten(path);
  ASSIGN_OR_RETURN(PathGuard::Parent parent, OpenParent(path));
  const int dirfd = parent.dir.get();
  const char* name = parent.name.c_str();
  struct stat st;
  bool exists = ::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (!exists && errno != ENOENT) return ErrnoStatus(errno, "stat");
  if (hardlink != nullptr) return HardLink(e, dirfd, parent.name, path);

  Meta meta{
      static_cast<mode_t>(archive_entry_perm(e) & 07777),
      archive_entry_uid(e),
      archive_entry_gid(e),
      {archive_entry_mtime(e), archive_entry_mtime_is_set(e) ? archive_entry_mtime_nsec(e) : 0}};
  switch (type) {
    case AE_IFDIR:
      if (exists && !S_ISDIR(st.st_mode)) {
        RETURN_IF_ERROR(RemoveAt(path));
        exists = false;
      }
      if (!exists && ::mkdirat(dirfd, name, 0755) != 0) return ErrnoStatus(errno, "mkdir");
      dirs_.push_back({path, meta});
      return absl::OkStatus();
    case AE_IFLNK: {
      const char* target = archive_entry_symlink(e);
      if (target == nullptr || *target == '\0') return InvalidArgument("a symlink with no target");
      if (exists) RETURN_IF_ERROR(RemoveAt(path));
      // The target is data: it is only ever resolved inside a sandbox's own mount namespace.
      if (::symlinkat(target, dirfd, name) != 0) return ErrnoStatus(errno, "symlink");
      return Own(dirfd, name, -1, meta, /*is_dir=*/false);
    }
    default:
      if (exists) RETURN_IF_ERROR(RemoveAt(path));
      return WriteFile(a, e, dirfd, parent.name, meta);
  }
}

absl::Status Unpacker::WriteFile(archive* a, archive_entry* e, int dirfd, const std::string& name,
                                 const Meta& meta) {
  int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
  if (size < 0) return InvalidArgument("a negative size");
  if (size > options_.max_bytes - counters_.bytes) {
    return ResourceExhausted(fmt::format(
        "the files unpacked exceed {} bytes (the import's size limit)", options_.max_bytes));
  }
  counters_.bytes += size;
  UniqueFd fd(::openat(dirfd, name.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600));
  if (!fd) return ErrnoStatus(errno, "create");
  int64_t end = 0;
  for (;;) {
    const void* buf = nullptr;
    size_t len = 0;
    la_int64_t offset = 0;
    int r = archive_read_data_block(a, &buf, &len, &offset);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) return InvalidArgument(fmt::format("read data: {}", ArchiveError(a)));
    if (offset < 0 || static_cast<int64_t>(len) > size - offset) {
      return InvalidArgument("data beyond the entry's declared size");
    }
    RETURN_IF_ERROR(PwriteAll(fd.get(), static_cast<const char*>(buf), len, offset));
    end = std::max<int64_t>(end, offset + static_cast<int64_t>(len));
  }
  if (end < size && ::ftruncate(fd.get(), size) != 0) return ErrnoStatus(errno, "truncate");
  return Own(dirfd, name.c_str(), fd.get(), meta, /*is_dir=*/false);
}

absl::Status Unpacker::HardLink(archive_entry* e, int dirfd, const std::string& name,
                                const std::string& path) {
  ASSIGN_OR_RETURN(std::string target, CleanEntryPath(archive_entry_hardlink(e)),
                   fmt::format("hard link target {:?}", archive_entry_hardlink(e)));
  if (target.empty()) return PermissionDenied("a hard link to the root");
  ASSIGN_OR_RETURN(PathGuard::Parent t, guard_.OpenParent(target),
                   fmt::format("hard link target {:?}", target));
  struct stat tst;
  if (::fstatat(t.dir.get(), t.name.c_str(), &tst, AT_SYMLINK_NOFOLLOW) != 0) {
    return InvalidArgument(fmt::format("hard link target {:?} is not in the image (yet)", target));
  }
  if (S_ISDIR(tst.st_mode)) {
    return InvalidArgument(fmt::format("hard link target {:?} is a directory", target));
  }
  struct stat st;
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (st.st_ino == tst.st_ino && st.st_dev == tst.st_dev) return absl::OkStatus();
    RETURN_IF_ERROR(RemoveAt(path));
  }
  if (::linkat(t.dir.get(), t.name.c_str(), dirfd, name.c_str(), 0) != 0) {
    return ErrnoStatus(errno, fmt::format("link to {:?}", target));
  }
  return absl::OkStatus();
}

absl::StatusOr<PathGuard::Parent> Unpacker::OpenParent(const std::string& path) {
  absl::StatusOr<PathGuard::Parent> parent = guard_.OpenParent(path);
  if (parent.ok() || parent.status().code() != absl::StatusCode::kNotFound) return parent;
  // Archives need not list every directory before the files in it.
  RETURN_IF_ERROR(guard_.Mkdir(Dirname(path), 0755, /*parents=*/true));
  return guard_.OpenParent(path);
}

absl::Status Unpacker::RemoveAt(const std::string& path) {
  absl::Status s = guard_.Remove(path, /*recursive=*/true);
  if (s.code() == absl::StatusCode::kNotFound) return absl::OkStatus();
  return s;
}

absl::Status Unpacker::MakeOpaque(const std::string& dir) {
  if (!dir.empty()) MarkWritten(dir);
  absl::StatusOr<UniqueFd> fd = guard_.OpenPath(dir, O_RDONLY | O_DIRECTORY);
  if (fd.status().code() == absl::StatusCode::kNotFound) {
    return guard_.Mkdir(dir, 0755, /*parents=*/true);  // new: nothing below to hide
  }
  if (!fd.ok()) return fd.status();
  return HideLower(fd->get(), dir, 0);
}

absl::Status Unpacker::HideLower(int dirfd, const std::string& dir, int depth) {
  if (depth > kMaxDepth) return InvalidArgument("directory tree too deep");
  std::vector<std::pair<std::string, bool>> children;  // name, is a directory
  {
    int dup_fd = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) return ErrnoStatus(errno, "dup");
    DIR* d = ::fdopendir(dup_fd);
    if (d == nullptr) {
      ::close(dup_fd);
      return ErrnoStatus(errno, fmt::format("list {}", dir.empty() ? "/" : dir));
    }
    while (struct dirent* ent = ::readdir(d)) {
      std::string_view n(ent->d_name);
      if (n == "." || n == "..") continue;
      bool is_dir = ent->d_type == DT_DIR;
      if (ent->d_type == DT_UNKNOWN) {
        struct stat st;
        is_dir =
            ::fstatat(dirfd, ent->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
      }
      children.emplace_back(std::string(n), is_dir);
    }
    ::closedir(d);
  }
  for (const auto& [name, is_dir] : children) {
    std::string child = Join(dir, name);
    if (!written_.contains(child)) {
      RETURN_IF_ERROR(RemoveAt(child));
    } else if (is_dir) {
      // Written in this layer, but lower layers may have put more into it.
      UniqueFd sub(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) return ErrnoStatus(errno, fmt::format("open {}", child));
      RETURN_IF_ERROR(HideLower(sub.get(), child, depth + 1));
    }
  }
  return absl::OkStatus();
}

absl::Status Unpacker::Own(int dirfd, const char* name, int fd, const Meta& meta, bool is_dir) {
  if (options_.set_owners) {
    constexpr int64_t kMaxId = UINT32_MAX - 1;
    int64_t uid = meta.uid + options_.id_offset;
    int64_t gid = meta.gid + options_.id_offset;
    if (meta.uid < 0 || meta.gid < 0 || uid > kMaxId || gid > kMaxId) {
      return InvalidArgument(fmt::format("owner {}:{} is out of range", meta.uid, meta.gid));
    }
    int rc = fd >= 0 ? ::fchown(fd, static_cast<uid_t>(uid), static_cast<gid_t>(gid))
                     : ::fchownat(dirfd, name, static_cast<uid_t>(uid), static_cast<gid_t>(gid),
                                  AT_SYMLINK_NOFOLLOW);
    if (rc != 0) return ErrnoStatus(errno, "chown");
  }
  if (fd >= 0) {
    // setuid/setgid files are never privileged in a sandbox (nosuid mounts, no_new_privs); the
    // bits are dropped so that the store holds no setuid file on the host either.
    mode_t mode = is_dir ? meta.mode : meta.mode & ~static_cast<mode_t>(S_ISUID | S_ISGID);
    // Without CAP_DAC_OVERRIDE a read-only directory could not be emptied again on removal.
    if (is_dir && !options_.set_owners) mode |= S_IRWXU;
    if (::fchmod(fd, mode) != 0) return ErrnoStatus(errno, "chmod");
  }
  struct timespec times[2] = {meta.mtime, meta.mtime};
  int rc = fd >= 0 ? ::futimens(fd, times) : ::utimensat(dirfd, name, times, AT_SYMLINK_NOFOLLOW);
  if (rc != 0) return ErrnoStatus(errno, "set times");
  return absl::OkStatus();
}

void Unpacker::MarkWritten(const std::string& path) {
  std::string p = path;
  while (!p.empty() && written_.insert(p).second) {
    size_t slash = p.rfind('/');
    if (slash == std::string::npos) break;
    p.resize(slash);
  }
}

void Unpacker::Report(bool force) {
  if (!options_.progress) return;
  if (!force && counters_.bytes - reported_bytes_ < kReportBytes &&
      counters_.entries - reported_entries_ < kReportEntries) {
    return;
  }
  reported_bytes_ = counters_.bytes;
  reported_entries_ = counters_.entries;
  options_.progress(counters_);
}

absl::Status Unpacker::Finish() {
  // Deepest first, and each directory once with the metadata of its last entry.
  std::vector<const DirEntry*> order;
  std::unordered_set<std::string_view> seen;
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    if (seen.insert(it->path).second) order.push_back(&*it);
  }
  std::stable_sort(order.begin(), order.end(), [](const DirEntry* x, const DirEntry* y) {
    return x->path.size() > y->path.size();
  });
  for (const DirEntry* d : order) {
    absl::StatusOr<UniqueFd> fd = guard_.OpenPath(d->path, O_RDONLY | O_DIRECTORY);
    if (!fd.ok()) continue;  // removed or replaced by a later layer
    RETURN_IF_ERROR(Own(-1, nullptr, fd->get(), d->meta, /*is_dir=*/true),
                    fmt::format("directory {:?}", d->path));
  }
  dirs_.clear();
  return absl::OkStatus();
}

}  // namespace airlock::image::internal
