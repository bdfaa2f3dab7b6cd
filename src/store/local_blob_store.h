// The BlobStore in a local directory: the embedded default (DATA_DIR/blobs).
//
// A blob is the file DIR/sha256/<2 hex>/<64 hex> (mode 0600; directories 0700). It is written
// to DIR/tmp, synced, and renamed into place, so a reader never sees a partial blob and a crash
// leaves at most a temporary file; Open removes temporary files older than an hour (younger
// ones may belong to a writer in another process).
#ifndef AIRLOCK_STORE_LOCAL_BLOB_STORE_H_
#define AIRLOCK_STORE_LOCAL_BLOB_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "store/blob_store.h"

namespace airlock::store {

// Opens (creating when absent) the blob store in `dir`.
[[nodiscard]] absl::StatusOr<std::unique_ptr<BlobStore>> OpenLocalBlobStore(const std::string& dir);

}  // namespace airlock::store

#endif  // AIRLOCK_STORE_LOCAL_BLOB_STORE_H_
