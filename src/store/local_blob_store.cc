#include "store/local_blob_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "common/files.h"
#include "common/ids.h"
#include "common/logging.h"
#include "common/sha256.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "fmt/format.h"

namespace airlock::store {
namespace {

constexpr time_t kStaleTempSeconds = 3600;
constexpr size_t kChunk = 1 << 16;

absl::Status CheckKey(std::string_view key) {
  if (IsValidBlobKey(key)) return absl::OkStatus();
  return absl::InvalidArgumentError("malformed blob key (want sha256:<64 lowercase hex digits>)");
}

// The digest part of a valid key.
std::string HexOf(std::string_view key) { return std::string(key.substr(key.find(':') + 1)); }

absl::Status SyncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(errno, fmt::format("open {}", dir));
  if (::fsync(fd.get()) != 0) return ErrnoStatus(errno, fmt::format("fsync {}", dir));
  return absl::OkStatus();
}

// A temporary file in DIR/tmp that is removed unless committed.
class TempBlob {
 public:
  static absl::StatusOr<TempBlob> Create(const std::string& tmp_dir) {
    TempBlob t;
    t.path_ = fmt::format("{}/{}", tmp_dir, RandomHex(12));
    t.fd_ = UniqueFd(::open(t.path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!t.fd_) return ErrnoStatus(errno, fmt::format("create {}", t.path_));
    return t;
  }
  TempBlob(TempBlob&& other) noexcept
      : path_(std::exchange(other.path_, "")), fd_(std::move(other.fd_)) {}
  TempBlob& operator=(TempBlob&&) = delete;
  ~TempBlob() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }

  int fd() const { return fd_.get(); }

  // Syncs the file and renames it to `target` (creating its directory).
  absl::Status Commit(const std::string& dir, const std::string& target) {
    if (::fsync(fd_.get()) != 0) return ErrnoStatus(errno, fmt::format("fsync {}", path_));
    fd_.Reset();
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, fmt::format("mkdir {}", dir));
    }
    if (::rename(path_.c_str(), target.c_str()) != 0) {
      return ErrnoStatus(errno, fmt::format("rename {} to {}", path_, target));
    }
    path_.clear();
    return SyncDir(dir);
  }

 private:
  TempBlob() = default;
  std::string path_;
  UniqueFd fd_;
};

class LocalBlobStore final : public BlobStore {
 public:
  explicit LocalBlobStore(std::string dir)
      : dir_(std::move(dir)), tmp_(dir_ + "/tmp"), objects_(dir_ + "/sha256") {}

  absl::Status Init() {
    RETURN_IF_ERROR(MakeDirs(tmp_, 0700));
    RETURN_IF_ERROR(MakeDirs(objects_, 0700));
    RemoveStaleTemps();
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Put(std::string_view data) override {
    std::string hex = Sha256Hex(data);
    std::string key = BlobKeyForSha256(hex);
    if (::access(PathOf(hex).c_str(), F_OK) == 0) return key;
    ASSIGN_OR_RETURN(TempBlob temp, TempBlob::Create(tmp_), "put blob");
    RETURN_IF_ERROR(WriteAll(temp.fd(), data), "put blob");
    RETURN_IF_ERROR(temp.Commit(ShardOf(hex), PathOf(hex)), "put blob");
    return key;
  }

  absl::StatusOr<std::string> PutFromFd(int fd, uint64_t max_bytes) override {
    ASSIGN_OR_RETURN(TempBlob temp, TempBlob::Create(tmp_), "put blob");
    Sha256 hash;
    uint64_t total = 0;
    std::string buf(kChunk, '\0');
    for (;;) {
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "put blob: read");
      }
      if (n == 0) break;
      total += static_cast<uint64_t>(n);
      if (total > max_bytes) {
        return ResourceExhausted(fmt::format("put blob: longer than {} bytes", max_bytes));
      }
      std::string_view chunk(buf.data(), static_cast<size_t>(n));
      hash.Update(chunk);
      RETURN_IF_ERROR(WriteAll(temp.fd(), chunk), "put blob");
    }
    std::string hex = hash.HexDigest();
    RETURN_IF_ERROR(temp.Commit(ShardOf(hex), PathOf(hex)), "put blob");
    return BlobKeyForSha256(hex);
  }

  absl::StatusOr<std::string> Get(std::string_view key, uint64_t max_bytes) override {
    std::string context = fmt::format("get blob {}", key);
    RETURN_IF_ERROR(CheckKey(key), context);
    std::string hex = HexOf(key);
    absl::StatusOr<std::string> data = ReadFile(PathOf(hex), max_bytes);
    if (!data.ok()) {
      if (absl::IsNotFound(data.status())) return NotFound(context + ": no such blob");
      return Annotate(data.status(), context);
    }
    if (Sha256Hex(*data) != hex) {
      return absl::DataLossError(
          fmt::format("{}: the stored content no longer matches its key", context));
    }
    return data;
  }
  absl::StatusOr<uint64_t> Size(std::string_view key) override {
    std::string context = fmt::format("stat blob {}", key);
    RETURN_IF_ERROR(CheckKey(key), context);
    struct stat st;
    if (::lstat(PathOf(HexOf(key)).c_str(), &st) != 0) {
      if (errno == ENOENT) return NotFound(context + ": no such blob");
      return ErrnoStatus(errno, context);
    }
    return static_cast<uint64_t>(st.st_size);
  }

  absl::Status Delete(std::string_view key) override {
    std::string context = fmt::format("delete blob {}", key);
    RETURN_IF_ERROR(CheckKey(key), context);
    if (::unlink(PathOf(HexOf(key)).c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, context);
    }
    return absl::OkStatus();
  }

 private:
  std::string ShardOf(const std::string& hex) const {
    return fmt::format("{}/{}", objects_, hex.substr(0, 2));
  }
  std::string PathOf(const std::string& hex) const {
    return fmt::format("{}/{}/{}", objects_, hex.substr(0, 2), hex);
  }

  void RemoveStaleTemps() {
    DIR* d = ::opendir(tmp_.c_str());
    if (d == nullptr) return;
    const time_t now = ::time(nullptr);
    while (struct dirent* e = ::readdir(d)) {
      std::string_view name(e->d_name);
      if (name == "." || name == "..") continue;
      struct stat st;
      if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (S_ISREG(st.st_mode) && now - st.st_mtime > kStaleTempSeconds) {
        if (::unlinkat(::dirfd(d), e->d_name, 0) != 0) {
          GetLogger("store").Warn("cannot remove a stale blob temp file",
                                  {{"path", fmt::format("{}/{}", tmp_, name)}});
        }
      }
    }
    ::closedir(d);
  }

  const std::string dir_;
  const std::string tmp_;
  const std::string objects_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BlobStore>> OpenLocalBlobStore(const std::string& dir) {
  auto store = std::make_unique<LocalBlobStore>(dir);
  RETURN_IF_ERROR(store->Init(), fmt::format("open blob store {}", dir));
  return store;
}

}  // namespace airlock::store
