// The node's local, content-addressed image store.
//
//   ASSIGN_OR_RETURN(auto store, ImageStore::Open({.dir = data_dir + "/images"}));
//   ASSIGN_OR_RETURN(std::vector<ImageInfo> got, store->Import("base.oci.tar", {}));
//   ASSIGN_OR_RETURN(Digest digest, store->Resolve(spec.image));   // at sandbox create time
//   ASSIGN_OR_RETURN(ImageLease lease, store->Acquire(digest));    // held while it runs
//   options.image_rootfs = lease.rootfs();                         // engine::SandboxOptions
//
// Import reads an OCI image layout (a directory, or a tar of one, possibly gzip/zstd
// compressed) or a `docker save` tarball. Every blob is verified against its sha256 digest
// before use; the image's layers are applied in order (OCI whiteouts and opaque directories)
// into a private temporary directory that is renamed into place only when complete, so a failed
// or interrupted import leaves nothing behind, and one root file system per image digest is
// shared read-only by every sandbox of the image. Layer entries are guarded (docs/images.md):
// absolute names, "..", writes through a symlink, and hard links leaving the root are refused
// with an error naming the entry and the layer; device nodes, fifos and sockets are skipped;
// setuid/setgid bits and extended attributes (file capabilities) are dropped.
//
// An image's digest is the sha256 of its OCI manifest. A docker save archive has no OCI
// manifest: the store writes the canonical one for its config and layers, so the same archive
// always gets the same digest.
//
// Layout of the store directory:
//   blobs/sha256/<hex>   verified blobs: manifests, configs, layers as imported
//   roots/<hex>          unpacked root file systems, by manifest digest
//   index.json           images (config, layers, owners, tags per owner, sizes, import time)
//   locks/, tmp/         per-image import locks; imports in progress
//   leases/<hex>         shared flocks of the leases on an image (every process sees them)
//
// Images have owners. An API key's imports are its own: its tags name images only for it, and
// another key neither sees nor removes them. The node's images (owner kNodeImages, imported by
// the node's operator) are seen by every owner and removed only by the node. Two owners importing
// the same image share one stored copy; it goes when its last owner removes it. Tags are per
// owner: an owner's own tag wins over a node tag of the same name.
//
// Thread-safe; several processes may share a store directory (index updates and imports take
// file locks). A lease is a shared lock on a file of its image (leases/<hex>), so Remove in any
// process sees the leases of all of them; `in_use` tells Remove about users no lease covers
// (sandboxes a restarted daemon re-adopted).
#ifndef AIRLOCK_IMAGE_IMAGE_STORE_H_
#define AIRLOCK_IMAGE_IMAGE_STORE_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "image/digest.h"

namespace airlock::image {

// The owner of the node's own images: every owner sees them.
inline constexpr std::string_view kNodeImages = "";

// What the image's config says about how its commands run. The node daemon applies these under
// the spec's rules: whatever the spec sets wins.
struct ImageConfig {
  std::vector<std::string> env;  // "NAME=value", in order
  std::string working_dir;
  std::string user;  // as written: "uid", "uid:gid", "name" or "name:group"
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::string os;
  std::string architecture;
  std::string created;  // RFC 3339 as written by the builder; may be empty
};

struct ImageInfo {
  Digest digest;  // of the manifest: the image's identity
  Digest config_digest;
  std::vector<Digest> layers;
  std::vector<std::string> tags;  // normalized "name:tag", sorted
  bool node = false;              // one of the node's images
  ImageConfig config;
  int64_t unpacked_bytes = 0;   // regular file data in the root file system
  int64_t blob_bytes = 0;       // manifest, config and layer blobs as stored
  int64_t entries = 0;          // archive entries applied over all layers
  int64_t skipped_entries = 0;  // device nodes, fifos and sockets (never created)
  std::chrono::system_clock::time_point imported;
};

// Bounds of one import, each checked while reading, so a decompression bomb stops early.
struct ImportLimits {
  // Bytes written: the archive's files while it is read, and the root file system's file
  // data over all layers (a file overwritten by a later layer counts twice).
  int64_t max_unpacked_bytes = int64_t{16} << 30;
  // Archive entries: the archive's own, and those of all layers together.
  int64_t max_entries = 1'000'000;
  // Bytes of one JSON document (index, manifest, config).
  int64_t max_json_bytes = 4 << 20;
};

struct ImportProgress {
  enum class Stage { kReadingArchive, kVerifying, kUnpacking, kDone };
  Stage stage = Stage::kReadingArchive;
  int layer = 0;  // 1-based, while unpacking
  int layers = 0;
  int64_t bytes_read = 0;     // input consumed in this stage (compressed bytes)
  int64_t bytes_written = 0;  // file data written in this stage
  int64_t entries = 0;        // archive entries done in this stage
};

struct ImportOptions {
  // Tags to give the imported image(s) on top of those the archive names ("name[:tag]").
  std::vector<std::string> tags;
  // Called on the importing thread at each stage and layer boundary and every few MiB.
  std::function<void(const ImportProgress&)> progress;
  // Who the images and tags belong to: an API key's id, or kNodeImages.
  std::string owner = std::string(kNodeImages);
  // Bytes the owner may hold (ImageInfo unpacked_bytes + blob_bytes over its images, each image
  // counted for every owner holding it); 0: no limit. An image that would take the owner beyond
  // is refused (ResourceExhausted) when it is committed, under the index lock, and nothing of it
  // is kept for the owner: no hold, no tag. Images of the same archive committed before it stay.
  int64_t max_owner_bytes = 0;
};

struct ImageStoreOptions {
  std::string dir;  // created (mode 0700) when missing
  ImportLimits limits;
  // Owners of unpacked files when the store runs as root: the image's uid/gid plus this offset,
  // so ids match those of sandboxes (engine::SandboxOptions::host_id_base) and no host account
  // owns image files. Unprivileged stores own every file themselves.
  uint32_t id_offset = 0;
  // Consulted by Remove besides the leases: return true when `digest` is still used (for
  // instance by a sandbox that another process created). May be empty.
  // `owner` given: whether a sandbox of that owner uses it (its hold stays while one does);
  // nullopt: whether any sandbox does (the image stays).
  std::function<bool(const Digest& digest, const std::optional<std::string>& owner)> in_use;
};

class ImageStore;

// Keeps an image from being removed while a sandbox uses its root file system. Move-only;
// releases on destruction. Must not outlive its ImageStore.
class ImageLease {
 public:
  ImageLease() = default;
  ImageLease(ImageLease&& other) noexcept;
  ImageLease& operator=(ImageLease&& other) noexcept;
  ImageLease(const ImageLease&) = delete;
  ImageLease& operator=(const ImageLease&) = delete;
  ~ImageLease();

