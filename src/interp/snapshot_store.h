// Where paused interpreter sessions wait: a small seam in front of the platform's store/blob store
// (which do not exist yet). FileSnapshotStore keeps one file per snapshot in a directory.
// Snapshots are signed (HMAC) by the session, so a store needs no integrity of its own.
#ifndef AIRLOCK_INTERP_SNAPSHOT_STORE_H_
#define AIRLOCK_INTERP_SNAPSHOT_STORE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace airlock::interp {

class SnapshotStore {
 public:
  virtual ~SnapshotStore() = default;
  // Names are 1-128 characters of [A-Za-z0-9._-], not starting with '.'; InvalidArgument else.
  virtual absl::Status Put(std::string_view name, std::string_view snapshot) = 0;
  // NotFound when absent.
  virtual absl::StatusOr<std::string> Get(std::string_view name) = 0;
  // OK when absent.
  virtual absl::Status Delete(std::string_view name) = 0;
};

// Thread-safe (each Put is an atomic rename). Files are 0600 in a 0700 directory.
class FileSnapshotStore : public SnapshotStore {
 public:
  static absl::StatusOr<std::unique_ptr<FileSnapshotStore>> Open(std::string dir);
  absl::Status Put(std::string_view name, std::string_view snapshot) override;
  absl::StatusOr<std::string> Get(std::string_view name) override;
  absl::Status Delete(std::string_view name) override;

 private:
  explicit FileSnapshotStore(std::string dir) : dir_(std::move(dir)) {}
  absl::StatusOr<std::string> PathOf(std::string_view name) const;
  std::string dir_;
};

// The snapshot key in `path`, created (32 random bytes, mode 0600, parent directories 0700) when
// the file does not exist. Refuses a key file readable by group or others, or shorter than 16
// bytes.
absl::StatusOr<std::string> LoadOrCreateKeyFile(const std::string& path);

// $AIRLOCK_INTERP_KEY_FILE, else $XDG_STATE_HOME/airlock/interp.key, else
// $HOME/.local/state/airlock/interp.key.
std::string DefaultKeyFilePath();

}  // namespace airlock::interp

#endif  // AIRLOCK_INTERP_SNAPSHOT_STORE_H_
