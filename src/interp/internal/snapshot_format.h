// The snapshot file format of a paused interpreter session (docs/interp.md):
//
//   "AIRLOCK-QJS-SNAP" (16 bytes) | u32 format version | u32 n | build id (n bytes, hex sha256 of
//   the .wasm) | u64 body size | u64 m | zstd (level 2) of the body (m bytes) | HMAC-SHA256 over
//   everything before (32 bytes)
//
//   body = u32 k | host state JSON (k bytes) | u32 pages (64 KiB) | bitmap of the non-zero 4 KiB
//          blocks ((pages*16+7)/8 bytes, LSB first) | the non-zero blocks, in order
//
// All integers little-endian. The HMAC is checked before anything else is believed; the build id
// only after it.
#ifndef AIRLOCK_INTERP_INTERNAL_SNAPSHOT_FORMAT_H_
#define AIRLOCK_INTERP_INTERNAL_SNAPSHOT_FORMAT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace airlock::interp::internal {

inline constexpr uint32_t kSnapshotFormatVersion = 1;

struct SnapshotImage {
  std::string build_id;
  std::string host_state;  // JSON written by the session
  uint32_t pages = 0;
  std::string bitmap;  // (pages * 16 + 7) / 8 bytes: one bit per 4 KiB block
  std::string data;    // the non-zero blocks
};

// Builds bitmap and data from a linear memory of `pages` pages.
void CapturePages(const uint8_t* memory, uint32_t pages, SnapshotImage* image);

absl::StatusOr<std::string> EncodeSnapshot(const SnapshotImage& image, std::string_view key);

enum class BuildCheck { kSameBuild, kAnyBuild };
// PermissionDenied: bad HMAC (tampered, or another key). FailedPrecondition: another build (with
// kSameBuild). InvalidArgument: not a snapshot, or malformed.
absl::StatusOr<SnapshotImage> DecodeSnapshot(std::string_view bytes, std::string_view key,
                                             std::string_view this_build, BuildCheck check);

}  // namespace airlock::interp::internal

#endif  // AIRLOCK_INTERP_INTERNAL_SNAPSHOT_FORMAT_H_
