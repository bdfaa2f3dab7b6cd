// Image references as a spec's `image` and the image commands spell them.
//
//   sha256:<64 hex>                    an image by digest
//   [registry[:port]/]name[:tag]       a tag; ":latest" when none is given
//   ...name[:tag]@sha256:<64 hex>      pinned: the digest decides, the name is informational
//
// Tags are kept normalized: "docker.io/library/" and "docker.io/" are dropped, so
// "docker.io/library/debian:12" and "debian:12" name the same tag, as in docker.
#ifndef AIRLOCK_IMAGE_REFERENCE_H_
#define AIRLOCK_IMAGE_REFERENCE_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "image/digest.h"

namespace airlock::image {

struct Reference {
  std::string tag;  // normalized "name:tag"; empty for a bare digest
  Digest digest;    // set when the reference names one (then it wins over the tag)
};

// InvalidArgument naming the text when it is not a reference of the forms above.
absl::StatusOr<Reference> ParseReference(std::string_view text);

// A tag ("name" or "name:tag"), normalized; no digest allowed.
absl::StatusOr<std::string> NormalizeTag(std::string_view text);

}  // namespace airlock::image

#endif  // AIRLOCK_IMAGE_REFERENCE_H_
