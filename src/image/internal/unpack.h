// Applies tar archives (image layers, or the archive an image came in) to a directory with
// every entry guarded. Used by the image store only.
#ifndef AIRLOCK_IMAGE_INTERNAL_UNPACK_H_
#define AIRLOCK_IMAGE_INTERNAL_UNPACK_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pathguard/path_guard.h"

struct archive;
struct archive_entry;

namespace airlock::image::internal {

struct UnpackCounters {
  int64_t bytes = 0;        // regular file data written (declared sizes)
  int64_t entries = 0;      // archive entries read
  int64_t skipped = 0;      // device nodes, fifos, sockets
  int64_t input_bytes = 0;  // compressed input consumed by the current archive
};

struct UnpackOptions {
  int64_t max_bytes = 0;
  int64_t max_entries = 0;
  // OCI whiteouts: ".wh.NAME" removes NAME, ".wh..wh..opq" hides what lower layers put in its
  // directory. Off for the archive an image came in, whose names are plain files.
  bool whiteouts = true;
  // chown entries to their uid/gid + id_offset (needs CAP_CHOWN); otherwise the caller owns all.
  bool set_owners = false;
  uint32_t id_offset = 0;
  std::function<void(const UnpackCounters&)> progress;  // every few MiB/entries and at the end
};

// Not thread-safe. The root must be an empty directory that nothing else writes to.
class Unpacker {
 public:
  static absl::StatusOr<std::unique_ptr<Unpacker>> Create(const std::string& root,
                                                          UnpackOptions options);

  // Applies one archive (tar: ustar, pax or GNU; uncompressed, gzip, zstd, xz or bzip2) read
  // from `fd`. `name` prefixes every error: "layer 2/3 (sha256:…): entry \"a/b\": …".
  absl::Status Apply(int fd, std::string_view name);

  // Gives directories their modes, owners and times, last: a read-only directory from an early
  // layer must still take later layers' files.
  absl::Status Finish();

  const UnpackCounters& counters() const { return counters_; }

 private:
  struct Meta {
    mode_t mode;
    int64_t uid;
    int64_t gid;
    struct timespec mtime;
  };
  struct DirEntry {
    std::string path;
    Meta meta;
  };

  Unpacker(PathGuard guard, UnpackOptions options)
      : guard_(std::move(guard)), options_(std::move(options)) {}

  absl::Status ApplyEntry(::archive* a, ::archive_entry* e, const std::string& path);
  absl::Status WriteFile(::archive* a, ::archive_entry* e, int dirfd, const std::string& name,
                         const Meta& meta);
  absl::Status HardLink(::archive_entry* e, int dirfd, const std::string& name,
                        const std::string& path);
  // The parent directory of `path`, creating missing directories (0755) on the way.
  absl::StatusOr<PathGuard::Parent> OpenParent(const std::string& path);
  // Removes whatever is at `name` in `dirfd` (a directory recursively); absent is fine.
  absl::Status RemoveAt(const std::string& path);
  absl::Status MakeOpaque(const std::string& dir);
  absl::Status HideLower(int dirfd, const std::string& dir, int depth);
  // Owner, mode (setuid/setgid dropped) and mtime of what `fd` is open on, or of the symlink
  // `name` in `dirfd` when fd is -1.
  absl::Status Own(int dirfd, const char* name, int fd, const Meta& meta, bool is_dir);
  void MarkWritten(const std::string& path);
  void Report(bool force);

  PathGuard guard_;
  UnpackOptions options_;
  UnpackCounters counters_;
  std::unordered_set<std::string> written_;  // paths this archive wrote (opaque directories)
  std::vector<DirEntry> dirs_;
  int64_t reported_bytes_ = 0;
  int64_t reported_entries_ = 0;
};

// Normalizes an archive entry's name: "./a//b/" -> "a/b"; "" for the root itself. Absolute
// names, "..", NUL bytes and over-long names are refused (PermissionDenied or InvalidArgument).
absl::StatusOr<std::string> CleanEntryPath(std::string_view raw);

}  // namespace airlock::image::internal

#endif  // AIRLOCK_IMAGE_INTERNAL_UNPACK_H_
