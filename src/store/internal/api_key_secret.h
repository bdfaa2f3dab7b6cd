// API key tokens and the hash the store keeps of their secrets (see store.h, "API keys").
#ifndef AIRLOCK_STORE_INTERNAL_API_KEY_SECRET_H_
#define AIRLOCK_STORE_INTERNAL_API_KEY_SECRET_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/ids.h"

namespace airlock::store::internal {

struct ParsedToken {
  ApiKeyId id;
  std::string secret;  // 64 lowercase hex digits
};

// "ak_<12 hex>_<64 hex>" for key "ak-<12 hex>".
std::string FormatToken(const ApiKeyId& id, std::string_view secret);

// Unauthenticated ("malformed API key") for anything that is not a token; the message never
// contains the input.
absl::StatusOr<ParsedToken> ParseToken(std::string_view token);

// Lowercase hex HMAC-SHA256 of `secret` keyed with `salt`.
std::string HashSecret(std::string_view salt, std::string_view secret);

// Whether HashSecret(salt, secret) equals `stored_hash`, compared in constant time.
bool SecretMatches(std::string_view salt, std::string_view secret, std::string_view stored_hash);

}  // namespace airlock::store::internal

#endif  // AIRLOCK_STORE_INTERNAL_API_KEY_SECRET_H_
