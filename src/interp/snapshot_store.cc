#include "interp/snapshot_store.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "common/files.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "fmt/format.h"

namespace airlock::interp {
namespace {

constexpr size_t kMaxSnapshotBytes = size_t{1} << 31;

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string Parent(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileSnapshotStore>> FileSnapshotStore::Open(std::string dir) {
  RETURN_IF_ERROR_CTX(MakeDirs(dir, 0700), "open snapshot store");
  return std::unique_ptr<FileSnapshotStore>(new FileSnapshotStore(std::move(dir)));
}

absl::StatusOr<std::string> FileSnapshotStore::PathOf(std::string_view name) const {
  if (!ValidName(name)) return InvalidArgument(fmt::format("bad snapshot name '{}'", name));
  return fmt::format("{}/{}.snap", dir_, name);
}

absl::Status FileSnapshotStore::Put(std::string_view name, std::string_view snapshot) {
  ASSIGN_OR_RETURN(std::string path, PathOf(name));
  return WriteFileAtomic(path, snapshot, 0600);
}

absl::StatusOr<std::string> FileSnapshotStore::Get(std::string_view name) {
  ASSIGN_OR_RETURN(std::string path, PathOf(name));
  return ReadFile(path, kMaxSnapshotBytes);
}

absl::Status FileSnapshotStore::Delete(std::string_view name) {
  ASSIGN_OR_RETURN(std::string path, PathOf(name));
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, fmt::format("delete {}", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LoadOrCreateKeyFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return ErrnoStatus(errno, fmt::format("stat {}", path));
    RETURN_IF_ERROR(MakeDirs(Parent(path), 0700));
    std::string key(32, '\0');
    if (::getrandom(key.data(), key.size(), 0) != static_cast<ssize_t>(key.size())) {
      return ErrnoStatus(errno, "getrandom");
    }
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fd) {
      RETURN_IF_ERROR_CTX(WriteAll(fd.get(), key), fmt::format("write {}", path));
      return key;
    }
    if (errno != EEXIST) return ErrnoStatus(errno, fmt::format("create {}", path));
    // Another process created it first: read theirs.
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, fmt::format("stat {}", path));
  }
  if ((st.st_mode & 077) != 0) {
    return PermissionDenied(fmt::format(
        "key file {} is readable by others (mode {:o}); chmod 600 it", path, st.st_mode & 0777));
  }
  ASSIGN_OR_RETURN(std::string key, ReadFile(path, 4096));
  if (key.size() < 16) {
    return InvalidArgument(fmt::format("key file {}: shorter than 16 bytes", path));
  }
  return key;
}

std::string DefaultKeyFilePath() {
  if (const char* p = std::getenv("AIRLOCK_INTERP_KEY_FILE"); p != nullptr && *p != '\0') {
    return p;
  }
  if (const char* p = std::getenv("XDG_STATE_HOME"); p != nullptr && *p == '/') {
    return fmt::format("{}/airlock/interp.key", p);
  }
  const char* home = std::getenv("HOME");
  return fmt::format("{}/.local/state/airlock/interp.key", home != nullptr ? home : "");
}

}  // namespace airlock::interp
