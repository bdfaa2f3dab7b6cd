// Content digests of image blobs: "sha256:<64 lowercase hex>", the only algorithm airlock
// accepts (OCI's registered default).
#ifndef AIRLOCK_IMAGE_DIGEST_H_
#define AIRLOCK_IMAGE_DIGEST_H_

#include <compare>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace airlock::image {

class Digest {
 public:
  Digest() = default;

  // "sha256:<64 lowercase hex>"; anything else is InvalidArgument naming the text.
  static absl::StatusOr<Digest> Parse(std::string_view text);
  // From 64 lowercase hex digits (a computed sha256).
  static absl::StatusOr<Digest> FromHex(std::string_view hex);
  static bool IsHex64(std::string_view hex);

  const std::string& str() const { return value_; }  // "sha256:…"
  std::string_view hex() const { return std::string_view(value_).substr(7); }
  std::string Short() const { return value_.substr(0, 19); }  // "sha256:" + 12 digits
  bool empty() const { return value_.empty(); }

  friend bool operator==(const Digest&, const Digest&) = default;
  friend auto operator<=>(const Digest&, const Digest&) = default;
  friend std::ostream& operator<<(std::ostream& os, const Digest& d) { return os << d.value_; }

 private:
  explicit Digest(std::string value) : value_(std::move(value)) {}
  std::string value_;
};

}  // namespace airlock::image

template <>
struct std::hash<airlock::image::Digest> {
  size_t operator()(const airlock::image::Digest& d) const {
    return std::hash<std::string>()(d.str());
  }
};

#endif  // AIRLOCK_IMAGE_DIGEST_H_
