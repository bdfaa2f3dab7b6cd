// The JSON documents of OCI image layouts and docker save archives, parsed into plain structs.
// Every function takes untrusted text and fails with InvalidArgument naming the field.
#ifndef AIRLOCK_IMAGE_INTERNAL_MANIFEST_H_
#define AIRLOCK_IMAGE_INTERNAL_MANIFEST_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "image/digest.h"
#include "image/image_store.h"

namespace airlock::image::internal {

inline constexpr std::string_view kOciManifestType = "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view kOciConfigType = "application/vnd.oci.image.config.v1+json";
inline constexpr std::string_view kOciLayerType = "application/vnd.oci.image.layer.v1.tar";

struct Platform {
  std::string os;
  std::string architecture;
  std::string variant;
};

struct Descriptor {
  std::string media_type;
  Digest digest;
  int64_t size = 0;
  std::map<std::string, std::string> annotations;
  Platform platform;  // empty fields when the descriptor has none
};

bool IsIndexType(std::string_view media_type);
bool IsManifestType(std::string_view media_type);
// A tar layer, uncompressed, gzip or zstd (OCI or docker media types); not an encrypted one.
bool IsLayerType(std::string_view media_type);

// oci-layout: {"imageLayoutVersion": "1.0.0"}.
absl::Status CheckLayoutFile(std::string_view json);

// An image index (index.json, or a nested one): its manifests.
absl::StatusOr<std::vector<Descriptor>> ParseIndex(std::string_view json);

struct Manifest {
  Descriptor config;
  std::vector<Descriptor> layers;
};
absl::StatusOr<Manifest> ParseManifest(std::string_view json);

struct ConfigDocument {
  ImageConfig config;
  std::vector<Digest> diff_ids;  // rootfs.diff_ids: digests of the uncompressed layers
};
absl::StatusOr<ConfigDocument> ParseConfig(std::string_view json);

// One image of a docker save archive's manifest.json.
struct DockerImage {
  std::string config;  // path in the archive
  std::vector<std::string> repo_tags;
  std::vector<std::string> layers;  // paths in the archive
};
absl::StatusOr<std::vector<DockerImage>> ParseDockerManifest(std::string_view json);

// The OCI manifest for a config and uncompressed layers, byte for byte the same every time.
std::string CanonicalManifest(const Descriptor& config, const std::vector<Descriptor>& layers);

// The platform this process runs on, in OCI terms ("linux", "amd64").
Platform HostPlatform();

}  // namespace airlock::image::internal

#endif  // AIRLOCK_IMAGE_INTERNAL_MANIFEST_H_
