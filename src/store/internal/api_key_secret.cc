#include "store/internal/api_key_secret.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>

#include "absl/status/status.h"
#include "fmt/format.h"

namespace airlock::store::internal {
namespace {

constexpr std::string_view kTokenPrefix = "ak_";
constexpr size_t kIdHexLen = 12;
constexpr size_t kSecretHexLen = 64;

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

std::string FormatToken(const ApiKeyId& id, std::string_view secret) {
  std::string_view hex(id.value());
  hex.remove_prefix(std::min(hex.size(), ApiKeyIdTag::kPrefix.size()));
  return fmt::format("{}{}_{}", kTokenPrefix, hex, secret);
}

absl::StatusOr<ParsedToken> ParseToken(std::string_view token) {
  const absl::Status malformed = absl::UnauthenticatedError("malformed API key");
  if (token.size() != kTokenPrefix.size() + kIdHexLen + 1 + kSecretHexLen ||
      token.substr(0, kTokenPrefix.size()) != kTokenPrefix) {
    return malformed;
  }
  std::string_view id_hex = token.substr(kTokenPrefix.size(), kIdHexLen);
  std::string_view secret = token.substr(kTokenPrefix.size() + kIdHexLen + 1);
  if (token[kTokenPrefix.size() + kIdHexLen] != '_' || !IsLowerHex(id_hex) || !IsLowerHex(secret)) {
    return malformed;
  }
  return ParsedToken{ApiKeyId(fmt::format("{}{}", ApiKeyIdTag::kPrefix, id_hex)),
                     std::string(secret)};
}

std::string HashSecret(std::string_view salt, std::string_view secret) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), salt.data(), static_cast<int>(salt.size()),
       reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), mac, &len);
  std::string hex;
  hex.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", mac[i]);
  return hex;
}

bool SecretMatches(std::string_view salt, std::string_view secret, std::string_view stored_hash) {
  std::string computed = HashSecret(salt, secret);
  return computed.size() == stored_hash.size() &&
         CRYPTO_memcmp(computed.data(), stored_hash.data(), computed.size()) == 0;
}

}  // namespace airlock::store::internal