  const Digest& digest() const { return digest_; }
  const std::string& rootfs() const { return rootfs_; }  // the shared read-only root
  void Release();

 private:
  friend class ImageStore;
  ImageLease(ImageStore* store, Digest digest, std::string rootfs, UniqueFd lock)
      : store_(store),
        digest_(std::move(digest)),
        rootfs_(std::move(rootfs)),
        lock_(std::move(lock)) {}
  ImageStore* store_ = nullptr;
  Digest digest_;
  std::string rootfs_;
  UniqueFd lock_;  // a shared flock on leases/<hex>, seen by Remove in every process
};

class ImageStore {
 public:
  static absl::StatusOr<std::unique_ptr<ImageStore>> Open(ImageStoreOptions options);
  ~ImageStore();

  // Imports every image of `path` (an OCI layout directory, a file holding a tar of one, or a
  // docker save tarball). Images already in the store are not unpacked again (their tags are
  // updated). Concurrent imports of the same image, in any process, unpack it once.
  // Errors: InvalidArgument for malformed archives and refused entries, DataLoss for a digest
  // mismatch, ResourceExhausted for a limit, FailedPrecondition for another platform's image.
  absl::StatusOr<std::vector<ImageInfo>> Import(const std::string& path,
                                                const ImportOptions& options = {});

  // The calls below act for `owner` and see what it sees: its own images and the node's. An
  // image it does not see is NotFound, as if it were not stored.

  // The digest a reference names (reference.h): the owner's tag, else the node's.
  absl::StatusOr<Digest> Resolve(std::string_view reference,
                                 std::string_view owner = kNodeImages) const;

  // ImageInfo::tags are the tags that resolve to the image for `owner`.
  absl::StatusOr<ImageInfo> Get(const Digest& digest, std::string_view owner = kNodeImages) const;
  // Every image the owner sees, newest import first.
  absl::StatusOr<std::vector<ImageInfo>> List(std::string_view owner = kNodeImages) const;

  // Points the owner's `tag` at the image (moving it from another image); removes one of its tags.
  absl::Status Tag(const Digest& digest, std::string_view tag,
                   std::string_view owner = kNodeImages);
  absl::Status Untag(std::string_view tag, std::string_view owner = kNodeImages);

  // Removes the owner's hold on the image a reference names, with its tags on it. When no other
  // owner holds it, the image goes: its root file system and the blobs no other image uses.
  // FailedPrecondition (and nothing changes) while a sandbox of the owner uses it, or, for the
  // last holder, while a lease is held or `in_use` says any sandbox does. PermissionDenied for a
  // node image asked by another owner.
  absl::Status Remove(std::string_view reference, std::string_view owner = kNodeImages);

  // The bytes the owner's images take (ImageInfo unpacked_bytes + blob_bytes over the images it
  // holds; the node's images it sees but did not import do not count), as ImportOptions::
  // max_owner_bytes counts them.
  absl::StatusOr<int64_t> HeldBytes(std::string_view owner) const;

  // Marks the image in use and returns its root file system. NotFound when it is not stored.
  absl::StatusOr<ImageLease> Acquire(const Digest& digest);
  int Leases(const Digest& digest) const;

  const std::string& dir() const { return options_.dir; }
  std::string RootfsPath(const Digest& digest) const;

 private:
  friend class ImageLease;
  explicit ImageStore(ImageStoreOptions options) : options_(std::move(options)) {}
  void ReleaseLease(const Digest& digest);

  ImageStoreOptions options_;
  mutable std::mutex mu_;
  std::map<Digest, int> leases_;  // guarded by mu_
};

}  // namespace airlock::image

#endif  // AIRLOCK_IMAGE_IMAGE_STORE_H_
