#include "store/blob_store.h"

#include <algorithm>

namespace airlock::store {
namespace {
constexpr std::string_view kPrefix = "sha256:";
}  // namespace

bool IsValidBlobKey(std::string_view key) {
  if (key.size() != kPrefix.size() + 64 || key.substr(0, kPrefix.size()) != kPrefix) return false;
  key.remove_prefix(kPrefix.size());
  return std::all_of(key.begin(), key.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string BlobKeyForSha256(std::string_view sha256_hex) {
  return std::string(kPrefix) + std::string(sha256_hex);
}

}  // namespace airlock::store
