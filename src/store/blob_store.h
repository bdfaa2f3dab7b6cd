// The blob store: contents too large or too opaque for the database (artifact files, raw command
// logs, interpreter snapshots), addressed by their SHA-256. Records in the Store refer to blobs
// by key. A local directory implements it now (store/local_blob_store.h); S3-compatible storage
// is the second implementation. Both run blob_store_contract_test.cc.
//
// Keys are "sha256:<64 lowercase hex digits>" of the content, so storing the same bytes twice
// gives the same key and a key is safe to use in a path or an object name. Every method is
// thread-safe, and several processes may share one blob store.
#ifndef AIRLOCK_STORE_BLOB_STORE_H_
#define AIRLOCK_STORE_BLOB_STORE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace airlock::store {

// "sha256:" followed by 64 lowercase hex digits.
bool IsValidBlobKey(std::string_view key);

// The key of content whose SHA-256 is `sha256_hex`.
std::string BlobKeyForSha256(std::string_view sha256_hex);

class BlobStore {
 public:
  virtual ~BlobStore() = default;

  // Stores `data` and returns its key. A reader never sees part of a blob.
  [[nodiscard]] virtual absl::StatusOr<std::string> Put(std::string_view data) = 0;

  // Stores what `fd` yields until end of file, without holding it in memory, and returns its
  // key. ResourceExhausted (and nothing stored) when it is longer than `max_bytes`.
  [[nodiscard]] virtual absl::StatusOr<std::string> PutFromFd(int fd, uint64_t max_bytes) = 0;

  // The content of a blob. InvalidArgument for a malformed key, NotFound when absent,
  // ResourceExhausted when larger than `max_bytes`, DataLoss when the stored bytes no longer
  // hash to the key.
  [[nodiscard]] virtual absl::StatusOr<std::string> Get(std::string_view key,
                                                        uint64_t max_bytes) = 0;

  // The size of a blob in bytes (InvalidArgument, NotFound as for Get).
  [[nodiscard]] virtual absl::StatusOr<uint64_t> Size(std::string_view key) = 0;

  // Removes a blob; OK when it is absent.
  [[nodiscard]] virtual absl::Status Delete(std::string_view key) = 0;
};

}  // namespace airlock::store

#endif  // AIRLOCK_STORE_BLOB_STORE_H_
