// Resolves user-supplied paths beneath a root directory and never outside it.
//
// Every file operation on behalf of a caller (upload, download, list, artifact collection)
// goes through a PathGuard. A path is interpreted relative to the root ("/a/b" and "a/b" are
// the same); a ".." component, a NUL byte or an over-long path is refused outright; symlinks are
// resolved by the kernel with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), so one that
// leaves the root, an absolute one, or a /proc magic link fails instead of being followed. On
// kernels without openat2 the guard walks the path one component at a time with O_NOFOLLOW and
// refuses every symlink. Creating, renaming and removing go through the parent directory's
// descriptor, so the last component is never followed.
//
// Thread-safe: a PathGuard holds one directory descriptor and no other state.
#ifndef AIRLOCK_PATHGUARD_PATH_GUARD_H_
#define AIRLOCK_PATHGUARD_PATH_GUARD_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace airlock {

// How paths are resolved. kComponentWalk is the fallback for kernels without openat2; tests
// force it to run the same suite against both.
enum class ResolveMode { kOpenat2, kComponentWalk, kAuto };

// What a symlink on the way does. kFollowBeneath follows it as long as it stays beneath the root
// (openat2 mode; the component walk refuses every symlink anyway). kRefuse refuses every symlink
// on the way in both modes, for trees whose symlinks are data, never paths to take (an image
// being unpacked: an entry must not be written through a symlink an earlier entry planted).
enum class SymlinkPolicy { kFollowBeneath, kRefuse };

class PathGuard {
 public:
  static constexpr size_t kMaxPathBytes = 4096;

  // Opens `root` (which itself may be reached through symlinks: it is trusted).
  static absl::StatusOr<PathGuard> Open(const std::string& root,
                                        ResolveMode mode = ResolveMode::kAuto,
                                        SymlinkPolicy symlinks = SymlinkPolicy::kFollowBeneath);

  // The parent directory of a path and its validated last component.
  struct Parent {
    UniqueFd dir;
    std::string name;  // never empty, ".", ".." and never contains '/'
  };

  struct Entry {
    std::string name;
    struct stat st;  // lstat semantics: a symlink is reported as a symlink
  };

  // Opens an existing file or directory (flags as for open(2); O_CREAT is refused: create
  // through OpenParent so the name is checked). Anything else (a FIFO, a socket or a device that
  // code under the root planted, on which an open or a read could block) is InvalidArgument.
  absl::StatusOr<UniqueFd> OpenPath(std::string_view path, int flags) const;

  // Opens the parent directory of `path` (which must not be the root itself).
  absl::StatusOr<Parent> OpenParent(std::string_view path) const;

  // Creates (or truncates) a regular file; never follows a symlink at the last component.
  absl::StatusOr<UniqueFd> CreateFile(std::string_view path, mode_t mode, bool exclusive) const;

  absl::Status Mkdir(std::string_view path, mode_t mode, bool parents) const;

  // lstat of the path.
  absl::StatusOr<struct stat> Stat(std::string_view path) const;

  absl::StatusOr<std::vector<Entry>> List(std::string_view path) const;

  // Removes a file, a symlink or (with `recursive`) a directory tree. Symlinks are removed, never
  // followed; a mount point inside the tree stops the removal with an error.
  absl::Status Remove(std::string_view path, bool recursive) const;

  ResolveMode mode() const { return mode_; }
  int root_fd() const { return root_.get(); }

  PathGuard(PathGuard&&) = default;
  PathGuard& operator=(PathGuard&&) = default;

 private:
  PathGuard(UniqueFd root, ResolveMode mode, SymlinkPolicy symlinks)
      : root_(std::move(root)), mode_(mode), symlinks_(symlinks) {}

  // The components of a validated path; empty for the root.
  static absl::StatusOr<std::vector<std::string>> Split(std::string_view path);
  absl::StatusOr<UniqueFd> Resolve(const std::vector<std::string>& parts, size_t count, int flags,
                                   std::string_view shown) const;

  UniqueFd root_;
  ResolveMode mode_;
  SymlinkPolicy symlinks_;
};

}  // namespace airlock

#endif  // AIRLOCK_PATHGUARD_PATH_GUARD_H_
