#include "image/digest.h"

#include "common/status.h"
#include "fmt/format.h"

namespace airlock::image {

bool Digest::IsHex64(std::string_view hex) {
  if (hex.size() != 64) return false;
  for (char c : hex) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::StatusOr<Digest> Digest::Parse(std::string_view text) {
  constexpr std::string_view kPrefix = "sha256:";
  if (text.substr(0, kPrefix.size()) != kPrefix || !IsHex64(text.substr(kPrefix.size()))) {
    return InvalidArgument(
        fmt::format("{:?} is not a digest (sha256: and 64 lowercase hex digits)", text));
  }
  return Digest(std::string(text));
}

absl::StatusOr<Digest> Digest::FromHex(std::string_view hex) {
  return Parse(fmt::format("sha256:{}", hex));
}

}  // namespace airlock::image
